"""A family board whose file has vanished (issue 58): it used to drop out of `model_summary` and the results page
without a word. Through Dagster, with the project's IO manager and resources: a small family board (real
Parquet, simulated figures) is materialized with the summary assets and the page; its file is then deleted and
the summary and page re-materialized. Both runs succeed; `model_headlines`, `model_summary` and `results_report`
log a warning naming the board, its file and the fix and carry it in `missing_boards`; the page shows it at the
summary, and `soco report` (a fresh process) prints and shows it too. A board never materialized says nothing."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import dagster as dg
import pandas as pd
import pytest

from soco_pipeline.defs.definitions import build_definitions
from soco_pipeline.defs.results.report import results_report
from soco_pipeline.defs.summary.assets import headline_assets
from soco_pipeline.trust.headline import Headline
from tests.dagster_server import write_instance_yaml
from tests.faults import child_env

pytestmark = [pytest.mark.pipeline, pytest.mark.timeout(600)]

BOARD = (
    "mmvm_leaderboard"  # a registered board's name (the definitions register it); its rows are this test's
)


@dg.asset(name=BOARD)
def family_board() -> pd.DataFrame:
    """A family board (simulated figures): two models and their headline."""
    return pd.DataFrame({"model": ["alpha", "beta"], "score": [71.5, 40.25]})


@dg.asset(name="leaderboard")
def empty_soco_board() -> pd.DataFrame:
    """SOCO's board, empty: this test is about the family board."""
    return pd.DataFrame({"backbone": pd.Series([], dtype=str), "soc": pd.Series([], dtype=float)})


HEADLINE = Headline(family="mmvm", board=BOARD, values=("score",), label="score (simulated)")


def warnings_of(instance: dg.DagsterInstance, run_id: str) -> list[str]:
    return [
        e.user_message
        for e in instance.all_logs(run_id)
        if e.level == 30 and "was materialized at" in e.user_message
    ]


def materialization_meta(result, asset: str) -> dict:
    (event,) = [e for e in result.get_asset_materialization_events() if e.asset_key == dg.AssetKey(asset)]
    return event.materialization.metadata


def test_a_vanished_family_board_is_a_warning_on_the_summary_and_the_page(tmp_path):
    storage, home = tmp_path / "storage", tmp_path / "home"
    write_instance_yaml(home, storage)
    defs = build_definitions(storage_root=str(storage))
    assets = [family_board, empty_soco_board, *headline_assets((HEADLINE,)), results_report]
    board_file = storage / "tables" / f"{BOARD}.parquet"
    with dg.DagsterInstance.from_config(str(home)) as instance:

        def run(*names):
            result = dg.materialize(
                assets, selection=list(names), instance=instance, resources=defs.resources
            )
            assert result.success
            return result

        run("leaderboard", "model_headlines", "model_summary", "results_report")  # the family not yet run
        quiet = run("model_headlines", "model_summary", "results_report")
        assert warnings_of(instance, quiet.run_id) == []  # a board never materialized is not missing
        run(BOARD, "model_headlines", "model_summary")
        summary = pd.read_parquet(storage / "tables" / "model_summary.parquet").set_index("model")
        assert summary.at["alpha", "mmvm"] == 71.5
        kept = {p: p.read_bytes() for p in (storage / "tables").glob("*.parquet") if p != board_file}
        board_file.unlink()  # the fault: the board's file vanishes
        result = run("model_headlines", "model_summary", "results_report")
        said = warnings_of(instance, result.run_id)
        assert len(said) == 3  # model_headlines, model_summary, results_report
        for text in said:
            assert (
                text.startswith(f"{BOARD} was materialized at ") and f"its file {board_file} is gone" in text
            )
            assert f"re-materialize {BOARD} (and the summary after it)" in text
        for asset in ("model_headlines", "model_summary", "results_report"):
            assert BOARD in materialization_meta(result, asset)["missing_boards"].value
        page = (storage / "report" / "index.html").read_text()
        summary_section = page[page.index('<section id="summary">') :].split("</section>")[0]
        assert 'class="sim missing-board"' in summary_section and str(board_file) in summary_section
        # nothing else lost: every other table is as it was (the summary's rows, minus the vanished family)
        assert {p for p in kept if p.exists()} == set(kept)
        run(BOARD)  # the fix the warning gives
        fixed = run("model_headlines", "model_summary", "results_report")
        assert warnings_of(instance, fixed.run_id) == []
        summary = pd.read_parquet(storage / "tables" / "model_summary.parquet").set_index("model")
        assert summary.at["beta", "mmvm"] == 40.25
        board_file.unlink()  # once more, for `soco report` outside a run
    done = subprocess.run(
        [str(Path(sys.executable).parent / "soco"), "report", "--out", str(tmp_path / "page")],
        capture_output=True,
        text=True,
        timeout=180,
        env=child_env(SOCO_STORAGE=str(storage), DAGSTER_HOME=str(home)),
    )
    assert done.returncode == 0, done.stderr
    assert f"warning: {BOARD} was materialized at " in done.stderr and str(board_file) in done.stderr
    assert 'class="sim missing-board"' in (tmp_path / "page" / "index.html").read_text()
