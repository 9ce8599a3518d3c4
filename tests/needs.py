"""The one place a test may skip: a program the machine may lack, or hardware it does not have.

`.ci/run` installs chromium, redis-server, postgresql, slurm-wlm and munge and sets CI=true; there, a missing program means
the feature went untested, so `need` fails the test instead of reporting a skip that hides it. Hardware
(a CPU feature, a CUDA device) cannot be installed: `need_hardware` skips even under CI and says so.
tests/conftest.py fails, under CI=true, any skip that does not come from this module.
"""

from __future__ import annotations

import os

import pytest


def in_ci() -> bool:
    """Whether the tests run under CI (CI=true, as .ci/run and the usual CI services set it)."""
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def need(available: bool, what: str) -> None:
    """Go on when `what` is available; otherwise skip the test, or fail it under CI=true."""
    if available:
        return
    if in_ci():
        pytest.fail(
            f"{what} is missing under CI=true (.ci/run installs it): this test must run there, not skip"
        )
    pytest.skip(f"{what} is not installed here (.ci/run installs it)")


def need_hardware(available: bool, what: str) -> None:
    """Go on when the hardware `what` is present; otherwise skip, under CI too (no install can add it)."""
    if available:
        return
    pytest.skip(f"hardware absent: {what} (a skip under CI=true too; the suite tests the other path)")
