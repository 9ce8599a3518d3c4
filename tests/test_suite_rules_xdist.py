"""The suite's rules hold on pytest-xdist workers too, as `make test` and `make test-fast` run them: a test
without a tier stops the run with its name (a worker cannot raise pytest's usage error through xdist), and
under CI=true a bare skip fails while need_hardware skips; `make test`'s tier groups keep the stack tier on
one worker."""

from __future__ import annotations

import re

import pytest

from tests.test_suite_rules import INI, TESTS, run_rules

pytestmark = pytest.mark.pipeline  # pytest and two xdist workers in subprocesses


def test_an_unmarked_test_stops_a_run_on_workers_with_its_name(pytester, monkeypatch):
    result = run_rules(
        pytester,
        monkeypatch,
        False,
        "-m",
        "unit",  # the check comes before -m deselects: the unmarked test is refused all the same
        workers=2,
        test_offender="def test_without_tier():\n    pass\n",
        test_fine="import pytest\n\npytestmark = pytest.mark.unit\n\ndef test_a():\n    pass\n",
    )
    out = result.stdout.str()
    assert result.ret != pytest.ExitCode.OK
    assert "INTERNALERROR" not in out
    assert "test_offender.py::test_without_tier: tier markers none" in out
    assert "test_fine" not in out
    result.assert_outcomes(errors=1)


def test_under_ci_a_bare_skip_fails_on_workers_and_need_hardware_skips(pytester, monkeypatch):
    module = (
        "import pytest\n\nfrom tests.needs import need_hardware\n\npytestmark = pytest.mark.unit\n\n"
        "def test_bare():\n    pytest.skip('no reason')\n\n"
        "def test_hardware():\n    need_hardware(False, 'a CUDA device')\n"
    )
    result = run_rules(pytester, monkeypatch, True, workers=2, test_skips=module)
    result.assert_outcomes(failed=1, skipped=1)
    assert "skipped outside tests/needs.py under CI=true" in result.stdout.str()


def test_tier_groups_keep_the_stack_tier_on_one_worker_and_each_module_on_one(pytester, monkeypatch):
    """`make test`'s scheduling (tests/tier_scheduling.py) on three workers: every stack test on one worker,
    every other module's tests on one worker each (a module of stack and pipeline tests included, so its
    module fixture is built once), and the stack tests queued first."""
    monkeypatch.setenv("CI", "")
    monkeypatch.setenv("PYTHONPATH", str(TESTS.parent))
    pytester.makeconftest(
        "from tests.conftest import (  # noqa: F401\n"
        "    pytest_addoption, pytest_collection_modifyitems, pytest_configure, pytest_unconfigure,\n"
        "    pytest_xdist_make_scheduler,\n"
        ")\n"
    )
    pytester.makeini(INI)

    def module(tier: str, n: int) -> str:
        tests = "".join(f"def test_{i}():\n    pass\n\n" for i in range(n))
        return f"import pytest\n\npytestmark = pytest.mark.{tier}\n\n{tests}"

    pytester.makepyfile(
        test_unit_a=module("unit", 4),
        test_stack_a=module("stack", 3),
        test_pipe=module("pipeline", 3),
        test_stack_b=module("stack", 2),
        test_unit_b=module("unit", 4),
        test_mixed="import pytest\n\n@pytest.mark.stack\ndef test_browser():\n    pass\n\n"
        "@pytest.mark.pipeline\ndef test_table():\n    pass\n",
    )
    result = pytester.runpytest_subprocess("-v", "-n", "3", "--tier-groups", "-p", "no:randomly", timeout=120)
    result.assert_outcomes(passed=18)
    ran = re.findall(r"^\[(gw\d)\] .*?PASSED (test_\w+)\.py::", result.stdout.str(), re.M)
    assert len(ran) == 18, result.stdout.str()
    workers: dict[str, set[str]] = {}
    for worker, name in ran:
        workers.setdefault("stack" if name.startswith("test_stack") else name, set()).add(worker)
    assert all(len(w) == 1 for w in workers.values()), workers
    (stack_worker,) = workers["stack"]
    first_on_it = next(name for worker, name in ran if worker == stack_worker)
    assert first_on_it.startswith("test_stack"), ran
