"""The `transformers` backend with tiny random-weight Qwen2-VL / Qwen2.5-VL models (built locally, nothing
downloaded): real model code behind the real loopback server, and in-process with batching."""

import shutil
import threading

import pandas as pd
import pytest

from soco_pipeline.lvlm.backends import build_backend
from soco_pipeline.lvlm.backends.openai import OpenAIBackend
from soco_pipeline.lvlm.cache import AnswerCache
from soco_pipeline.lvlm.metrics import lvlm_metrics
from soco_pipeline.lvlm.prompt import build_prompts
from soco_pipeline.lvlm.run import LvlmRunError, run_model
from soco_pipeline.lvlm.server import HttpReply, serve
from soco_pipeline.lvlm.specs import parse_spec
from tests.lvlm_helpers import openai_spec, small_items
from tests.tiny_vlm import build_tiny_qwen2_vl

pytestmark = pytest.mark.unit

SETTINGS = ["vis", "desc"]  # one request shape with two images, one with one


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("tiny_vlm")
    items = small_items(tmp / "data", items_per_group=2)
    folder = build_tiny_qwen2_vl(tmp / "model", list(build_prompts(items).unique()))
    return items, folder, tmp


def _spec(folder, name, batch_size):
    return parse_spec(
        {
            "backend": "transformers",
            "model": str(folder),
            "device": "cpu",
            "dtype": "float32",
            "batch_size": batch_size,
            "max_tokens": 6,
            "settings": SETTINGS,
        },
        name,
    )


def test_tiny_vlm_behind_the_server_answers_like_in_process(setup):
    items, folder, tmp = setup
    backend = build_backend(_spec(folder, "tiny", 1))
    lock = threading.Lock()

    def answer(request, body):
        with lock:
            reply = backend.answer_batch([request])[0]
        return HttpReply(500, reply.error.encode()) if reply.error else reply.text

    with serve(answer, model_name="tiny") as srv:
        spec = openai_spec(
            srv.base_url, "tiny_http", settings=SETTINGS, max_tokens=6, max_concurrency=2, timeout=120
        )
        remote = run_model(items, spec, OpenAIBackend(spec), AnswerCache(str(tmp / "cache_http"))).answers
        assert srv.requests == remote.attempts.sum() >= len(remote)  # a retry (a slow machine) is counted
    local = run_model(items, _spec(folder, "tiny", 1), backend, AnswerCache(str(tmp / "cache_local"))).answers
    assert len(remote) == len(items[items.setting.isin(SETTINGS)])
    assert (remote.error == "").all() and (remote.raw_answer.str.len() > 0).all()
    assert remote.raw_answer.tolist() == local.raw_answer.tolist()  # the server adds nothing, loses nothing
    m = lvlm_metrics(remote)
    average = m[(m.scope == "all") & (m.metric == "average")].set_index("setting")["value"]
    assert set(average.index) == set(SETTINGS)
    assert average.to_dict() == pytest.approx((100 * remote.groupby("setting").correct.mean()).to_dict())


def test_batched_generation_runs_mixed_image_counts(setup):
    items, folder, tmp = setup
    spec = _spec(folder, "tiny_batched", 8)
    backend = build_backend(spec)
    first = run_model(items, spec, backend, AnswerCache(str(tmp / "cache_batched")))
    assert first.errors == 0 and first.sent == len(first.answers)
    again = run_model(items, spec, backend, AnswerCache(str(tmp / "cache_batched")))
    assert again.sent == 0
    pd.testing.assert_frame_equal(first.answers, again.answers)


def test_qwen2_5_vl_class_loads_and_answers(setup):
    items, _, tmp = setup
    folder = build_tiny_qwen2_vl(tmp / "model25", list(build_prompts(items).unique()), family="qwen2_5_vl")
    spec = _spec(folder, "tiny25", 4)
    backend = build_backend(spec)
    assert type(backend.model).__name__ == "Qwen2_5_VLForConditionalGeneration"
    res = run_model(items, spec, backend, AnswerCache(str(tmp / "cache25")))
    assert res.errors == 0 and (res.answers.raw_answer.str.len() > 0).all()


def test_a_model_without_a_chat_template_fails_the_run(setup):
    """Every batch of a processor without a chat template fails: the run stops with that error instead of
    posting ~0% as a score."""
    items, folder, tmp = setup
    broken = tmp / "model_no_template"
    shutil.copytree(folder, broken)
    for f in broken.glob("chat_template*"):
        f.unlink()
    spec = _spec(broken, "tiny_no_template", 4)
    with pytest.raises(
        LvlmRunError,
        match=r"(?s)requests failed, more than max_error_rate.*First error: item \d+: "
        r"ValueError: .*chat.template",
    ):
        run_model(items, spec, build_backend(spec), AnswerCache(str(tmp / "cache_no_template")))


def test_missing_weights_are_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    spec = parse_spec(
        {"backend": "transformers", "model": str(tmp_path / "no_such_model"), "device": "cpu"}, "x"
    )
    with pytest.raises(RuntimeError, match="cannot load"):
        build_backend(spec)
