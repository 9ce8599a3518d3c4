"""deploy/lost_workers on a real Redis broker: find the step a worker took and never acked, fail it with the
reason as its result, and leave no message to redeliver; other messages are untouched."""

from __future__ import annotations

import shutil
import signal
import sys
import tempfile
from pathlib import Path

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


def _send(app, run_id: str, step: str):
    """A message shaped as dagster-celery sends it: the packed ExecuteStepArgs as a keyword argument."""
    from dagster._core.code_pointer import ModuleCodePointer
    from dagster._core.origin import JobPythonOrigin, RepositoryPythonOrigin
    from dagster._grpc.types import ExecuteStepArgs
    from dagster_shared.serdes import pack_value

    origin = JobPythonOrigin(
        "evaluate_backbone",
        RepositoryPythonOrigin(
            sys.executable, ModuleCodePointer("soco_pipeline.defs.definitions", "defs", None)
        ),
    )
    packed = pack_value(ExecuteStepArgs(job_origin=origin, run_id=run_id, step_keys_to_execute=[step]))
    return app.send_task(
        "execute_plan", kwargs={"execute_step_args_packed": packed, "executable_dict": {}}, queue="gpu"
    )


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
