"""Named pause points for fault-injection tests: stop a process at a known point, deterministically.

With $SOCO_PAUSE_DIR set, the first `pause_point(name)` of a process writes `<dir>/<name>.paused`
(holding the pid) and waits until `<dir>/<name>.resume` exists, so a test can kill the process exactly
there (or let it go on). Unset, it costs one environment lookup. Used after the first batch of feature
maps is written and in the manifest (features/extract.py), where a kill -9 lands mid-extraction.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

ENV = "SOCO_PAUSE_DIR"
_passed: set[str] = set()


def pause_point(name: str, poll_s: float = 0.05, deadline_s: float = 3600.0) -> None:
    """Wait at `name` until the test says resume (once per process and name); no-op without $SOCO_PAUSE_DIR."""
    folder = os.environ.get(ENV)
    if not folder or name in _passed:
        return
    _passed.add(name)
    root = Path(folder)
    resume = root / f"{name}.resume"
    (root / f"{name}.paused").write_text(str(os.getpid()))
    end = time.monotonic() + deadline_s
    while not resume.exists():
        if time.monotonic() > end:
            raise TimeoutError(f"pause point {name!r}: no {resume} within {deadline_s} s")
        time.sleep(poll_s)
