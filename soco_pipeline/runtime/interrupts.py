"""A Ctrl-C that a finalizer swallowed is delivered again.

While a step runs, Dagster's SIGINT handler raises DagsterExecutionInterruptedError at once. If the signal
lands while Python runs a finalizer (a weakref callback or `__del__` during garbage collection), Python
cannot propagate the exception: it passes it to `sys.unraisablehook`, prints "Exception ignored in ...", and
goes on. The Ctrl-C is then lost and the run completes. This happened in tests/test_soco_run_interrupt.py,
inside SQLAlchemy's `_collection_gced`. The hook below sends SIGINT to this process again, so the handler
runs once the finalizer has returned, in ordinary code, where the exception propagates.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from collections.abc import Iterator

INTERRUPTS = ("DagsterExecutionInterruptedError", "KeyboardInterrupt")


def is_interrupt(exc: BaseException | None) -> bool:
    """Whether `exc` is a Ctrl-C: KeyboardInterrupt or Dagster's interrupt error (matched by class name, so
    that this module imports no Dagster)."""
    return exc is not None and any(c.__name__ in INTERRUPTS for c in type(exc).__mro__)


@contextlib.contextmanager
def redeliver_swallowed_interrupts() -> Iterator[None]:
    """For the block, a Ctrl-C swallowed in a finalizer is sent to this process again (SIGINT); every other
    unraisable exception goes to the hook that was there before."""
    previous = sys.unraisablehook

    def hook(unraisable) -> None:
        if is_interrupt(unraisable.exc_value):
            os.kill(os.getpid(), signal.SIGINT)
        else:
            previous(unraisable)

    sys.unraisablehook = hook
    try:
        yield
    finally:
        sys.unraisablehook = previous
