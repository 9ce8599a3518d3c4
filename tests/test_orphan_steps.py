"""Killing only the main process of a run on the multiprocess executor (issue 38; `dagster asset materialize`,
as a UI run's worker): its step processes, forked by the executor's forkserver, must not live on as orphans
that finish and publish after the run was marked failed. Each step process asks the kernel to kill it when
the run's process dies (soco_pipeline/runtime/worker_preload.py). `make demo` and `soco run` start no step
process: their steps run in their own process and die with it."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from tests.faults import (
    crash_env,
    feature_step_cli,
    kill_session,
    materialize_feature_inputs,
    start_child,
    wait_for_pause,
)

pytestmark = [pytest.mark.pipeline, pytest.mark.timeout(900)]


def _running(pid: int) -> bool:
    """Whether a process exists and is not a zombie (an orphan's zombie waits for init to reap it)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def test_a_killed_run_process_leaves_no_step_process_behind(tmp_path):
    env = crash_env(tmp_path)
    materialize_feature_inputs(env)
    run = start_child(feature_step_cli(), env)
    try:
        step = wait_for_pause(env, run, deadline_s=600)  # the feature step paused mid-extraction
        assert step != run.pid and _running(step)
        os.kill(run.pid, signal.SIGKILL)  # only the main process, as `kill -9 <its python>`
        run.wait(timeout=10)
        end = time.monotonic() + 30
        while _running(step) and time.monotonic() < end:
            time.sleep(0.1)
        assert not _running(step), f"step process {step} outlived the killed run process (an orphan)"
    finally:
        kill_session(run)  # whatever else is left of its session
