"""Imported once by the forkserver of a multiprocess run (`defs/shared/executors.PRELOAD`): its step processes
start with Dagster's storage layer imported (0.08 s instead of 1.0 s each) and die with the demo, which a
killed demo does not do by itself (a step would live on and publish after the next run marked it failed)."""

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
