"""Test-wide settings (offline hub, no telemetry, storage in temporary folders) and the suite's rules:
every test has exactly one tier marker, and under CI=true every skip comes from tests/needs.py."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("DAGSTER_DISABLE_TELEMETRY", "1")
os.environ.setdefault("MPLBACKEND", "Agg")

import atexit  # noqa: E402
import shutil  # noqa: E402
import tempfile  # noqa: E402
from pathlib import Path  # noqa: E402

CHECKOUT = Path(__file__).resolve().parent.parent
SANDBOX_ENV = (
    "SOCO_TESTS_SANDBOX"  # "<pid> <path>": the storage root a test process made (children inherit it)
)


def _shared(value: str | None) -> bool:
    """Whether an environment path is unset, inside this checkout (its storage/ is the developer's demo), or
    inside the storage root another test process made."""
    made = os.environ.get(SANDBOX_ENV, " ").split(" ", 1)[1]
    inside = [CHECKOUT, *([Path(made)] if made else [])]
    return not value or any(Path(value).resolve().is_relative_to(p) for p in inside)


def _remove_sandbox(path: Path, pid: int) -> None:
    """At exit of the process that made it (a forked child that exits normally must not remove it)."""
    if os.getpid() == pid:
        shutil.rmtree(path, ignore_errors=True)


# `make test` exports the checkout's DAGSTER_HOME and SOCO_STORAGE (the demo's storage/), and a command left
# unset defaults to them. A test that does not set its own must not write there: a console script that a test
# started with only SOCO_STORAGE set rewrote storage/dagster/dagster.yaml to name the test's storage. So each
# test process (the controller, each xdist worker, a pytest a test starts) gets a temporary storage root of
# its own, removed when it exits; importing this module again in the same process keeps it.
SANDBOX: Path | None = None
_mine = os.environ.get(SANDBOX_ENV, "").split(" ", 1)[0] == str(os.getpid())
if not _mine and (_shared(os.environ.get("DAGSTER_HOME")) or _shared(os.environ.get("SOCO_STORAGE"))):
    SANDBOX = Path(tempfile.mkdtemp(prefix="soco-tests-storage-"))
    atexit.register(_remove_sandbox, SANDBOX, os.getpid())
    os.environ[SANDBOX_ENV] = f"{os.getpid()} {SANDBOX}"
    os.environ["SOCO_STORAGE"] = str(SANDBOX / "storage")
    os.environ["DAGSTER_HOME"] = str(SANDBOX / "storage" / "dagster")

import pytest  # noqa: E402

from tests import tier_scheduling  # noqa: E402
from tests.needs import in_ci  # noqa: E402

pytest_plugins = ["pytester"]  # tests/test_suite_rules.py runs the rules on deliberate offenders

TIERS = ("unit", "pipeline", "stack")  # registered in pyproject.toml; docs/develop.md says which is which
NEEDS = Path(__file__).with_name("needs.py").resolve()


@pytest.fixture(autouse=True)
def _native_kernel_choice_per_test():
    """SOCO_NATIVE is read once per process and cached: clear the choice after every test that set it."""
    yield
    from soco_pipeline.native import half_matmul

    half_matmul._library.cache_clear()


@pytest.fixture(scope="session")
def materialized_core(tmp_path_factory, request):
    """The embedded data, pairs and both oracles' evaluation, materialized once per test run
    (tests/core.py): read it, or materialize on `materialized_core.copy_to(folder)`. xdist workers share
    it: it lies in the folder above their own temporary folders, which is the run's."""
    from tests.core import shared_core

    base = tmp_path_factory.getbasetemp()
    return shared_core(base.parent if hasattr(request.config, "workerinput") else base)


def item_tiers(item) -> list[str]:
    """The tiers a test's markers (module `pytestmark`, class or function) name, sorted."""
    return sorted({m.name for m in item.iter_markers() if m.name in TIERS})


def tier_errors(items) -> list[str]:
    """One line per test whose markers name no tier or several."""
    errors = []
    for item in items:
        tiers = item_tiers(item)
        if len(tiers) != 1:
            found = ", ".join(tiers) or "none"
            errors.append(f"{item.nodeid}: tier markers {found}; it needs exactly one of {', '.join(TIERS)}")
    return errors


def pytest_addoption(parser):
    parser.addoption(
        "--tier-groups",
        action="store_true",
        help="on xdist workers: the stack tier on one worker, every other module on one (tests/tier_scheduling.py)",
    )


def pytest_configure(config):
    """The controller of a `--tier-groups` run names the file its workers record the groups in, and keeps
    the queue in the workers' order (xdist would sort the groups by their number of tests)."""
    if config.getoption("tier_groups", False) and not hasattr(config, "workerinput"):
        import tempfile

        config.option.loadscopereorder = False
        folder = Path(tempfile.mkdtemp(prefix="soco-tier-groups-"))
        os.environ[tier_scheduling.FILE_ENV] = str(folder / "groups.json")


def pytest_unconfigure(config):
    """The controller removes the groups file's folder."""
    if config.getoption("tier_groups", False) and not hasattr(config, "workerinput"):
        shutil.rmtree(Path(os.environ.pop(tier_scheduling.FILE_ENV)).parent, ignore_errors=True)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """`--tier-groups`: tests/tier_scheduling.TierScheduling."""
    if config.getoption("tier_groups", False):
        return tier_scheduling.TierScheduling(config, log, Path(os.environ[tier_scheduling.FILE_ENV]))
    return None


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects: every collected test is checked
def pytest_collection_modifyitems(config, items):
    """Refuse the run when a test has no tier marker or more than one; order each module's tests fewest
    fixtures first; on a `--tier-groups` worker, order the tests by tier and record their groups
    (tests/tier_scheduling.py)."""
    errors = tier_errors(items)
    if errors:
        message = (
            "every test needs exactly one tier marker (`pytestmark = pytest.mark.unit` after the imports, or "
            "`pipeline`, `stack`; see docs/develop.md):\n  " + "\n  ".join(errors)
        )
        if hasattr(config, "workerinput"):
            # An xdist worker's usage error reaches the controller as an INTERNALERROR without the message;
            # a failed collection report reaches it whole, and the worker then runs nothing.
            report = pytest.CollectReport("tests", "failed", message, [])
            config.hook.pytest_collectreport(report=report)
            items[:] = []
            return
        raise pytest.UsageError(message)
    tier_scheduling.fewest_fixtures_first(items)
    if config.getoption("tier_groups", False) and hasattr(config, "workerinput"):
        tiers = {item.nodeid: item_tiers(item)[0] for item in items}
        tier_scheduling.order_and_record(items, tiers, Path(os.environ[tier_scheduling.FILE_ENV]))


def skip_outside_needs(report, excinfo) -> str | None:
    """Where a skip came from when that is not tests/needs.py (a bare pytest.skip, skipif, importorskip).
    Told by the frames the skip passed through: a skip raised in a fixture is reported at the test's own
    location, so the report alone cannot tell a fixture's need_hardware from a bare skip."""
    if not report.skipped or not isinstance(report.longrepr, tuple):
        return None
    if excinfo is not None and any(Path(str(e.path)).resolve() == NEEDS for e in excinfo.traceback):
        return None
    path, line, reason = report.longrepr
    return f"{path}:{line}: {reason}"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Under CI=true a skip that does not come from tests/needs.py fails: a bare skip hides an untested path."""
    outcome = yield
    report = outcome.get_result()
    where = skip_outside_needs(report, call.excinfo) if in_ci() else None
    if where:
        report.outcome = "failed"
        report.longrepr = (
            f"skipped outside tests/needs.py under CI=true ({where}); skip through need() for a program "
            "CI installs, need_hardware() for hardware the machine may lack"
        )
