"""The executor per deployment profile: SOCO_PROFILE=local (default: Dagster's multiprocess executor, behind
defs/recovery's dead-run check) or distributed (dagster-celery over Redis; steps in the `gpu` pool go to the `gpu` Celery queue)."""

from __future__ import annotations

import os

import dagster as dg

PROFILES = ("local", "distributed")
GPU_QUEUE = "gpu"
# Steps in the `gpu` pool also carry this tag, so dagster-celery sends them to the `gpu` queue that only
# GPU workers (`-q gpu`) consume; every other step goes to the default queue (`dagster`).
GPU_STEP_TAGS = {"dagster-celery/queue": GPU_QUEUE}


def profile() -> str:
    """The deployment profile from $SOCO_PROFILE (local | distributed)."""
    name = os.environ.get("SOCO_PROFILE", "local") or "local"
    if name not in PROFILES:
        raise ValueError(f"SOCO_PROFILE={name!r} is not a deployment profile; use one of {PROFILES}")
    return name


def executor_for_profile() -> dg.ExecutorDefinition:
    """Dagster's default executor (multiprocess, or in-process by config) for `local`, wrapped so that every
    run first fails dead runs of this machine (defs/recovery.py); the Celery executor on
    $SOCO_CELERY_BROKER for `distributed`."""
    if profile() == "local":
        from soco_pipeline.defs.recovery import recovering

        return recovering(dg.multi_or_in_process_executor)
    from dagster_celery import celery_executor

    visibility = int(os.environ.get("SOCO_CELERY_VISIBILITY_TIMEOUT", str(6 * 3600)))
    return celery_executor.configured(
        {
            "broker": {"env": "SOCO_CELERY_BROKER"},
            "backend": {"env": "SOCO_CELERY_BACKEND"},
            "config_source": {
                # A step whose worker process dies is failed (WorkerLostError), not silently lost; a
                # message whose whole worker vanished is failed by defs/recovery.lost_worker_sensor.
                "task_acks_late": True,
                "task_reject_on_worker_lost": False,
                # one message per worker process: a worker holds only the step it runs (a whole worker
                # that dies holds nothing else; defs/recovery.lost_worker_sensor fails that one step)
                "worker_prefetch_multiplier": 1,
                "broker_transport_options": {"visibility_timeout": visibility},
            },
        },
        name="celery",
    )
