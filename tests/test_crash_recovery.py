"""A run killed with SIGKILL mid-extraction does not block the next one: it is failed, its pool slot freed.

End to end with the instance config the Makefile installs (sqlite, `pools: default_limit: 1`): `python -m
soco_pipeline.demo` in a child process, SIGKILLed once its backbone's first feature map is on disk, then a
second demo in a new process, which must complete within a deadline. Plus the slot-waiting message and the
dead-run check against the instance's real concurrency tables.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import dagster as dg
import pytest

from soco_pipeline.defs.recovery import HOST_TAG, PID_TAG, fail_dead_runs, process_tags, waiting_message
from soco_pipeline.storage import read_parquet
from soco_pipeline.tables import table_for
from tests.dagster_server import write_instance_yaml
from tests.faults import BACKBONE, crash_env, kill, start_demo, wait_for_line, wait_for_maps


def _instance(home: str) -> dg.DagsterInstance:
    return dg.DagsterInstance.from_config(home)


@pytest.mark.timeout(900)
def test_kill_9_mid_extraction_then_the_next_run_completes(tmp_path):
    env = crash_env(tmp_path)
    features = Path(env["SOCO_STORAGE"]) / "features" / BACKBONE
    first = start_demo(env)
    try:
        wait_for_line(first, f"backbone {BACKBONE}", deadline_s=300)
        wait_for_maps(features, deadline_s=300)
        os.kill(first.pid, signal.SIGKILL)  # as the OOM killer would
    finally:
        kill(first)
    assert first.returncode == -signal.SIGKILL
    n_at_kill = len([p for p in features.glob("*/*.npy") if not p.name.endswith(".cls.npy")])
    assert n_at_kill > 0, "the kill landed before extraction"

    with _instance(env["DAGSTER_HOME"]) as instance:
        stuck = instance.get_runs(filters=dg.RunsFilter(statuses=[dg.DagsterRunStatus.STARTED]))
        assert len(stuck) == 1 and stuck[0].tags.get("dagster/partition") == BACKBONE
        held = instance.event_log_storage.get_concurrency_info("gpu").claimed_slots
        assert [s.run_id for s in held] == [stuck[0].run_id]  # the fault: a dead run holds the only slot
        dead_id = stuck[0].run_id

    t0 = time.monotonic()
    second = start_demo(env)
    try:
        out, _ = second.communicate(timeout=600)
    finally:
        kill(second)
    assert second.returncode == 0, out[-4000:]
    assert f"run {dead_id}" in out and "is gone (killed or crashed)" in out
    assert BACKBONE in out.split("end to end")[0]  # the leaderboard has the backbone
    with _instance(env["DAGSTER_HOME"]) as instance:
        assert instance.get_run_by_id(dead_id).status == dg.DagsterRunStatus.FAILURE
        assert instance.event_log_storage.get_concurrency_info("gpu").claimed_slots == []
    n_images = len(read_parquet(table_for("image_set").path(str(Path(env["SOCO_STORAGE"]) / "tables"))))
    maps = [p for p in features.glob("*/*.npy") if not p.name.endswith(".cls.npy")]  # not class tokens
    assert len(maps) == n_images > n_at_kill
    assert list(features.glob("*/.tmp-*")) == []  # the killed writer's temp files were swept
    print(f"recovered in {time.monotonic() - t0:.1f} s")


def _run(instance: dg.DagsterInstance, status: dg.DagsterRunStatus, tags: dict[str, str]) -> dg.DagsterRun:
    run = dg.DagsterRun(job_name="__ephemeral_asset_job__", run_id=str(uuid.uuid4()), status=status, tags=tags)
    return instance.add_run(run)


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait(timeout=30)
    return proc.pid


def test_a_waiting_run_names_the_run_that_holds_the_slot_and_a_dead_holder_is_freed(tmp_path):
    home = tmp_path / "home"
    write_instance_yaml(home, tmp_path / "storage")
    with _instance(str(home)) as instance:
        storage = instance.event_log_storage
        holder = _run(
            instance, dg.DagsterRunStatus.STARTED,
            {HOST_TAG: process_tags()[HOST_TAG], PID_TAG: str(_dead_pid()), "dagster/partition": "vit"},
        )
        alive = _run(instance, dg.DagsterRunStatus.STARTED, {**process_tags(), "dagster/partition": "sift"})
        waiter = _run(instance, dg.DagsterRunStatus.STARTED, process_tags())
        assert storage.initialize_concurrency_limit_to_default("gpu")  # as the executor does: 1 slot
        assert storage.claim_concurrency_slot("gpu", holder.run_id, "feature_manifest").is_claimed
        assert not storage.claim_concurrency_slot("gpu", waiter.run_id, "feature_manifest").is_claimed

        message = waiting_message(instance, {waiter.run_id}, "gpu")
        assert message and f"run {waiter.run_id} is waiting for a slot of pool 'gpu' (limit 1)" in message
        assert f"held by run {holder.run_id} (STARTED, partition vit) step feature_manifest" in message

        logs: list[str] = []
        assert fail_dead_runs(instance, logs.append) == [holder.run_id]  # the live runs are left alone
        assert instance.get_run_by_id(holder.run_id).status == dg.DagsterRunStatus.FAILURE
        assert instance.get_run_by_id(alive.run_id).status == dg.DagsterRunStatus.STARTED
        assert len(logs) == 1 and holder.run_id in logs[0] and ", vit)" in logs[0] and "is gone" in logs[0]
        assert holder.run_id not in {s.run_id for s in storage.get_concurrency_info("gpu").claimed_slots}
        # The freed slot goes to the waiting step (the executor claims it on its next poll).
        assert storage.claim_concurrency_slot("gpu", waiter.run_id, "feature_manifest").is_claimed


def test_the_dead_run_sensor_fails_a_dead_run(tmp_path):
    """Under `make ui` the sensor does what `make demo` does before each run."""
    from soco_pipeline.defs.recovery import dead_run_sensor

    home = tmp_path / "home"
    write_instance_yaml(home, tmp_path / "storage")
    with _instance(str(home)) as instance:
        dead = _run(instance, dg.DagsterRunStatus.STARTED, {**process_tags(), PID_TAG: str(_dead_pid())})
        live = _run(instance, dg.DagsterRunStatus.STARTED, process_tags())
        result = dead_run_sensor(dg.build_sensor_context(instance=instance))
        assert isinstance(result, dg.SkipReason) and dead.run_id in result.skip_message
        assert instance.get_run_by_id(dead.run_id).status == dg.DagsterRunStatus.FAILURE
        assert instance.get_run_by_id(live.run_id).status == dg.DagsterRunStatus.STARTED
        again = dead_run_sensor(dg.build_sensor_context(instance=instance))
        assert again.skip_message == "no dead runs"


@pytest.mark.timeout(600)
def test_ctrl_c_while_waiting_for_a_pool_slot_stops_the_demo(tmp_path):
    """Dagster's in-process executor only checks Ctrl-C when a step starts; a run waiting for the `gpu` slot
    (held here by a live run of another process) must still stop on SIGINT, fail its run and free its claim."""
    env = crash_env(tmp_path)
    with _instance(env["DAGSTER_HOME"]) as instance:
        holder = _run(instance, dg.DagsterRunStatus.STARTED, {**process_tags(), "dagster/partition": "elsewhere"})
        storage = instance.event_log_storage
        assert storage.initialize_concurrency_limit_to_default("gpu")
        assert storage.claim_concurrency_slot("gpu", holder.run_id, "feature_manifest").is_claimed
    demo = start_demo(env)
    try:
        wait_for_line(demo, "is waiting for a slot of pool 'gpu'", deadline_s=400)
        t0 = time.monotonic()
        os.kill(demo.pid, signal.SIGINT)
        out, _ = demo.communicate(timeout=60)
    finally:
        kill(demo)
    print(f"stopped {time.monotonic() - t0:.1f} s after SIGINT")
    assert demo.returncode == 130, out[-3000:]
    assert "interrupted while waiting for a slot of pool 'gpu'" in out and "interrupted: the run" in out
    with _instance(env["DAGSTER_HOME"]) as instance:
        ours = [r for r in instance.get_runs() if r.tags.get("dagster/partition") == BACKBONE]
        assert [r.status for r in ours] == [dg.DagsterRunStatus.FAILURE]
        pending = instance.event_log_storage.get_concurrency_info("gpu").pending_steps
        assert {s.run_id for s in pending} == {holder.run_id}  # our claim is gone, the holder keeps its slot
