"""Imported once by the forkserver of a multiprocess run (`defs/shared/executors.PRELOAD`), so that the step
processes it forks start with Dagster's storage layer imported (1.0 s per step process otherwise, 0.08 s
with it), and die with the demo.

Killing the demo's main process does not stop the forkserver (its children hold the write end of its
"alive" pipe), so a step would live on, finish and publish after the next run marked the dead run failed.
This module opens a pidfd of the demo's main process once; every forked process starts a daemon thread that
waits on it and SIGKILLs its own process when the demo is gone (writes are atomic: nothing half-written).
"""

from __future__ import annotations

import multiprocessing.util
import os
import select
import signal
import threading

import dagster as dg

dg.DagsterInstance.ephemeral().dispose()


class DemoWatch:
    """The demo's main process (the forkserver's parent) as a pidfd, opened in the forkserver; multiprocessing's
    after-fork registry holds a weak reference to it, so the module keeps it alive."""

    def __init__(self) -> None:
        self.demo = os.getppid()
        try:
            self.pidfd: int | None = os.pidfd_open(self.demo)
        except (AttributeError, OSError):  # not Linux >= 5.3: steps are not tied to the demo
            self.pidfd = None

    def arm(self) -> None:
        """In a process just forked: a daemon thread that kills this process when the demo's main process ends."""
        if self.pidfd is not None:
            threading.Thread(target=self._wait, name="soco-die-with-demo", daemon=True).start()

    def _wait(self) -> None:
        select.select([self.pidfd], [], [])  # readable once the process has exited
        os.kill(os.getpid(), signal.SIGKILL)


WATCH = DemoWatch()
multiprocessing.util.register_after_fork(WATCH, DemoWatch.arm)
