"""Imported once by the forkserver of the demo's multiprocess runs (`demo.PRELOAD`), so that the step processes
it forks start with Dagster's storage layer already imported.

A step process opens the instance from DAGSTER_HOME, and the first instance a process builds imports the
event-log, run and schedule storages and SQLAlchemy: 1.0 s per step process on this machine, 0.08 s once an
instance has been built in the forkserver (measured). An ephemeral instance is built and disposed of here
for its imports only; it touches no file.
"""

from __future__ import annotations

import dagster as dg

dg.DagsterInstance.ephemeral().dispose()
