"""Steps whose whole Celery worker vanished: failed cleanly instead of waiting hours for the broker."""

from __future__ import annotations

import base64
import functools
import json
from dataclasses import dataclass

import dagster as dg
from celery import Celery
from celery.exceptions import WorkerLostError
from kombu.transport.redis import Channel


@dataclass(frozen=True)
class TakenTask:
    """A dagster-celery step task that a worker took and has not acked (it runs or ran there)."""

    delivery_tag: str
    task_id: str
    run_id: str
    step_keys: tuple[str, ...]


@functools.cache
def celery_app(broker: str, backend: str) -> Celery:
    """A Celery client on the broker and backend, one per URLs and process (a sensor reuses its pools)."""
    return Celery("soco-recovery", broker=broker, backend=backend)


def live_workers(app: Celery, timeout: float = 2.0) -> set[str]:
    """Full names (name@host) of the workers that answer a ping within `timeout` seconds."""
    replies = app.control.ping(timeout=timeout) or []
    return {name for reply in replies for name in reply}


def _step_args(raw: dict):
    """The ExecuteStepArgs of a dagster-celery message (Celery protocol 2), or None for another task."""
    if raw.get("headers", {}).get("task") != "execute_plan":
        return None
    body = raw["body"]
    if raw.get("properties", {}).get("body_encoding") == "base64":
        body = base64.b64decode(body)
    args, kwargs = json.loads(body)[:2]  # dagster-celery passes them as keywords (task.si(...))
    packed = kwargs.get("execute_step_args_packed") or (args[0] if args else None)
    if not isinstance(packed, dict):
        return None
    step_args = dg.deserialize_value(json.dumps(packed))
    return step_args if hasattr(step_args, "run_id") and hasattr(step_args, "step_keys_to_execute") else None


def taken_tasks(app: Celery) -> list[TakenTask]:
    """Every dagster-celery step message in the broker's unacked hash (taken by a worker, not acked)."""
    found = []
    with app.connection_for_read() as conn:
        client = conn.default_channel.client
        for tag, value in client.hgetall(Channel.unacked_key).items():
            raw = json.loads(value)[0]
            step_args = _step_args(raw)
            if step_args is None:
                continue
            found.append(
                TakenTask(
                    tag.decode() if isinstance(tag, bytes) else tag,
                    raw["headers"]["id"],
                    step_args.run_id,
                    tuple(step_args.step_keys_to_execute or ()),
                )
            )
    return found


def fail_lost_tasks(app: Celery, tasks: list[TakenTask], reason: str) -> None:
    """Store WorkerLostError(reason) as each task's result and drop its message from the unacked hash."""
    with app.connection_for_write() as conn:
        client = conn.default_channel.client
        for task in tasks:
            app.backend.mark_as_failure(task.task_id, WorkerLostError(reason))
            client.pipeline().zrem(Channel.unacked_index_key, task.delivery_tag).hdel(
                Channel.unacked_key, task.delivery_tag
            ).execute()
