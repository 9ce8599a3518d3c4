"""The local profile's executor: steps start from a forkserver with the pipeline preloaded unless the run
config names a start method, and a run of boards only (IN_RUN_PROCESS steps) runs in the run's own process
(soco_pipeline/defs/shared/executors.py)."""

from __future__ import annotations

import os
import sys

import dagster as dg
import pytest

from soco_pipeline.defs.recovery import executor_for_profile
from soco_pipeline.defs.shared.executors import (
    FORKSERVER,
    IN_RUN_PROCESS,
    with_forkserver_default,
)

pytestmark = pytest.mark.timeout(300)


@dg.asset
def step_process() -> dg.MaterializeResult:
    """Records whether the step process found torch imported before it imported anything itself."""
    return dg.MaterializeResult(metadata={"torch_preloaded": "torch" in sys.modules, "pid": os.getpid()})


@dg.asset(op_tags=IN_RUN_PROCESS)
def board_process() -> dg.MaterializeResult:
    """A board-like step: records the process it ran in."""
    return dg.MaterializeResult(metadata={"pid": os.getpid()})


def step_job() -> dg.JobDefinition:
    """One asset on the local profile's executor (reconstructed by name in the step processes)."""
    return _job("step_job", [step_process])


def board_job() -> dg.JobDefinition:
    """Only the board-like asset."""
    return _job("board_job", [board_process])


def mixed_job() -> dg.JobDefinition:
    """The board-like asset beside an ordinary one."""
    return _job("mixed_job", [step_process, board_process])


def _job(name: str, assets: list) -> dg.JobDefinition:
    job = dg.define_asset_job(name, selection=assets)
    defs = dg.Definitions(assets=[step_process, board_process], jobs=[job], executor=executor_for_profile())
    return defs.resolve_job_def(name)


def _run(tmp_path, job=step_job) -> dict[str, dict]:
    """{asset: its materialization's metadata} after one run of `job` (the run in this process)."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    with dg.instance_for_test(temp_dir=str(tmp_path)) as instance:
        with dg.execute_job(dg.reconstructable(job), instance) as result:
            assert result.success
            out = {}
            for name in ("step_process", "board_process"):
                event = instance.get_latest_materialization_event(dg.AssetKey(name))
                if event is not None:
                    out[name] = {k: v.value for k, v in event.asset_materialization.metadata.items()}
            return out


@pytest.mark.unit
def test_the_default_start_method_is_the_preloaded_forkserver():
    default = {"multiprocess": {"max_concurrent": None, "retries": {"enabled": {}}}}
    assert with_forkserver_default(default)["multiprocess"]["start_method"] == FORKSERVER
    assert with_forkserver_default(default)["multiprocess"]["retries"] == {"enabled": {}}
    spawn = {"multiprocess": {"start_method": {"spawn": {}}}}
    assert with_forkserver_default(spawn) == spawn  # a start method the run config names is kept
    assert with_forkserver_default({"in_process": {}}) == {"in_process": {}}


@pytest.mark.pipeline
def test_a_run_with_no_start_method_forks_its_steps_from_the_preloaded_server(tmp_path):
    found = _run(tmp_path)["step_process"]
    assert found["pid"] != os.getpid() and found["torch_preloaded"] is True


@pytest.mark.pipeline
def test_a_run_of_boards_only_runs_in_its_own_process_and_a_mixed_run_forks_them_all(tmp_path):
    assert _run(tmp_path / "boards", board_job)["board_process"]["pid"] == os.getpid()
    mixed = _run(tmp_path / "mixed", mixed_job)
    assert mixed["board_process"]["pid"] != os.getpid()
    assert mixed["step_process"]["pid"] != os.getpid()
