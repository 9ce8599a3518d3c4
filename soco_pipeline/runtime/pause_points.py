"""Named pause points for fault-injection tests: stop a process at a known point, deterministically.

With $SOCO_PAUSE_DIR set, the first `pause_point(name)` of a process writes `<dir>/<name>.paused` (its pid)
and waits for `<dir>/<name>.resume`; unset, it costs one environment lookup. With $SOCO_PAUSE_AT
(`name@scope,...`) only the listed points pause, their files named by the key, so a long-lived worker stops
only in the step the test means. A `.resume` left in place lets every later pass go on.
"""

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
    key = name
    if only:
        key = pause_key(name, scope)
        if key not in {k.strip() for k in only.split(",")}:
            return
    if key in _passed:
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
