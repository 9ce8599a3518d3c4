"""Killing only the demo's main process (issue 38): its step processes, forked by the multiprocess executor's
forkserver, must not live on as orphans that finish and publish after the run was marked failed. Each step
process asks the kernel to kill it when its parent (the forkserver, which exits with the demo) dies."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from tests.faults import crash_env, kill_session, start_demo, wait_for_pause

pytestmark = [pytest.mark.pipeline, pytest.mark.timeout(900)]


def _running(pid: int) -> bool:
    """Whether a process exists and is not a zombie (an orphan's zombie waits for init to reap it)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def test_a_killed_demo_leaves_no_step_process_behind(tmp_path):
    env = crash_env(tmp_path)
    demo = start_demo(env)
    try:
        step = wait_for_pause(env, demo, deadline_s=600)  # a feature step paused mid-extraction
        assert step != demo.pid and _running(step)
        os.kill(demo.pid, signal.SIGKILL)  # only the main process, as `kill -9 <make demo's python>`
        demo.wait(timeout=10)
        end = time.monotonic() + 30
        while _running(step) and time.monotonic() < end:
            time.sleep(0.1)
        assert not _running(step), f"step process {step} outlived the killed demo (an orphan)"
    finally:
        kill_session(demo)  # whatever else is left of the demo's session
