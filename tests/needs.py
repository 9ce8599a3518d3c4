"""Tests that need a program the machine may lack: skipped on a developer's machine, failed under CI.

`.ci/run` installs chromium, redis-server and postgresql and sets CI=true; there, a missing program means
the feature went untested, so the test fails instead of reporting a skip that hides it.
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
