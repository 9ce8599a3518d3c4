"""deploy/lost_workers on a real Redis broker: find the step a worker took and never acked, fail it with the
reason as its result, and leave no message to redeliver; other messages are untouched."""

from __future__ import annotations

import json
import shutil
import signal
import sys
import tempfile
from pathlib import Path

import dagster as dg
import dagster_celery  # noqa: F401 - registers the step-arguments class its messages carry, as in the sensor's process
import pytest
from celery.exceptions import WorkerLostError

from soco_pipeline.deploy.lost_workers import celery_app, fail_lost_tasks, taken_tasks
from soco_pipeline.deploy.processes import free_port, start, stop_all, wait_for
from tests.needs import need

pytestmark = pytest.mark.stack


@pytest.fixture(autouse=True, scope="module")
def _redis_server_installed():
    """Skipped without Debian's redis-server; under CI=true that is a failure (tests/needs.py)."""
    need(bool(shutil.which("redis-server")), "Debian's redis-server")


@pytest.fixture
def redis_url():
    import redis

    port = free_port()
    folder = Path(tempfile.mkdtemp(prefix="soco-redis-"))
    svc, proc = start(
        "redis",
        [
            shutil.which("redis-server"),
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(folder),
        ],
        folder / "redis.log",
        env={},
    )
    try:
        wait_for("redis", lambda: redis.Redis(port=port, socket_timeout=1).ping(), 120)
        yield f"redis://127.0.0.1:{port}"
    finally:
        stop_all([svc], {"redis": proc}, sig=signal.SIGTERM)
        shutil.rmtree(folder, ignore_errors=True)


def step_args_packed(run_id: str, step: str) -> dict:
    """The step's arguments as dagster-celery packs them into its message: Dagster's serdes form of its
    ExecuteStepArgs (the wire format, with its stored field names), written as data because the class is private."""
    code = {"__class__": "ModuleCodePointer", "module": "soco_pipeline.defs.definitions", "fn_name": "defs"}
    repository = {
        "__class__": "RepositoryPythonOrigin",
        "executable_path": sys.executable,
        "code_pointer": code,
    }
    return {
        "__class__": "ExecuteStepArgs",
        "pipeline_origin": {
            "__class__": "PipelinePythonOrigin",
            "pipeline_name": "evaluate_backbone",
            "repository_origin": repository,
        },
        "pipeline_run_id": run_id,
        "step_keys_to_execute": [step],
    }


def _send(app, run_id: str, step: str):
    """A message shaped as dagster-celery sends it: the packed ExecuteStepArgs as a keyword argument."""
    packed = step_args_packed(run_id, step)
    return app.send_task(
        "execute_plan", kwargs={"execute_step_args_packed": packed, "executable_dict": {}}, queue="gpu"
    )


def test_the_packed_step_arguments_are_dagsters_own():
    """The hand-written message is what Dagster reads back: its public `deserialize_value` gives the run and step."""
    args = dg.deserialize_value(json.dumps(step_args_packed("run-a", "feature_manifest")))
    assert (args.run_id, args.step_keys_to_execute) == ("run-a", ["feature_manifest"])


def test_a_taken_step_is_failed_with_the_reason_and_never_redelivered(redis_url):
    app = celery_app(f"{redis_url}/0", f"{redis_url}/1")
    taken_result = _send(app, "run-a", "feature_manifest")
    waiting_result = _send(app, "run-b", "feature_manifest")
    with app.connection_for_read() as conn:
        queue = conn.SimpleQueue("gpu")
        message = queue.get(timeout=60)  # taken and not acked, as by a worker with task_acks_late
        assert message.headers["id"] == taken_result.id
        found = taken_tasks(app)
        assert [(t.task_id, t.run_id, t.step_keys) for t in found] == [
            (taken_result.id, "run-a", ("feature_manifest",))
        ]

        fail_lost_tasks(app, found, "worker gpu-worker-1@host stopped answering pings")
        assert taken_tasks(app) == []
        assert taken_result.state == "FAILURE"
        with pytest.raises(WorkerLostError, match="gpu-worker-1@host stopped answering pings"):
            taken_result.get(timeout=60, propagate=True)
        # The other message still waits in its queue, untouched.
        assert queue.get(timeout=60).headers["id"] == waiting_result.id
        assert waiting_result.state == "PENDING"
