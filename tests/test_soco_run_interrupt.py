"""Ctrl-C during `soco run` (its runs execute their steps in its own process, issue 53): the console script
exits 130 naming how to resume, the run in progress is marked failed, and the same command again finishes
what was left (the data, made before the interrupt, is cached)."""

from __future__ import annotations

import shutil
import signal
import subprocess
import time

import dagster as dg
import pytest

from soco_pipeline.storage import PROJECT_ROOT
from tests.dagster_server import VENV_BIN, write_instance_yaml
from tests.faults import child_env, kill_session, start_child, wait_for_line

pytestmark = [pytest.mark.pipeline, pytest.mark.timeout(600)]


def _wait_for_started_run(home, partition: str, deadline_s: float) -> None:
    """Poll the instance until a run of `partition` has started (its steps run in `soco run`'s process)."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        with dg.DagsterInstance.from_config(str(home)) as instance:
            runs = instance.get_runs(dg.RunsFilter(tags={"dagster/partition": partition}))
        if any(r.status == dg.DagsterRunStatus.STARTED for r in runs):
            return
        time.sleep(0.2)
    raise TimeoutError(f"no started run of {partition} within {deadline_s} s")


def test_ctrl_c_in_a_model_step_marks_its_run_failed_and_the_same_command_resumes(tmp_path):
    home, storage = tmp_path / "home", tmp_path / "storage"
    write_instance_yaml(home, storage)
    spec = tmp_path / "oracle_part.yaml"
    shutil.copy(PROJECT_ROOT / "assets" / "backbones" / "oracle_part.yaml", spec)
    env = child_env(
        DAGSTER_HOME=str(home),
        SOCO_STORAGE=str(storage),
        SOCO_BACKBONES_DIR=str(tmp_path / "backbones"),
        SOCO_LVLMS_DIR=str(tmp_path / "lvlms"),
        SOCO_CATEGORIES="car,dog",
        SOCO_IMAGES_PER_CATEGORY="4",
    )
    command = [str(VENV_BIN / "soco"), "run", str(spec), "--families", "soco"]
    proc = start_child(command, env)
    try:
        wait_for_line(proc, "soco / backbone oracle_part ...", deadline_s=300)
        _wait_for_started_run(home, "oracle_part", deadline_s=120)
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=120)
    finally:
        kill_session(proc)
    assert proc.returncode == 130, out[-3000:]
    assert "interrupted: the run in progress is marked failed" in out
    with dg.DagsterInstance.from_config(str(home)) as instance:
        model = [r for r in instance.get_runs() if r.tags.get("dagster/partition") == "oracle_part"]
    assert [r.status for r in model] == [dg.DagsterRunStatus.FAILURE]
    again = subprocess.run(command, env=env, capture_output=True, text=True, timeout=500)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert "[1/3] data and pairs (demo): cached, skipped" in again.stdout
    assert "[2/3] soco / backbone oracle_part ..." in again.stdout
