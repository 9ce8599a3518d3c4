"""A killed run does not block the next one: it is failed and its pool slot freed, by every entry point.

End to end with the instance config the Makefile installs (sqlite, `pools: default_limit: 1`): a child
(`python -m soco_pipeline.cli.demo`, or a plain `dagster asset materialize`) pauses after its first batch of
feature maps is written (soco_pipeline/runtime/pause_points.py), its whole session is SIGKILLed there, then a
second child in a new process must complete within a deadline. Plus the slot-waiting message, the
dead-run check against the instance's real concurrency tables, and Ctrl-C while waiting for a slot.
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
from tests.faults import (
    BACKBONE,
    BATCH,
    crash_env,
    feature_step_cli,
    kill,
    kill_session,
    materialize_feature_inputs,
    start_child,
    start_demo,
    wait_for_line,
    wait_for_pause,
    without_pause,
)

pytestmark = pytest.mark.pipeline


def _instance(home: str) -> dg.DagsterInstance:
    return dg.DagsterInstance.from_config(home)


def _maps(features: Path) -> list[Path]:
    return [p for p in features.glob("*/*.npy") if not p.name.endswith(".cls.npy")]  # not class tokens


def _slot_state(home: str) -> dict[str, list]:
    """The STARTED runs (id, partition) and the runs that hold a `gpu` slot, as the instance has them now."""
    with _instance(home) as instance:
        stuck = instance.get_runs(filters=dg.RunsFilter(statuses=[dg.DagsterRunStatus.STARTED]))
        held = instance.event_log_storage.get_concurrency_info("gpu").claimed_slots
        return {
            "started": [(r.run_id, r.tags.get("dagster/partition")) for r in stuck],
            "held": [s.run_id for s in held],
        }


def _dead_run_holding(state: dict[str, list]) -> str:
    """The one STARTED run (our backbone's) holds the only `gpu` slot in `state`: the fault. Returns its id."""
    assert len(state["started"]) == 1 and state["started"][0][1] == BACKBONE, state
    dead_id = state["started"][0][0]
    assert state["held"] == [dead_id], state
    return dead_id


def _dead_run_holds_the_slot(home: str) -> str:
    """The one STARTED run (our backbone's) holds the only `gpu` slot: the fault. Returns its id."""
    return _dead_run_holding(_slot_state(home))


def _assert_recovered(home: str, dead_id: str) -> None:
    with _instance(home) as instance:
        assert instance.get_run_by_id(dead_id).status == dg.DagsterRunStatus.FAILURE
        assert instance.event_log_storage.get_concurrency_info("gpu").claimed_slots == []


@pytest.fixture(scope="module")
def killed_demo(tmp_path_factory):
    """A demo whose whole session was SIGKILLed mid-extraction (orchestrator, forkserver, the step: a power
    loss), paused after its first batch of feature maps: its exit code, the maps on disk and the runs and
    `gpu` slots as found right after the kill (a test then recovers from it)."""
    env = crash_env(tmp_path_factory.mktemp("crash"))
    first = start_demo(env)
    try:
        paused = wait_for_pause(env, first)
        kill_session(first)
    finally:
        kill(first)
    features = Path(env["SOCO_STORAGE"]) / "features" / BACKBONE
    return {
        "env": env,
        "paused_pid": paused,
        "demo_pid": first.pid,
        "returncode": first.returncode,
        "maps": len(_maps(features)),
        "slot": _slot_state(env["DAGSTER_HOME"]),
    }


def test_kill_9_mid_extraction_leaves_a_dead_run_holding_the_slot(killed_demo):
    assert killed_demo["returncode"] == -signal.SIGKILL
    assert killed_demo["paused_pid"] == killed_demo["demo_pid"]  # the step ran in the demo's own process
    assert killed_demo["maps"] == BATCH  # paused after exactly one batch: the kill landed mid-extraction
    _dead_run_holding(killed_demo["slot"])  # right after the kill


@pytest.mark.timeout(900)
def test_kill_9_mid_extraction_then_the_next_demo_completes(killed_demo):
    env, dead_id = killed_demo["env"], _dead_run_holding(killed_demo["slot"])
    features = Path(env["SOCO_STORAGE"]) / "features" / BACKBONE
    t0 = time.monotonic()
    second = start_demo(without_pause(env))
    try:
        out, _ = second.communicate(timeout=600)
    finally:
        kill(second)
    assert second.returncode == 0, out[-4000:]
    assert f"run {dead_id}" in out and "is gone (killed or crashed)" in out
    assert BACKBONE in out.split("end to end")[0]  # the leaderboard has the backbone
    _assert_recovered(env["DAGSTER_HOME"], dead_id)
    n_images = len(read_parquet(table_for("image_set").path(str(Path(env["SOCO_STORAGE"]) / "tables"))))
    assert len(_maps(features)) == n_images > BATCH
    assert list(features.glob("*/.tmp-*")) == []  # the killed writer's temp files were swept
    print(f"recovered in {time.monotonic() - t0:.1f} s")


@pytest.mark.timeout(900)
def test_kill_9_of_a_cli_materialization_then_the_next_cli_run_recovers(tmp_path):
    """`dagster asset materialize --select feature_manifest` (no demo, no daemon) after a killed one: the
    next one fails the dead run and frees its slot instead of waiting for it forever at DEBUG."""
    env = crash_env(tmp_path)
    materialize_feature_inputs(env)
    first = start_child(feature_step_cli(), env)
    try:
        wait_for_pause(env, first)
        kill_session(first)
    finally:
        kill(first)
    dead_id = _dead_run_holds_the_slot(env["DAGSTER_HOME"])

    second = start_child(feature_step_cli(), without_pause(env))
    try:
        out, _ = second.communicate(timeout=600)  # today's main: waits for the slot until this deadline
    finally:
        kill(second)
    assert second.returncode == 0, out[-4000:]
    assert f"run {dead_id}" in out and "is gone (killed or crashed)" in out and "WARNING" in out
    _assert_recovered(env["DAGSTER_HOME"], dead_id)


def _run(instance: dg.DagsterInstance, status: dg.DagsterRunStatus, tags: dict[str, str]) -> dg.DagsterRun:
    run = dg.DagsterRun(
        job_name="__ephemeral_asset_job__", run_id=str(uuid.uuid4()), status=status, tags=tags
    )
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
            instance,
            dg.DagsterRunStatus.STARTED,
            {HOST_TAG: process_tags()[HOST_TAG], PID_TAG: str(_dead_pid()), "dagster/partition": "vit"},
        )
        alive = _run(instance, dg.DagsterRunStatus.STARTED, {**process_tags(), "dagster/partition": "sift"})
        waiter = _run(instance, dg.DagsterRunStatus.STARTED, process_tags())
        assert storage.initialize_concurrency_limit_to_default("gpu")  # as the executor does: 1 slot
        assert storage.claim_concurrency_slot("gpu", holder.run_id, "feature_manifest").is_claimed
        assert not storage.claim_concurrency_slot("gpu", waiter.run_id, "feature_manifest").is_claimed

        message = waiting_message(instance, {waiter.run_id}, "gpu")
        assert message and f"run {waiter.run_id} is waiting for a slot of pool 'gpu' (limit 1)" in message
        assert f"held by run {holder.run_id} (STARTED, partition vit, process " in message
        assert "gone) step feature_manifest" in message and "dagster run delete" in message

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
    """A demo run waiting for the `gpu` slot (held here by a live run of this process) names the holder,
    and SIGINT stops it there: the run (in the demo's process) is failed and its claim dropped."""
    env = crash_env(tmp_path)
    with _instance(env["DAGSTER_HOME"]) as instance:
        holder = _run(
            instance, dg.DagsterRunStatus.STARTED, {**process_tags(), "dagster/partition": "elsewhere"}
        )
        storage = instance.event_log_storage
        assert storage.initialize_concurrency_limit_to_default("gpu")
        assert storage.claim_concurrency_slot("gpu", holder.run_id, "feature_manifest").is_claimed
    demo = start_demo(without_pause(env))
    try:
        wait_for_line(demo, "is waiting for a slot of pool 'gpu'", deadline_s=400)
        t0 = time.monotonic()
        os.kill(demo.pid, signal.SIGINT)
        out, _ = demo.communicate(timeout=120)
    finally:
        kill_session(demo)
    print(f"stopped {time.monotonic() - t0:.1f} s after SIGINT")
    assert demo.returncode == 130, out[-3000:]
    assert "interrupted: the run" in out
    with _instance(env["DAGSTER_HOME"]) as instance:
        ours = [r for r in instance.get_runs() if r.tags.get("dagster/partition") == BACKBONE]
        assert [r.status for r in ours] == [dg.DagsterRunStatus.FAILURE]
        pending = instance.event_log_storage.get_concurrency_info("gpu").pending_steps
        assert {s.run_id for s in pending} == {holder.run_id}  # our claim is gone, the holder keeps its slot
