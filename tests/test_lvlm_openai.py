"""The `openai` backend against a real HTTP server on a free loopback port.

Behind the server: an oracle (reads the answer key), a seeded random answerer, and `ScriptedAnswerer`,
a test double that plays a flaky server (429, 5xx, timeouts, malformed JSON) and answers in every
parser form.
"""

import os
import signal
import subprocess
import sys
import threading
import time

import pandas as pd
import pytest

from soco_pipeline.lvlm.backends.openai import OpenAIBackend
from soco_pipeline.lvlm.cache import AnswerCache
from soco_pipeline.lvlm.metrics import lvlm_leaderboard, lvlm_metrics
from soco_pipeline.lvlm.run import LvlmRunError, run_model
from soco_pipeline.lvlm.server import HttpReply, serve
from soco_pipeline.storage import PROJECT_ROOT, write_parquet_atomic
from tests.lvlm_helpers import (
    PARSER_FORMS,
    OracleAnswerer,
    RandomAnswerer,
    ScriptedAnswerer,
    answer_key,
    content_key,
    openai_spec,
    small_items,
)

COMPARE = [
    "model",
    "setting",
    "index",
    "g_index",
    "qid",
    "rotation",
    "answer",
    "raw_answer",
    "parsed",
    "correct",
    "error",
    "request_hash",
]


@pytest.fixture(scope="module")
def items(tmp_path_factory):
    return small_items(tmp_path_factory.mktemp("lvlm_items"), items_per_group=8)


@pytest.fixture(scope="module")
def key(items):
    return answer_key(items)


def _all(metrics: pd.DataFrame, metric: str) -> pd.Series:
    m = metrics[(metrics.scope == "all") & (metrics.metric == metric)]
    return m.set_index("setting")["value"]


@pytest.mark.unit
def test_oracle_scores_100_average_and_circular(items, key, tmp_path):
    with serve(OracleAnswerer(key)) as srv:
        spec = openai_spec(srv.base_url, "oracle")
        res = run_model(items, spec, OpenAIBackend(spec), AnswerCache(str(tmp_path / "cache")))
        assert srv.requests == len(items) == res.sent
    a = res.answers
    assert res.errors == 0 and a.correct.all()
    # every parser form was used and parsed back to the right letter
    assert a.raw_answer.str.contains("boxed").any() and a.raw_answer.str.contains("correct answer").any()
    m = lvlm_metrics(a)
    assert (_all(m, "average") == 100).all() and (_all(m, "circular") == 100).all()
    assert set(_all(m, "average").index) == {"vis", "vis_desc", "desc"}
    assert set(m.scope) == {"all", "supercategory", "category"}
    assert len(PARSER_FORMS) == 7


@pytest.mark.unit
def test_seeded_random_answerer_scores_chance(items, tmp_path):
    with serve(RandomAnswerer(seed=1)) as srv:
        spec = openai_spec(srv.base_url, "random", max_concurrency=8)
        res = run_model(items, spec, OpenAIBackend(spec), AnswerCache(str(tmp_path / "cache")))
    a = res.answers
    n = len(a)
    assert n >= 250
    avg = 100 * a.correct.mean()
    assert abs(avg - 25) < 4 * 100 * (0.25 * 0.75 / n) ** 0.5, avg  # within 4 standard errors
    circ = 100 * a.groupby(["setting", "g_index"]).correct.all().mean()
    assert circ < 5, circ  # expectation 0.39 (the precise figure: test_lvlm_metrics, many more items)


@pytest.mark.unit
def test_retries_on_429_5xx_timeouts_malformed_then_answers(items, key, tmp_path):
    script = {
        0: ["429", "429"],
        1: ["500", "503"],
        2: ["timeout"],
        3: ["malformed", "no_choices"],
        4: ["400"],  # not retried: recorded, counted wrong
        5: ["500", "500", "500", "500", "500", "500", "500"],  # beyond the retries: recorded, counted wrong
    }
    # Two requests of slot 2 block until released: the client's 3 s timeout fires for them, and no other
    # request comes near it however loaded the machine is.
    double = ScriptedAnswerer(key, script, max_timeouts=2)
    with serve(double) as srv:
        spec = openai_spec(
            srv.base_url, "scripted", timeout=3, retries=3, max_consecutive_failures=1000, max_error_rate=0.5
        )
        try:
            res = run_model(items, spec, OpenAIBackend(spec), AnswerCache(str(tmp_path / "cache")))
        finally:
            double.release()
    a = res.answers
    failed = a[a.error != ""]
    assert len(failed) == res.errors > 0
    assert not failed.correct.any()
    assert failed.error.str.startswith("HTTP 400").sum() > 0
    assert (failed.loc[failed.error.str.startswith("HTTP 400"), "attempts"] == 1).all()
    assert (failed.loc[failed.error.str.startswith("HTTP 500"), "attempts"] == 4).all()
    ok = a[a.error == ""]
    assert ok.correct.all() and len(ok) + len(failed) == len(a)
    assert set(ok.attempts) >= {1, 2, 3}  # first try, after one failure, after two failures
    assert double.timeouts == 2  # both blocked requests timed out on the client and were retried
    timed_out = [k for k, n in double.attempts.items() if int(k, 16) % 7 == 2 and n == 2]
    assert len(timed_out) == 2
    # The run went on past failures: every other request got its answer.
    assert len(ok) > 0.6 * len(a)


