"""A Ctrl-C that lands while a finalizer runs is not lost (runtime/interrupts.py): Dagster's handler raises
inside the finalizer, Python only reports the exception to `sys.unraisablehook`, and the run would go on.
Seen in tests/test_soco_run_interrupt.py (SQLAlchemy's `_collection_gced`); here the finalizer is a
`__del__` that raises Dagster's own interrupt error, as its handler does."""

import signal
import sys
import time

import dagster as dg
import pytest

from soco_pipeline.runtime.interrupts import is_interrupt, redeliver_swallowed_interrupts

pytestmark = pytest.mark.unit


class RaisesWhenCollected:
    """An object whose finalizer raises `error` (as a signal handler that fires during it would)."""

    def __init__(self, error: BaseException):
        self.error = error

    def __del__(self):
        raise self.error


def _sigints_after(block, wait: float) -> list[int]:
    """The SIGINTs this process handles while `block` runs and until one came or `wait` seconds passed."""
    got: list[int] = []
    before = signal.signal(signal.SIGINT, lambda signo, _frame: got.append(signo))
    try:
        block()
        end = time.monotonic() + wait
        while not got and time.monotonic() < end:
            time.sleep(0.01)
    finally:
        signal.signal(signal.SIGINT, before)
    return got


def test_an_interrupt_swallowed_by_a_finalizer_is_delivered_again():
    def block():
        with redeliver_swallowed_interrupts():
            RaisesWhenCollected(
                dg.DagsterExecutionInterruptedError()
            )  # collected at once: its __del__ raises

    assert _sigints_after(block, wait=5) == [signal.SIGINT]
    assert is_interrupt(KeyboardInterrupt()) and not is_interrupt(ValueError())


def test_without_the_hook_the_interrupt_is_lost_and_other_errors_go_to_the_previous_hook(capsys):
    seen = []
    previous = sys.unraisablehook
    sys.unraisablehook = lambda unraisable: seen.append(type(unraisable.exc_value))
    try:

        def block():
            RaisesWhenCollected(dg.DagsterExecutionInterruptedError())  # what Python does by itself
            with redeliver_swallowed_interrupts():
                RaisesWhenCollected(ValueError("not an interrupt"))

        assert _sigints_after(block, wait=0.5) == []  # a signal to itself arrives in microseconds
        assert seen == [dg.DagsterExecutionInterruptedError, ValueError]
    finally:
        sys.unraisablehook = previous
    assert sys.unraisablehook is previous
