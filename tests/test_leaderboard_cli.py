"""`soco leaderboard --family F [--columns ...] [--format ...]`: the headline columns in 120 columns by default,
every column in csv, an unknown column named with the board's columns."""

import json
import subprocess

import pytest

import soco_pipeline.defs.definitions  # noqa: F401 - loading the definitions registers the family tables
from soco_pipeline.cli import soco as cli
from soco_pipeline.report.results_db import refresh_views
from tests.dagster_server import VENV_BIN
from tests.faults import child_env
from tests.report_fixtures import write_storage

pytestmark = pytest.mark.unit


@pytest.fixture
def storage(tmp_path, monkeypatch):
    root = tmp_path / "storage"
    write_storage(root)
    refresh_views(root / "results.duckdb", str(root / "tables"))
    monkeypatch.setenv("SOCO_STORAGE", str(root))
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    return root


def test_family_boards_fit_and_take_options(storage, capsys):
    assert cli.main(["leaderboard", "--family", "mmvm"]) == 0
    out = capsys.readouterr().out
    assert max(map(len, out.splitlines())) <= 120 and "nan" not in out
    assert "data_source: simulated: procedural MMVM cases" in out and "cue:" not in out
    assert cli.main(["leaderboard", "--family", "tpips"]) == 0
    out = capsys.readouterr().out
    assert "TPIPS extracts every backbone at 64 x 64 px" in out  # why input sizes do not matter here
    assert cli.main(["leaderboard", "--family", "mmvm", "--format", "csv"]) == 0
    header = capsys.readouterr().out.splitlines()[0].split(",")
    assert "cue:matching_cue_number_23" in header and len(header) == 33
    assert (
        cli.main(["leaderboard", "--family", "mmvm", "--columns", "model,accuracy", "--format", "json"]) == 0
    )
    rows = json.loads(capsys.readouterr().out)
    assert len(rows) == 5 and all(set(r) == {"model", "accuracy"} for r in rows)
    assert cli.main(["leaderboard", "--family", "mmvm", "--columns", "model,acuracy"]) == 2
    err = capsys.readouterr().err
    assert "no column 'acuracy' on this board; its columns: data_source, model," in err
    assert cli.main(["leaderboard"]) == 0  # SOCO's board: its levels and SOC's CI
    out = capsys.readouterr().out
    assert "| SOC 95% CI" in out and "efficientnet_lite0_320 [partial: limit=2/category]" in out


def test_the_console_script_prints_the_tpips_board_with_its_not_applicable_row(storage):
    """`soco leaderboard --family tpips` in a fresh process: the n/a row's NULL `conditioned` reads n/a (it
    raised `boolean value of NA is ambiguous`), every line fits 120 columns."""
    done = subprocess.run(
        [str(VENV_BIN / "soco"), "leaderboard", "--family", "tpips"],
        env=child_env(SOCO_STORAGE=str(storage), DAGSTER_HOME=str(storage.parent / "home")),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [line for line in done.stdout.splitlines() if line.startswith("| dense_sift")]
    assert len(rows) == 1 and "| n/a " in rows[0], done.stdout
    assert "| yes " in done.stdout and max(map(len, done.stdout.splitlines())) <= 120
