"""`soco sql` and `soco leaderboard` start without the pipeline's heavy libraries (issue 53: 4-7 s a call under
load, 1.6 s for `--help`): in a fresh process, parsing the command line and answering a query or printing a
board import neither Dagster nor torch (they cost 1-3 s of a 2-core machine's time on every call)."""

import json
import os
import subprocess
import sys

import pytest

import soco_pipeline.defs.definitions  # noqa: F401 - loading the definitions registers the family tables
from soco_pipeline.report.results_db import refresh_views
from soco_pipeline.storage import PROJECT_ROOT
from tests.report_fixtures import write_storage

pytestmark = pytest.mark.unit

HEAVY = ("dagster", "torch", "torchvision", "timm")
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
