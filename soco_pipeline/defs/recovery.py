"""Dead runs and pool slots: a killed run keeps its `gpu` pool slot, which `fail_dead_runs` frees."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable

import dagster as dg

from soco_pipeline.defs.shared.automation import daemon_interval
from soco_pipeline.defs.shared.executors import forkserver_by_default, profile, wrapped_executor
from soco_pipeline.settings import variable
from soco_pipeline.storage import pid_alive

HOST_TAG, PID_TAG = "soco/host", "soco/pid"
ACTIVE = [dg.DagsterRunStatus.STARTING, dg.DagsterRunStatus.STARTED, dg.DagsterRunStatus.CANCELING]


def process_tags() -> dict[str, str]:
    """Tags naming this process and machine: put them on runs this process executes so a crash can be told."""
    return {HOST_TAG: socket.gethostname(), PID_TAG: str(os.getpid())}


def _worker_pid(instance: dg.DagsterInstance, run: dg.DagsterRun) -> int | None:
    """The pid executing `run` on this machine (our host/pid tags, else RUN_START's), or None."""
    tags = run.tags
    if PID_TAG in tags:
        return int(tags[PID_TAG]) if tags.get(HOST_TAG) == socket.gethostname() else None
    if not isinstance(instance.run_launcher, dg.DefaultRunLauncher):
        return None
    records = instance.get_records_for_run(run.run_id, of_type=dg.DagsterEventType.RUN_START, limit=1).records
    event = records[0].event_log_entry.dagster_event if records else None
    return event.pid if event is not None and event.pid else None


def fail_dead_runs(instance: dg.DagsterInstance, log: Callable[[str], None] = print) -> list[str]:
    """Fail every active run of this machine whose process is gone, free its pool slots; return their ids."""
    failed = []
    for run in instance.get_runs(filters=dg.RunsFilter(statuses=ACTIVE)):
        pid = _worker_pid(instance, run)
        if pid is None or pid == os.getpid() or pid_alive(pid):
            continue
        message = (
            f"run {run.run_id} ({run.job_name}, {run.tags.get('dagster/partition', 'unpartitioned')}) was "
            f"{run.status.value} but its process {pid} is gone (killed or crashed): marked failed, pool slots freed"
        )
        instance.report_run_failed(run, message=message)
        if instance.event_log_storage.supports_global_concurrency_limits:
            instance.event_log_storage.free_concurrency_slots_for_run(run.run_id)
        log(message)
        failed.append(run.run_id)
    return failed


def _describe(instance: dg.DagsterInstance, run_id: str) -> str:
    run = instance.get_run_by_id(run_id)
    if run is None:
        return f"run {run_id} (deleted)"
    part = run.tags.get("dagster/partition")
    pid = _worker_pid(instance, run)
    alive = "" if pid is None else f", process {pid} {'alive' if pid_alive(pid) else 'gone'}"
    return f"run {run_id} ({run.status.value}{', partition ' + part if part else ''}{alive})"


def pool_is_full(instance: dg.DagsterInstance, pool: str) -> bool:
    """Whether every slot of `pool` is claimed now (a step of it would wait)."""
    event_log = instance.event_log_storage
    if not event_log.supports_global_concurrency_limits:
        return False
    info = event_log.get_concurrency_info(pool)
    limit = info.slot_count or info.limit
    return bool(info.claimed_slots) and limit is not None and len(info.claimed_slots) >= limit


def waiting_message(instance: dg.DagsterInstance, run_ids: set[str], pool: str) -> str | None:
    """A line saying which of `run_ids` waits for a slot of `pool`, who holds it and how to free it."""
    if not instance.event_log_storage.supports_global_concurrency_limits:
        return None
    info = instance.event_log_storage.get_concurrency_info(pool)
    waiting = [s for s in info.pending_steps if s.run_id in run_ids and s.assigned_timestamp is None]
    holders = [s for s in info.claimed_slots if s.run_id not in run_ids]
    if not waiting or not holders:
        return None
    held = "; ".join(f"{_describe(instance, s.run_id)} step {s.step_key}" for s in holders)
    return (
        f"run {waiting[0].run_id} is waiting for a slot of pool {pool!r} (limit {info.slot_count}), held by "
        f"{held}. A holder whose process is gone is failed and its slot freed by the next run and the "
        f"dead_run_sensor; a live one frees it when it ends. To free it now: `dagster run delete <id>` (or "
        "Terminate in the UI)"
    )


class RecoveringExecutor(dg.Executor):
    """Dagster's own executor, preceded by `fail_dead_runs` and explaining every pool wait at WARNING."""

    def __init__(self, inner: dg.Executor):
        self.inner = inner

    @property
    def retries(self):
        """The wrapped executor's retry mode."""
        return self.inner.retries

    @property
    def step_dependency_config(self):
        """The wrapped executor's step dependency settings."""
        return self.inner.step_dependency_config

    def execute(self, plan_context, execution_plan):
        """Fail dead runs, then run the plan with the wrapped executor, explaining every pool wait."""
        instance, run_id, log = plan_context.instance, plan_context.run_id, plan_context.log
        fail_dead_runs(instance, log.warning)
        for event in self.inner.execute(plan_context, execution_plan):
            yield event
            if event.event_type == dg.DagsterEventType.ENGINE_EVENT and "blocked by limit for pool" in (
                event.message or ""
            ):
                pool = event.message.rsplit(" ", 1)[-1]
                if fail_dead_runs(instance, log.warning):
                    continue  # the freed slot goes to our step on the executor's next poll
                message = waiting_message(instance, {run_id}, pool)
                if message:
                    log.warning(message)


def recovering(inner: dg.ExecutorDefinition) -> dg.ExecutorDefinition:
    """`inner` (same name, config and requirements) wrapped in RecoveringExecutor."""
    return wrapped_executor(
        inner,
        lambda init_context: RecoveringExecutor(inner.executor_creation_fn(init_context)),
        "dead runs of this machine are failed first (soco_pipeline/defs/recovery.py)",
    )


def executor_for_profile() -> dg.ExecutorDefinition:
    """The executor of the profile: `local`, Dagster's default behind `recovering`; `distributed`, Celery."""
    if profile() == "local":
        return recovering(forkserver_by_default(dg.multi_or_in_process_executor))
    from dagster_celery import celery_executor

    visibility = int(variable("SOCO_CELERY_VISIBILITY_TIMEOUT", str(6 * 3600)))
    return celery_executor.configured(
        {
            "broker": {"env": "SOCO_CELERY_BROKER"},
            "backend": {"env": "SOCO_CELERY_BACKEND"},
            "config_source": {
                # a dead worker process fails its step (WorkerLostError); a vanished one: lost_worker_sensor
                "task_acks_late": True,
                "task_reject_on_worker_lost": False,
                # one message per worker process: a dying worker holds only the step it runs
                "worker_prefetch_multiplier": 1,
                "broker_transport_options": {"visibility_timeout": visibility},
            },
        },
        name="celery",
    )


@dg.sensor(minimum_interval_seconds=daemon_interval(30), default_status=dg.DefaultSensorStatus.RUNNING)
def dead_run_sensor(context: dg.SensorEvaluationContext) -> dg.SkipReason:
    """Every 30 s: fail the runs of this machine whose process died and free their pool slots."""
    failed = fail_dead_runs(context.instance, context.log.warning)
    return dg.SkipReason(
        f"failed {len(failed)} dead run(s): {', '.join(failed)}" if failed else "no dead runs"
    )


def in_flight_celery_steps(instance: dg.DagsterInstance, run_id: str) -> dict[str, str]:
    """step key -> Celery worker (name@host) of each step of `run_id` that a worker took and has not ended."""
    ended = {
        dg.DagsterEventType.STEP_SUCCESS,
        dg.DagsterEventType.STEP_FAILURE,
        dg.DagsterEventType.STEP_SKIPPED,
    }
    taken: dict[str, str] = {}
    for rec in instance.all_logs(run_id, of_type={dg.DagsterEventType.ENGINE_EVENT, *ended}):
        ev, step = rec.dagster_event, rec.step_key
        if ev is None or step is None:
            continue
        if ev.event_type in ended:
            taken.pop(step, None)
        elif ev.engine_event_data and "Celery worker" in ev.engine_event_data.metadata:
            taken[step] = str(ev.engine_event_data.metadata["Celery worker"].value)
    return taken


@dg.sensor(minimum_interval_seconds=daemon_interval(5), default_status=dg.DefaultSensorStatus.RUNNING)
def lost_worker_sensor(context: dg.SensorEvaluationContext) -> dg.SkipReason:
    """Distributed profile: fail the steps of a Celery worker missing pings for SOCO_LOST_WORKER_GRACE_S."""
    import json

    from soco_pipeline.deploy.lost_workers import celery_app, fail_lost_tasks, live_workers, taken_tasks

    instance = context.instance
    runs = {
        r.run_id: r for r in instance.get_runs(filters=dg.RunsFilter(statuses=[dg.DagsterRunStatus.STARTED]))
    }
    held = {
        (run_id, step): worker
        for run_id in runs
        for step, worker in in_flight_celery_steps(instance, run_id).items()
    }
    if not held:
        context.update_cursor(None)
        return dg.SkipReason("no step is running on a Celery worker")
    app = celery_app(variable("SOCO_CELERY_BROKER", None), variable("SOCO_CELERY_BACKEND", None))
    live = live_workers(app)
    missing_since: dict[str, float] = json.loads(context.cursor) if context.cursor else {}
    now = time.time()
    missing_since = {w: missing_since.get(w, now) for w in set(held.values()) - live}
    grace_s = float(variable("SOCO_LOST_WORKER_GRACE_S", "60"))  # pings a step's worker may miss
    lost = {w for w, t in missing_since.items() if now - t >= grace_s}
    failed = []
    if lost:
        tasks = taken_tasks(app)
        for (run_id, step), worker in held.items():
            if worker not in lost:
                continue
            reason = (
                f"Celery worker {worker} stopped answering pings for {now - missing_since[worker]:.0f} s "
                f"while running step {step} of run {run_id}: the step is failed as lost. Re-execute the "
                "run from failure once a worker of its queue is up again."
            )
            mine = [t for t in tasks if t.run_id == run_id and step in t.step_keys]
            if not mine:
                context.log.warning(
                    f"{reason} (no unacked message of that step in the broker: nothing to fail)"
                )
                continue
            fail_lost_tasks(app, mine, reason)
            instance.report_engine_event(reason, runs[run_id], step_key=step)
            context.log.warning(reason)
            failed.append(f"{run_id}:{step}")
    context.update_cursor(json.dumps({w: t for w, t in missing_since.items() if w not in lost}))
    if failed:
        return dg.SkipReason(
            f"failed {len(failed)} step(s) of lost workers {sorted(lost)}: {', '.join(failed)}"
        )
    return dg.SkipReason(
        f"{len(held)} step(s) on Celery workers; not answering: {sorted(missing_since) or 'none'}"
    )