@pytest.mark.unit
def test_second_run_sends_zero_requests_and_gives_the_same_table(items, key, tmp_path):
    cache = AnswerCache(str(tmp_path / "cache"))
    with serve(OracleAnswerer(key)) as srv:
        spec = openai_spec(srv.base_url, "oracle")
        first = run_model(items, spec, OpenAIBackend(spec), cache)
        sent = srv.requests
        second = run_model(items, spec, OpenAIBackend(spec), cache)
        assert srv.requests == sent and second.sent == 0 and second.cached == len(items)
    pd.testing.assert_frame_equal(first.answers, second.answers)


@pytest.mark.unit
def test_key_reaches_the_header_and_no_file(items, key, tmp_path, monkeypatch):
    secret = "sk-test-" + "7f3a9c" * 6
    monkeypatch.setenv("SOCO_TEST_LVLM_KEY", secret)
    failing = {"n": 0}

    def answer(request, body):  # some requests fail so that error texts are written too
        failing["n"] += 1
        if failing["n"] % 5 == 0:
            return HttpReply(401, b'{"error": "bad key"}')
        return OracleAnswerer(key)(request, body)

    with serve(answer) as srv:
        spec = openai_spec(
            srv.base_url,
            "keyed",
            api_key_env="SOCO_TEST_LVLM_KEY",
            max_consecutive_failures=1000,
            max_error_rate=0.5,
        )
        res = run_model(items, spec, OpenAIBackend(spec), AnswerCache(str(tmp_path / "cache")))
        assert set(srv.auth_headers) == {f"Bearer {secret}"}
    write_parquet_atomic(res.answers, str(tmp_path / "answers.parquet"))
    assert (res.answers.error != "").any()
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert len(files) > 10
    for p in files:
        assert secret.encode() not in p.read_bytes(), p
    assert secret not in repr(spec) and secret not in str(spec.to_dict())


@pytest.mark.unit
def test_missing_key_variable_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.delenv("SOCO_TEST_ABSENT_KEY", raising=False)
    spec = openai_spec("http://127.0.0.1:9", "nokey", api_key_env="SOCO_TEST_ABSENT_KEY")
    with pytest.raises(ValueError, match="SOCO_TEST_ABSENT_KEY"):
        OpenAIBackend(spec)


class EveryThirdFails:
    """Test double of a flaky server: every third request (in arrival order) gets HTTP 500, the others the
    right answer. Without retries exactly a third of the rows fail."""

    def __init__(self, key: dict[str, str]) -> None:
        self.key, self.count, self.lock = key, 0, threading.Lock()

    def __call__(self, request, body):
        with self.lock:
            self.count += 1
            fail = self.count % 3 == 0
        if fail:
            return HttpReply(500, b'{"error": "overloaded"}')
        return self.key[content_key(list(request.images), request.text)]


@pytest.mark.unit
def test_a_server_failing_one_request_in_three(items, key, tmp_path):
    """Under the default max_error_rate (0.1) the run fails with the first error; a spec that tolerates it
    posts a score whose leaderboard row says a third of the rows failed."""
    with serve(EveryThirdFails(key)) as srv:
        strict = openai_spec(srv.base_url, "flaky", retries=0)
        with pytest.raises(
            LvlmRunError,
            match=r"(?s)requests failed, more than max_error_rate 0.1.*First error: item "
            r"\d+: HTTP 500",
        ):
            run_model(items, strict, OpenAIBackend(strict), AnswerCache(str(tmp_path / "strict")))
        lenient = openai_spec(srv.base_url, "flaky", retries=0, max_error_rate=0.5)
        res = run_model(items, lenient, OpenAIBackend(lenient), AnswerCache(str(tmp_path / "lenient")))
    n = len(res.answers)
    assert res.errors == n // 3 and res.answers.correct.sum() == n - n // 3
    board = lvlm_leaderboard(lvlm_metrics(res.answers), reference=pd.DataFrame()).set_index("model")
    assert board.loc["flaky", "n_rows"] == n and board.loc["flaky", "n_errors"] == n // 3
    assert board.loc["flaky", "unparsable_pct"] == 0


