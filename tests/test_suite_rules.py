"""The suite's own rules (tests/conftest.py, tests/needs.py): one tier marker per test, and under CI=true
no skip outside tests/needs.py. Each rule is run on a deliberate offender in a pytest of its own."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

TESTS = Path(__file__).parent
CONFTEST = """
from tests.conftest import pytest_collection_modifyitems, pytest_runtest_makereport  # noqa: F401
"""
INI = """
[pytest]
addopts = -p no:cacheprovider -p no:randomly
markers =
    unit: no Dagster run, no server, no subprocess
    pipeline: materializes Dagster assets or runs the demo machinery
    stack: Redis, Postgres, S3, Celery or a browser
"""


def run_rules(
    pytester: pytest.Pytester, monkeypatch, ci: bool, *args: str, workers: int = 0, **files: str
) -> pytest.RunResult:
    """pytest on `files` under the suite's conftest rules: in this process, or on `workers` xdist workers
    (pytest and its workers in subprocesses, as `make test` runs them)."""
    monkeypatch.setenv("CI", "true" if ci else "")
    pytester.makeconftest(CONFTEST)
    pytester.makeini(INI)
    pytester.makepyfile(**files)
    if not workers:
        return pytester.runpytest_inprocess("-q", *args)
    monkeypatch.setenv("PYTHONPATH", str(TESTS.parent))  # the workers import tests.conftest
    return pytester.runpytest_subprocess("-q", "-n", str(workers), *args, timeout=120)


def test_an_unmarked_test_and_a_test_with_two_tiers_stop_therun_rules(pytester, monkeypatch):
    result = run_rules(
        pytester,
        monkeypatch,
        ci=False,
        test_offenders="""
import pytest

def test_without_tier():
    pass

@pytest.mark.unit
@pytest.mark.pipeline
def test_with_two():
    pass

@pytest.mark.stack
def test_fine():
    pass
""",
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    err = result.stderr.str()
    assert "test_offenders.py::test_without_tier: tier markers none" in err
    assert "test_offenders.py::test_with_two: tier markers pipeline, unit" in err
    assert "test_fine" not in err


def test_a_module_pytestmark_gives_every_test_its_tier(pytester, monkeypatch):
    module = "import pytest\n\npytestmark = pytest.mark.unit\n\ndef test_a():\n    pass\n\ndef test_b():\n    pass\n"
    run_rules(pytester, monkeypatch, ci=False, test_module_mark=module).assert_outcomes(passed=2)


def test_a_module_s_tests_run_fewest_fixtures_first(pytester, monkeypatch):
    """The test that needs both module fixtures is written first; it runs last, so each fixture is built in
    the setup of a test of its own (tests/tier_scheduling.fewest_fixtures_first)."""
    module = """
import pytest

pytestmark = pytest.mark.pipeline
BUILT = []

@pytest.fixture(scope="module")
def stack():
    BUILT.append("stack")

@pytest.fixture(scope="module")
def data(stack):
    BUILT.append("data")

def test_needs_both(stack, data):
    assert BUILT == ["stack", "data"]

def test_needs_the_stack(stack):
    assert BUILT == ["stack"]
"""
    # test_needs_the_stack passes only if it runs before test_needs_both has built `data`
    run_rules(pytester, monkeypatch, False, test_order=module).assert_outcomes(passed=2)


SKIPS = """
import pytest

from tests.needs import need, need_hardware

pytestmark = pytest.mark.unit

def test_bare_skip():
    pytest.skip("deliberate")

@pytest.mark.skipif(True, reason="deliberate")
def test_skipif():
    pass

def test_importorskip():
    pytest.importorskip("no_such_module_here")

def test_need_missing_program():
    need(False, "a program")

def test_need_hardware_absent():
    need_hardware(False, "a CUDA device")

@pytest.fixture
def kernel():
    need_hardware(False, "an AVX-512 CPU")

def test_need_hardware_in_a_fixture(kernel):
    pass

@pytest.fixture
def server():
    pytest.skip("deliberate")

def test_bare_skip_in_a_fixture(server):
    pass
"""


def test_under_ci_only_need_hardware_may_skip(pytester, monkeypatch):
    result = run_rules(pytester, monkeypatch, ci=True, test_skips=SKIPS)
    # a skipif mark and a fixture act in the setup: errors. A fixture's skip is reported at the test's own
    # location, so need_hardware in a fixture is told from a bare skip by where the skip was raised.
    result.assert_outcomes(failed=3, errors=2, skipped=2)
    out = result.stdout.str()
    for name in ("test_bare_skip", "test_importorskip", "test_need_missing_program"):
        assert f"FAILED test_skips.py::{name}" in out, name
    assert "ERROR test_skips.py::test_skipif" in out
    assert "ERROR test_skips.py::test_bare_skip_in_a_fixture" in out
    # each of the four: its failure text, then its summary line
    assert out.count("skipped outside tests/needs.py under CI=true") == 8


def test_off_ci_every_skip_is_a_skip(pytester, monkeypatch):
    run_rules(pytester, monkeypatch, ci=False, test_skips=SKIPS).assert_outcomes(skipped=7)


def _bare_skips(path: Path) -> list[str]:
    """`pytest.skip(...)`, `pytest.importorskip(...)` and `pytest.mark.skip[if]` in one module."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if (
            isinstance(node, ast.Attribute)
            and node.attr in ("skip", "skipif", "importorskip")
            and ast.unparse(node.value) in ("pytest", "pytest.mark")
        ):
            found.append(f"{path.name}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_no_module_skips_outside_needs():
    """Every skip goes through tests/needs.py (need for a program, need_hardware for hardware)."""
    offenders = [
        hit
        for path in sorted(TESTS.glob("*.py"))
        if path.name not in ("needs.py", Path(__file__).name)
        for hit in _bare_skips(path)
    ]
    assert offenders == []


def test_no_test_process_points_at_the_checkouts_storage():
    """`make test` exports the checkout's DAGSTER_HOME and SOCO_STORAGE; conftest.py gives each test process
    a temporary storage root instead, so a command a test starts without its own never writes the demo's."""
    import os

    from tests.conftest import CHECKOUT

    for var in ("DAGSTER_HOME", "SOCO_STORAGE"):
        assert not Path(os.environ[var]).resolve().is_relative_to(CHECKOUT), (var, os.environ[var])
