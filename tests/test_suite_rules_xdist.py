"""The suite's rules hold on pytest-xdist workers too, as `make test` and `make test-fast` run them: a test
without a tier stops the run with its name (a worker cannot raise pytest's usage error through xdist), and
under CI=true a bare skip fails while need_hardware skips."""

from __future__ import annotations

import pytest

from tests.test_suite_rules import run_rules

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
