"""`soco sql` prints through the 120-column printer (report/console.py): a wide result keeps the columns that
fit and names the others, a missing value reads n/a (never NaN, <NA> or NaT), `--round N` rounds every format,
Markdown has the table's cells, and rows of prose (the FG-BMK findings) print as a list, not cut to 28
characters."""

import subprocess

import numpy as np
import pandas as pd
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
    """The results page's storage, plus a model_summary 435 columns wide with null floats, dates and flags."""
    root = tmp_path / "storage"
    write_storage(root)
    columns = {"model": ["efficientnet_lite0", "oracle_part"], "simulated": [True, True]}
    for k in range(87):  # five columns per family, as trust/headline.summary_columns
        f = f"family_{k}"
        columns[f] = [41.23456, np.nan]
        columns[f"{f}_ci_low"] = [38.5, np.nan]
        columns[f"{f}_ci_high"] = [44.25, np.nan]
        columns[f"{f}_simulated"] = pd.array([True, None], dtype="boolean")
        columns[f"{f}_date"] = pd.to_datetime(["2026-12-01", None])
    summary = pd.DataFrame(columns)
    summary.to_parquet(root / "tables" / "model_summary.parquet", index=False)
    refresh_views(root / "results.duckdb", str(root / "tables"))
    monkeypatch.setenv("SOCO_STORAGE", str(root))
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    return root


def _sql(capsys, *args: str) -> str:
    assert cli.main(["sql", *args]) == 0
    return capsys.readouterr().out


def test_a_wide_result_fits_120_columns_with_no_pandas_missing_markers(storage):
    """Through the console script, in a fresh process."""
    done = subprocess.run(
        [str(VENV_BIN / "soco"), "sql", "select * from model_summary"],
        env=child_env(SOCO_STORAGE=str(storage), DAGSTER_HOME=str(storage.parent / "home")),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    assert max(map(len, out.splitlines())) <= 120, max(out.splitlines(), key=len)
    for marker in ("NaN", "<NA>", "NaT", "nan", "None"):
        assert marker not in out, marker
    assert "| efficientnet_lite0 " in out and "| n/a " in out and "n/a: NULL" in out
    assert "not shown (too wide): " in out and " and 417 more; all" in out and "columns: --format csv" in out
    assert len(out.splitlines()) < 20  # the names left out are a few, then a count


def test_round_applies_to_every_format(storage, capsys):
    q = "select model, family_0, family_0_ci_low from model_summary order by model"
    assert "|    41.23 |           38.50 |" in _sql(capsys, q, "--round", "2")
    md = _sql(capsys, q, "--round", "2", "--format", "markdown")
    assert "41.23" in md and "41.2345" not in md and "n/a" in md and md.startswith("| model")
    assert "41.2" in _sql(capsys, q, "--format", "markdown") and "41.2345" not in md  # by scale: one decimal
    csv = _sql(capsys, q, "--round", "1", "--format", "csv").splitlines()
    assert csv[1] == "efficientnet_lite0,41.2,38.5"
    assert '"family_0":41.2' in _sql(capsys, q, "--round", "1", "--format", "json")


def test_findings_print_as_a_list_with_every_word(storage, capsys):
    out = _sql(capsys, "select * from fgbmk_findings order by finding")
    assert "[1] finding: 1" in out and "[2] finding: 2" in out
    assert "    claim: CLIP-like models lead fine-grained probing" in out  # whole, not cut
    assert "why: no contrastive backbone among this run's models" in out
    assert "…" not in out and max(map(len, out.splitlines())) <= 120