@pytest.mark.unit
def test_a_server_that_only_says_i_think_so_shows_100_percent_unparsable(items, tmp_path):
    with serve(lambda r, b: "I think so") as srv:
        spec = openai_spec(srv.base_url, "vague")
        res = run_model(items, spec, OpenAIBackend(spec), AnswerCache(str(tmp_path / "cache")))
    assert res.errors == 0 and not res.answers.correct.any()
    board = lvlm_leaderboard(lvlm_metrics(res.answers), reference=pd.DataFrame()).set_index("model")
    assert board.loc["vague", "unparsable_pct"] == 100 and board.loc["vague", "n_errors"] == 0
    assert board.loc["vague", "vis_average"] == 0


@pytest.mark.unit
def test_a_dead_server_stops_the_run_with_a_clear_error(items, tmp_path):
    with serve(lambda r, b: "A") as srv:
        url = srv.base_url  # the port is closed once the block exits
    spec = openai_spec(url, "dead", retries=1, max_consecutive_failures=5, max_concurrency=2)
    with pytest.raises(LvlmRunError, match="in a row failed"):
        run_model(items, spec, OpenAIBackend(spec), AnswerCache(str(tmp_path / "cache")))


CHILD = """
import sys, pandas as pd
sys.path.insert(0, {root!r})
from soco_pipeline.lvlm.backends.openai import OpenAIBackend
from soco_pipeline.lvlm.cache import AnswerCache
from soco_pipeline.lvlm.run import run_model
from tests.lvlm_helpers import openai_spec
items = pd.read_parquet({items!r})
spec = openai_spec({url!r}, "killed", max_concurrency=2)
run_model(items, spec, OpenAIBackend(spec), AnswerCache({cache!r}))
"""


@pytest.mark.pipeline
def test_kill_9_mid_run_then_rerun_finishes_with_the_same_table(items, key, tmp_path):
    oracle = OracleAnswerer(key)

    def slow(request, body):
        time.sleep(0.01)
        return oracle(request, body)

    def answered() -> int:  # cache entries; a killed write may leave a `.tmp-*` file, which is never read
        return sum(not p.name.startswith(".tmp-") for p in cache_dir.rglob("*.json"))

    items_path = tmp_path / "items.parquet"
    items.to_parquet(items_path)
    cache_dir = tmp_path / "cache"
    with serve(slow) as srv:
        spec = openai_spec(srv.base_url, "killed", max_concurrency=2)
        reference = run_model(
            items, spec, OpenAIBackend(spec), AnswerCache(str(tmp_path / "ref_cache"))
        ).answers
        code = CHILD.format(
            root=str(PROJECT_ROOT), items=str(items_path), url=srv.base_url, cache=str(cache_dir)
        )
        env = {**os.environ, "PYTHONPATH": str(PROJECT_ROOT)}
        child = subprocess.Popen([sys.executable, "-c", code], env=env, cwd=str(PROJECT_ROOT))
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and answered() < len(items) // 3:
                assert child.poll() is None, "the child finished before it could be killed"
                time.sleep(0.02)
            os.kill(child.pid, signal.SIGKILL)
        finally:
            child.wait(timeout=30)
        done = answered()
        assert 0 < done < len(items)
        before = srv.requests
        rerun = run_model(items, spec, OpenAIBackend(spec), AnswerCache(str(cache_dir)))
        assert rerun.cached == done and srv.requests - before == len(items) - done
    pd.testing.assert_frame_equal(rerun.answers[COMPARE], reference[COMPARE])


@pytest.mark.unit
def test_the_environment_proxy_settings_still_apply(items, key, tmp_path, monkeypatch):
    """The session reads proxies once (not per request): $HTTP_PROXY still routes every call, $NO_PROXY still
    exempts the server."""
    import socket

    with socket.socket() as closed:  # a loopback port nothing listens on: the proxy is down
        closed.bind(("127.0.0.1", 0))
        dead_proxy = f"http://127.0.0.1:{closed.getsockname()[1]}"
    rows = items.head(4)
    with serve(OracleAnswerer(key)) as srv:
        for var in ("NO_PROXY", "no_proxy", "HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"):
            monkeypatch.delenv(var, raising=False)
        monkeypatch.setenv("HTTP_PROXY", dead_proxy)
        monkeypatch.setenv("http_proxy", dead_proxy)
        spec = openai_spec(srv.base_url, "proxied", retries=0, max_concurrency=1)
        with pytest.raises(LvlmRunError, match="ProxyError"):
            run_model(rows, spec, OpenAIBackend(spec), AnswerCache(str(tmp_path / "a")))
        assert srv.requests == 0
        monkeypatch.setenv("NO_PROXY", "127.0.0.1")
        monkeypatch.setenv("no_proxy", "127.0.0.1")
        res = run_model(rows, spec, OpenAIBackend(spec), AnswerCache(str(tmp_path / "b")))
        assert srv.requests == len(rows) and res.errors == 0 and res.answers.correct.all()
