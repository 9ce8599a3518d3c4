"""An LVLM whose answers the parser cannot read (issue 38): the board already shows unparsable_pct 100; the
run log must say so too, with the count and an example answer, while a model that answers is not warned."""

from __future__ import annotations

import pytest

from soco_pipeline.lvlm.backends.openai import OpenAIBackend
from soco_pipeline.lvlm.cache import AnswerCache
from soco_pipeline.lvlm.run import run_model
from soco_pipeline.lvlm.server import serve
from tests.lvlm_helpers import OracleAnswerer, answer_key, openai_spec, small_items

pytestmark = pytest.mark.stack  # a loopback HTTP server (the OpenAI-compatible test server)


@pytest.fixture(scope="module")
def items(tmp_path_factory):
    return small_items(tmp_path_factory.mktemp("lvlm_items"), items_per_group=2)


def test_an_all_unparsable_lvlm_is_warned_in_the_run_log(items, tmp_path):
    warnings: list[str] = []
    with serve(lambda r, b: "I think so") as srv:
        spec = openai_spec(srv.base_url, "vague")
        res = run_model(
            items, spec, OpenAIBackend(spec), AnswerCache(str(tmp_path / "cache")), warn=warnings.append
        )
    n = len(res.answers)
    assert res.errors == 0 and n > 0 and not res.answers.correct.any()
    assert len(warnings) == 1
    assert f"{n} of {n} answers" in warnings[0] and "'I think so'" in warnings[0] and "vague" in warnings[0]


def test_a_model_that_answers_is_not_warned(items, tmp_path):
    warnings: list[str] = []
    with serve(OracleAnswerer(answer_key(items))) as srv:
        spec = openai_spec(srv.base_url, "oracle")
        res = run_model(
            items, spec, OpenAIBackend(spec), AnswerCache(str(tmp_path / "cache")), warn=warnings.append
        )
    assert res.answers.correct.all() and warnings == []
