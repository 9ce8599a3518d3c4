"""soco_pipeline/runtime/pause_points in a fresh process: with $SOCO_PAUSE_AT only the listed `name@scope` points
pause, under files named by the key, and a `.resume` left in place lets later passes go on."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from soco_pipeline.deploy.processes import wait_for
from soco_pipeline.runtime.pause_points import pause_key

pytestmark = pytest.mark.unit

CHILD = """
from soco_pipeline.runtime.pause_points import pause_point
pause_point("features_written", "other")
print("past other", flush=True)
pause_point("features_written", "mine")
print("past mine", flush=True)
"""


def _child(tmp_path, **env) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", CHILD],
        env={**os.environ, "SOCO_PAUSE_DIR": str(tmp_path), **env},
        stdout=subprocess.PIPE,
        text=True,
    )


def test_only_the_listed_key_pauses(tmp_path):
    key = pause_key("features_written", "mine")
    assert key == "features_written@mine"
    child = _child(tmp_path, SOCO_PAUSE_AT=f"{key},features_written@absent")
    try:
        wait_for("the child at its pause point", (tmp_path / f"{key}.paused").exists, 120, interval=0.1)
        assert child.poll() is None, "it waits at the listed point"
        assert sorted(p.name for p in tmp_path.iterdir()) == [f"{key}.paused"]
        (tmp_path / f"{key}.resume").write_text("")
        out, _ = child.communicate(timeout=120)
    finally:
        child.kill()
    assert out.split("\n")[:2] == ["past other", "past mine"]
    assert child.returncode == 0


def test_a_resume_left_in_place_lets_the_next_process_go_on(tmp_path):
    key = pause_key("features_written", "mine")
    (tmp_path / f"{key}.resume").write_text("")
    done = subprocess.run(
        [sys.executable, "-c", CHILD],
        env={**os.environ, "SOCO_PAUSE_DIR": str(tmp_path), "SOCO_PAUSE_AT": key},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0 and done.stdout.split() == ["past", "other", "past", "mine"]
    assert (tmp_path / f"{key}.paused").exists()


def test_without_a_selection_every_point_pauses_under_its_name(tmp_path):
    child = _child(tmp_path)
    try:
        flag = tmp_path / "features_written.paused"
        wait_for("the child at its first pause point", flag.exists, 120, interval=0.1)
        assert child.poll() is None
        (tmp_path / "features_written.resume").write_text("")
        out, _ = child.communicate(timeout=120)
    finally:
        child.kill()
    # once per process and name: the second (scope `mine`) point is the same name, passed already
    assert out.split("\n")[:2] == ["past other", "past mine"]
