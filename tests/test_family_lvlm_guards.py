"""Every task family asks its LVLM through the harness (`lvlm.run.ask_requests`), so both error guards hold
there as for SOCO-LVLM: a server that refuses connections, answers HTTP 500, or fails one distinct request in
three under `max_error_rate: 0.1` gives LvlmRunError naming the cause (no table, so no score), and a rerun
after the server recovers asks only the requests whose answers are not cached yet."""

from __future__ import annotations

import hashlib
import socket
import threading

import numpy as np
import pytest

from soco_pipeline.lvlm.backends import build_backend
from soco_pipeline.lvlm.cache import AnswerCache
from soco_pipeline.lvlm.run import LvlmRunError
from soco_pipeline.lvlm.server import HttpReply, serve
from tests.lvlm_helpers import content_key, openai_spec

pytestmark = pytest.mark.stack  # a real HTTP server on loopback


def _mmvm(root):
    from soco_pipeline.tasks.mmvm.answers import run_lvlm
    from soco_pipeline.tasks.mmvm.generator import generate
    from soco_pipeline.tasks.mmvm.prompt import build_items
    from tests.test_mmvm_core import tiny_config

    cfg = tiny_config(cases={"train": 1, "test": 12})
    t = generate(cfg, str(root / "gen"))
    items = build_items(t["cases"], t["objects"], t["images"], cfg, str(root / "marked"))

    def run(spec, cache):
        return run_lvlm(items, spec, build_backend(spec), cache)["parsed"].tolist()

    return "A", run


def _fgbmk(root):
    from soco_pipeline.tasks.fgbmk.answers import ask
    from soco_pipeline.tasks.fgbmk.config import load_config
    from soco_pipeline.tasks.fgbmk.embedded import ensure_embedded, hierarchy
    from soco_pipeline.tasks.fgbmk.questions import build_questions

    subs = ["zebra", "horse", "donkey", "taxi", "car", "chair"]
    cfg = load_config(embedded={"images_per_subclass": {"train": 1, "test": 1}})
    items = ensure_embedded(str(root / "set"), cfg.embedded, subclasses=subs, workers=1)
    q = build_questions(items, hierarchy(subclasses=subs), cfg.questions)
    q = q.drop_duplicates(["uri", "text"]).head(24).reset_index(drop=True)

    def run(spec, cache):
        return ask(q, spec, build_backend(spec), cache)["correct"].tolist()

    return "Yes.", run


def _tpips(root):
    from soco_pipeline.tasks.tpips.images import write_images
    from soco_pipeline.tasks.tpips.lvlm import ooo_answers
    from soco_pipeline.tasks.tpips.ooo import annotate_triplets
    from soco_pipeline.tasks.tpips.triplets import generate_triplets
    from tests.tpips_helpers import tiny_config

    cfg = tiny_config(4, 2)
    ts = generate_triplets(cfg)
    ooo, _ = annotate_triplets(ts, cfg)
    imgs = write_images(ts.images, str(root / "data"), cfg)
    uris = dict(zip(imgs.image_id, imgs.uri, strict=True))

    def run(spec, cache):
        o = ooo_answers(ooo, uris, cfg.lvlm, spec, build_backend(spec), cache)
        return np.concatenate([o["pairwise"].ravel(), o["triplet"].ravel()]).tolist()

    return "2", run


FAMILIES = {"mmvm": _mmvm, "fgbmk": _fgbmk, "tpips": _tpips}


@pytest.fixture(scope="module", params=sorted(FAMILIES))
def family(request, tmp_path_factory):
    answer, run = FAMILIES[request.param](tmp_path_factory.mktemp(request.param))
    return request.param, answer, run


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """An answerer that fails by script (`mode`) and records the content key of every request it got."""

    def __init__(self, answer: str) -> None:
        self.answer, self.mode = answer, "ok"
        self.ok: list[str] = []  # keys answered with 200
        self.seen: list[str] = []
        self.lock = threading.Lock()

    def __call__(self, request, body):
        key = content_key(list(request.images), request.text)
        with self.lock:
            self.seen.append(key)
        if self.mode == "500" or (
            self.mode == "third" and int(hashlib.sha256(key.encode()).hexdigest(), 16) % 3 == 0
        ):
            return HttpReply(500, b"upstream exploded")
        with self.lock:
            self.ok.append(key)
        return self.answer


def test_connection_refused_posts_no_score_and_names_the_server(family, tmp_path):
    name, answer, run = family
    spec = openai_spec(f"http://127.0.0.1:{_free_port()}", name=f"{name}-down", retries=1)
    with pytest.raises(LvlmRunError, match="ConnectionError") as err:
        run(spec, AnswerCache(str(tmp_path / "cache")))
    assert "no score is posted" in str(err.value) or "is the server at" in str(err.value)


@pytest.mark.parametrize("mode", ["500", "third"])
def test_a_failing_server_posts_no_score_and_a_rerun_asks_only_the_missing(family, tmp_path, mode):
    name, answer, run = family
    server = Server(answer)
    cache = AnswerCache(str(tmp_path / "cache"))
    with serve(server) as srv:
        spec = openai_spec(srv.base_url, name=f"{name}-flaky", retries=1, max_error_rate=0.1)
        server.mode = mode
        with pytest.raises(LvlmRunError, match="HTTP 500: upstream exploded") as err:
            run(spec, cache)
        assert "max_error_rate 0.1" in str(err.value) and "no score is posted" in str(err.value)
        answered = set(server.ok)
        if mode == "third":
            assert answered, "the healthy two thirds must have been answered and cached"
        server.mode, server.seen = "ok", []
        recovered = run(spec, cache)  # the server is back
        asked_again = set(server.seen)
        assert asked_again and not asked_again & answered  # only what the first run did not get
    with serve(Server(answer)) as clean:  # the same model on a healthy server from an empty cache
        fresh = run(openai_spec(clean.base_url, name=f"{name}-flaky"), AnswerCache(str(tmp_path / "c2")))
    assert recovered == fresh
