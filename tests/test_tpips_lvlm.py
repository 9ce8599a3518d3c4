"""TPIPS LVLM baselines through the harness against a loopback server, with the paper's permutation averaging:
an answerer that always names one position scores a tie (chance), not that position's share; an answerer that
names one image wherever it stands picks that image; no prompt reads "in terms of overall"."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from soco_pipeline.lvlm.backends import build_backend
from soco_pipeline.lvlm.cache import AnswerCache
from soco_pipeline.lvlm.server import serve
from soco_pipeline.tasks.tpips.afc import annotate_afc, generate_afc
from soco_pipeline.tasks.tpips.evaluate import score_rows
from soco_pipeline.tasks.tpips.images import write_images
from soco_pipeline.tasks.tpips.lvlm import (
    PERMS_AFC,
    PERMS_OOO,
    afc_answers,
    afc_predictions,
    ooo_answers,
    ooo_predictions,
    parse_choice,
    parse_score,
)
from soco_pipeline.tasks.tpips.ooo import annotate_triplets
from soco_pipeline.tasks.tpips.triplets import generate_triplets
from tests.lvlm_helpers import openai_spec
from tests.tpips_helpers import tiny_config

pytestmark = pytest.mark.unit


def test_parsers():
    assert (
        parse_score("I'd say 7/10.", 10) == 7
        and parse_score("10", 10) == 10
        and np.isnan(parse_score("no", 10))
    )
    assert parse_choice("Image 3 is the odd one", 3) == 2 and parse_choice("none", 3) == -1


def test_answers_map_back_to_the_image_they_name():
    cfg = tiny_config()
    n = 2
    # row 0: the answerer names original image 2 in every order; row 1: original image 0
    truth = [2, 0]
    texts = [str(s) for s in [5, 7] * (3 * n)]  # pairwise: each pair's two orders answer 5 and 7
    texts += [str(perm.index(t) + 1) for t in truth for perm in PERMS_OOO]
    got = ooo_predictions(texts, n, cfg.lvlm)
    assert got["parse_failures"] == 0
    assert np.allclose(got["triplet"], np.eye(3)[truth], atol=1e-12)
    assert np.allclose(got["pairwise"], 6.0)  # the mean of the two orders
    # 2AFC: output 1 named in both orders; one unparseable pairwise answer leaves the other order's score
    texts = ["8", "nothing", "3", "3"] + [str(perm.index(1) + 1) for perm in PERMS_AFC]
    got = afc_predictions(texts, 1, cfg.lvlm)
    assert np.allclose(got["triplet"], [[0.0, 1.0]]) and np.allclose(got["pairwise"], [[8.0, 3.0]])
    assert got["parse_failures"] == 1


@pytest.mark.parametrize("answer", ["1", "2"])
def test_an_answerer_naming_one_position_scores_a_tie(tmp_path, answer):
    cfg = tiny_config(6, 6)
    ts = generate_triplets(cfg)
    ooo, _ = annotate_triplets(ts, cfg)
    values, items = generate_afc(cfg)
    afc, _ = annotate_afc(values, items, cfg)
    imgs = write_images(ts.images._append(values, ignore_index=True), str(tmp_path / "data"), cfg)
    uris = dict(zip(imgs.image_id, imgs.uri, strict=True))
    prompts, lock = [], threading.Lock()

    def constant(request, body):
        with lock:
            prompts.append(request.text)
        return answer

    with serve(constant) as srv:
        spec = openai_spec(srv.base_url, name="constant")
        backend, cache = build_backend(spec), AnswerCache(str(tmp_path / "cache"))
        o = ooo_answers(ooo, uris, cfg.lvlm, spec, backend, cache)
        a = afc_answers(afc, uris, cfg.lvlm, spec, backend, cache)
        sent = srv.requests
        # OOO: 3 pairs x 2 orders + 6 orders of the triplet; 2AFC: 2 pairs x 2 orders + 2 orders of the outputs
        assert sent == 12 * len(ooo) + 6 * len(afc)
        ooo_answers(ooo, uris, cfg.lvlm, spec, backend, cache)  # all from the cache now
        assert srv.requests == sent
    assert o["parse_failures"] == 0 and a["parse_failures"] == 0
    assert np.allclose(o["triplet"], 1 / 3) and np.allclose(a["triplet"], 1 / 2)
    trip = score_rows("constant", "triplet_oracle", True, ooo, o["triplet"], afc, a["triplet"])
    pair = score_rows("constant", "early_fusion", True, ooo, o["pairwise"], afc, a["pairwise"])
    top = lambda t, e: t[(t["eval"] == e) & (t.aspect == "all")].agreement.item()  # noqa: E731
    # permutation averaging: every image is named equally often, a tie of every option, scored as chance
    for table in (trip, pair):
        assert top(table, "ooo") == pytest.approx(100 / 3, abs=1e-9)
        assert top(table, "afc:all") == pytest.approx(50.0, abs=1e-9)
    # ... and not the share of the position it names
    assert abs(100 * ooo[f"y_{int(answer) - 1}"].mean() - 100 / 3) > 1
    assert (trip.judgements == "simulated").all()
    # the overall aspect is asked "overall", never "in terms of overall"; the others "in terms of <aspect>"
    assert "overall" in set(ooo.aspect)
    assert not any("in terms of overall" in p for p in prompts)
    assert any(p.endswith("of the three overall? Answer with 1, 2 or 3.") for p in prompts)
    for aspect in set(ooo.aspect) - {"overall"}:
        assert any(f"in terms of {aspect}?" in p for p in prompts), aspect
