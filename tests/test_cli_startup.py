"""`soco sql` and `soco leaderboard` start without the pipeline's heavy libraries (issue 53: 4-7 s a call under
load, 1.6 s for `--help`): in a fresh process, parsing the command line and answering a query or printing a
board import neither Dagster nor torch (they cost 1-3 s of a 2-core machine's time on every call), nor the modules of
the commands they do not run (the cluster, `soco run`, the trust commands; for a query, the task families).
benchmarks/bench_cli_startup.py times them."""

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

import soco_pipeline.defs.definitions  # noqa: F401 - loading the definitions registers the family tables
from soco_pipeline.report.results_db import refresh_views
from soco_pipeline.storage import PROJECT_ROOT
from tests.dagster_server import VENV_BIN
from tests.report_fixtures import write_storage

pytestmark = pytest.mark.unit

HEAVY = ("dagster", "torch", "torchvision", "timm", "transformers")
# the other commands' modules, which `build_parser(command)` leaves out for sql and leaderboard
OTHER_COMMANDS = (
    "soco_pipeline.deploy.stack",
    "soco_pipeline.cli.run",
    "soco_pipeline.cli.trust",
    "soco_pipeline.cli.family_export",
)
NOT_FOR_SQL = ("soco_pipeline.tasks", "jsonschema")  # a query reads the stored tables, no family declaration
PROBE = """
import json, sys
from soco_pipeline.cli import soco as cli
try:
    code = cli.main(sys.argv[2:])
except SystemExit as e:
    code = e.code
heavy = [m for m in sys.argv[1].split(",") if m in sys.modules]
print(json.dumps({"code": code, "heavy": heavy}))
"""


def _fresh(args: list[str], env: dict[str, str]) -> tuple[dict, str]:
    """Run `soco ARGS` through soco_pipeline.cli.soco.main in a fresh interpreter: (its exit code and the heavy
    modules loaded, the command's own output)."""
    done = subprocess.run(
        [sys.executable, "-c", PROBE, ",".join(HEAVY), *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=PROJECT_ROOT,
        timeout=120,
    )
    *printed, last = done.stdout.rstrip("\n").split("\n")
    return json.loads(last), "\n".join(printed) + done.stderr


@pytest.fixture
def env(tmp_path):
    root = tmp_path / "storage"
    write_storage(root)
    refresh_views(root / "results.duckdb", str(root / "tables"))
    return {**os.environ, "SOCO_STORAGE": str(root), "DAGSTER_HOME": str(tmp_path / "home")}


@pytest.mark.parametrize(
    "args",
    [
        ["sql", "--help"],
        ["leaderboard", "--help"],
        ["sql", "select count(*) as n from leaderboard"],
        ["leaderboard", "--family", "mmvm"],
    ],
    ids=" ".join,
)
def test_sql_and_leaderboard_import_neither_dagster_nor_torch(env, args):
    result, out = _fresh(args, env)
    assert result["code"] == 0, out
    assert result["heavy"] == [], f"`soco {' '.join(args)}` imported {result['heavy']}"
    if args[-1] != "--help":
        assert out.strip(), "the command printed nothing"


def _console_script(args: list[str], env: dict[str, str]) -> tuple[subprocess.CompletedProcess, set[str]]:
    """`.venv/bin/soco ARGS` under `python -X importtime` in a fresh process: the result and every module it
    imported (importtime's lines on stderr: `import time: self | cumulative | module`)."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", str(VENV_BIN / "soco"), *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=PROJECT_ROOT,
        timeout=120,
    )
    lines = [line.rsplit("|", 1) for line in done.stderr.splitlines() if line.startswith("import time:")]
    return done, {name.strip() for _, name in lines if name.strip() != "imported package"}


def _under(modules: set[str], prefixes: tuple[str, ...]) -> list[str]:
    return sorted(m for m in modules if any(m == p or m.startswith(f"{p}.") for p in prefixes))


@pytest.mark.parametrize(
    "args, absent",
    [
        (["sql", "--help"], HEAVY + OTHER_COMMANDS + NOT_FOR_SQL),
        (
            ["sql", "select model, soc from leaderboard order by soc desc"],
            HEAVY + OTHER_COMMANDS + NOT_FOR_SQL,
        ),
        (["leaderboard", "--format", "csv"], HEAVY + OTHER_COMMANDS),
    ],
    ids=["sql --help", "sql query", "leaderboard"],
)
def test_the_console_script_imports_only_what_the_command_needs(env, args, absent):
    """Through the console script itself: the command answers (the stored board's models, best SOC first) and
    no module of `absent` is imported."""
    done, modules = _console_script(args, env)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "soco_pipeline.cli.soco" in modules and "argparse" in modules  # importtime did list the imports
    assert _under(modules, absent) == [], f"`soco {' '.join(args)}` imported {_under(modules, absent)}"
    stored = pd.read_parquet(Path(env["SOCO_STORAGE"]) / "tables" / "leaderboard.parquet")
    best_first = list(stored.sort_values("soc", ascending=False)["backbone"])
    if args[0] == "sql" and args[1] != "--help":
        rows = [line.split("|")[1].strip() for line in done.stdout.splitlines()[2:]]
        assert rows == best_first and "soco_pipeline.report.results_db" in modules
    if args[0] == "leaderboard":
        assert list(pd.read_csv(io.StringIO(done.stdout))["model"]) == best_first


def test_soco_help_still_lists_every_command(env):
    """`build_parser(command)` builds a lean parser for sql and leaderboard only: the full one lists them all."""
    done, modules = _console_script(["--help"], env)
    assert done.returncode == 0
    for command in ("sql", "leaderboard", "add-backbone", "run", "report", "export-family", "cluster"):
        assert command in done.stdout
    assert "soco_pipeline.cli.run" in modules  # the full parser imports the other commands' modules
