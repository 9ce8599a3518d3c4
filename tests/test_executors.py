"""The local profile's executor: steps start from a forkserver with the pipeline preloaded unless the run
config names a start method (soco_pipeline/defs/shared/executors.py)."""

from __future__ import annotations

import os
import sys

import dagster as dg
import pytest

from soco_pipeline.defs.shared.executors import FORKSERVER, executor_for_profile, with_forkserver_default

pytestmark = pytest.mark.timeout(300)


@dg.asset
def step_process() -> dg.MaterializeResult:
    """Records whether the step process found torch imported before it imported anything itself."""
    return dg.MaterializeResult(metadata={"torch_preloaded": "torch" in sys.modules, "pid": os.getpid()})


def step_job() -> dg.JobDefinition:
    """One asset on the local profile's executor (reconstructed by name in the step processes)."""
    job = dg.define_asset_job("step_job", selection=[step_process])
    defs = dg.Definitions(assets=[step_process], jobs=[job], executor=executor_for_profile())
    return defs.resolve_job_def("step_job")


def _run(tmp_path) -> dict:
    with dg.instance_for_test(temp_dir=str(tmp_path)) as instance:
        with dg.execute_job(dg.reconstructable(step_job), instance) as result:
            assert result.success
            event = instance.get_latest_materialization_event(dg.AssetKey("step_process"))
            return {k: v.value for k, v in event.asset_materialization.metadata.items()}


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
    found = _run(tmp_path)
    assert found["pid"] != os.getpid() and found["torch_preloaded"] is True
