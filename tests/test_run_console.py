"""The console logger of `make demo` / `soco run` runs (soco_pipeline/cli/run_console.py): Dagster's note on a
skipped missing partition stays in the run's event log and off the console; every other warning is printed.
A real in-process run with the logger the demo's jobs get (`demo_job`'s Definitions)."""

import dagster as dg
import pytest

from soco_pipeline.cli.run_console import soco_console

pytestmark = pytest.mark.unit

NOTE = (
    "Couldn't load partition loopback_oracle and skipped it because the input metadata includes "
    "allow_missing_partitions=True"
)


@dg.asset
def board(context: dg.AssetExecutionContext) -> int:
    context.log.warning(NOTE)
    context.log.warning("regression reported (failed): soc fell by 12.0")
    return 1


def test_dagster_notes_stay_in_the_run_log_and_other_warnings_print(capfd):
    job = dg.define_asset_job("board_job", selection="board")
    defs = dg.Definitions(assets=[board], jobs=[job], loggers={"console": soco_console})
    with dg.DagsterInstance.ephemeral() as instance:
        result = defs.resolve_job_def("board_job").execute_in_process(
            instance=instance, run_config={"loggers": {"console": {"config": {"log_level": "WARNING"}}}}
        )
        assert result.success
        logged = [e.user_message for e in instance.all_logs(result.run_id)]
    printed = capfd.readouterr().err
    assert "Couldn't load partition" not in printed
    assert "WARNING" in printed and "regression reported (failed): soc fell by 12.0" in printed
    assert NOTE in logged  # kept in the run's log
