"""Named pause points for fault-injection tests: with $SOCO_PAUSE_DIR set, a process's first
`pause_point(name)` writes `<dir>/<key>.paused` (its pid) and waits for `<dir>/<key>.resume`; $SOCO_PAUSE_AT
(`name@scope,...`) limits it to the listed keys, so a long-lived worker stops only in the step meant."""

from __future__ import annotations

import os
import time
from pathlib import Path

from soco_pipeline.settings import variable

ENV = "SOCO_PAUSE_DIR"
ONLY_ENV = "SOCO_PAUSE_AT"
_passed: set[str] = set()


def pause_key(name: str, scope: str = "") -> str:
    """The key of a scoped pause point, as $SOCO_PAUSE_AT lists it and its files are named."""
    return f"{name}@{scope}" if scope else name


def pause_point(name: str, scope: str = "", poll_s: float = 0.05, deadline_s: float = 3600.0) -> None:
    """Wait at `name` until the test says resume (once per process and key); no-op without $SOCO_PAUSE_DIR,
    and, with $SOCO_PAUSE_AT set, unless `name@scope` is listed there."""
    folder = variable(ENV)
    if not folder:
        return
    only = variable(ONLY_ENV)
    key = pause_key(name, scope) if only else name
    if (only and key not in {k.strip() for k in only.split(",")}) or key in _passed:
        return
    _passed.add(key)
    root = Path(folder)
    resume = root / f"{key}.resume"
    (root / f"{key}.paused").write_text(str(os.getpid()))
    end = time.monotonic() + deadline_s
    while not resume.exists():
        if time.monotonic() > end:
            raise TimeoutError(f"pause point {key!r}: no {resume} within {deadline_s} s")
        time.sleep(poll_s)
