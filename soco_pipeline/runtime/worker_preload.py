"""Imported once by the forkserver of a multiprocess run (`defs/shared/executors.PRELOAD`), so that the step
processes it forks start with Dagster's storage layer already imported, and die with the demo.

A step process opens the instance from DAGSTER_HOME, and the first instance a process builds imports the
event-log, run and schedule storages and SQLAlchemy: 1.0 s per step process on this machine, 0.08 s once an
instance has been built in the forkserver (measured). An ephemeral instance is built and disposed of here
for its imports only; it touches no file.

A step process must also die with the demo. Killing only the demo's main process does not stop the forkserver
(every process it forks holds the write end of its "alive" pipe, so it sees no EOF while a step runs), and the
step would live on as an orphan, finish and publish after the next run marked the dead run failed. So this
module opens a pidfd of the forkserver's parent (the demo's main process) here, once, and every process the
forkserver forks starts a daemon thread that waits on it and SIGKILLs its own process when the demo is gone.
Writes are atomic, so a killed step leaves nothing half-written.
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
