"""The storage root moved while a run writes into it (issue 58). A demo with its Dagster instance inside the
storage root (as `make demo` has it) pauses after its first batch of feature maps; the whole storage root is
moved (`os.rename`, as `mv` on one disk) and the demo goes on. It used to write the rest of the maps into a
fresh half tree at the old path and stop on sqlite's "unable to open database file". Now no write re-creates
the old path (StorageMovedError), the demo stops with one line saying the root was moved and what to do, and
the next demo in the moved root (its dagster.yaml rewritten for the new place, as make and soco do) fails the
dead run, resumes from what was written before the move and completes."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from soco_pipeline.cli.project import instance_storage, write_instance_yaml
from soco_pipeline.storage import PROJECT_ROOT, StorageMovedError, storage_gone, write_bytes_atomic
from tests.faults import BACKBONE, BATCH, crash_env, kill_session, start_demo, wait_for_pause, without_pause

pytestmark = [pytest.mark.pipeline, pytest.mark.timeout(1200)]


def test_no_write_recreates_a_storage_root_moved_under_the_run(tmp_path, monkeypatch):
    storage, home = tmp_path / "storage", tmp_path / "storage" / "dagster"
    write_instance_yaml(home, str(storage), PROJECT_ROOT)
    monkeypatch.setenv("SOCO_STORAGE", str(storage))
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    write_bytes_atomic(str(storage / "tables" / "a.bin"), b"x")  # the root in place: written
    assert storage_gone() == ""
    storage.rename(tmp_path / "moved")
    with pytest.raises(StorageMovedError, match="was moved or deleted while this run was writing"):
        write_bytes_atomic(str(storage / "features" / "b.npy"), b"y")
    assert not storage.exists()  # no half tree
    fresh = (
        tmp_path / "fresh"
    )  # a root never seen with its instance (a first `soco` command): written as ever
    monkeypatch.setenv("SOCO_STORAGE", str(fresh))
    monkeypatch.setenv("DAGSTER_HOME", str(fresh / "dagster"))
    write_bytes_atomic(str(fresh / "report" / "c.bin"), b"z")
    monkeypatch.setenv("SOCO_STORAGE", str(storage))
    monkeypatch.setenv(
        "DAGSTER_HOME", str(tmp_path / "elsewhere")
    )  # an instance outside the root: not judged
    write_bytes_atomic(str(storage / "again" / "d.bin"), b"w")


def test_a_demo_whose_storage_root_is_moved_mid_run_stops_clearly_and_resumes_in_the_new_place(tmp_path):
    env = crash_env(tmp_path)
    storage = Path(env["SOCO_STORAGE"])
    home = storage / "dagster"  # the instance inside the storage root, as the Makefile has it
    write_instance_yaml(home, str(storage), PROJECT_ROOT)
    env["DAGSTER_HOME"] = str(home)
    demo = start_demo(env)
    try:
        wait_for_pause(env, demo, deadline_s=900)
        moved = tmp_path / "moved"
        os.rename(storage, moved)  # the fault: the whole root moves while the extraction is paused in it
        (Path(env["SOCO_PAUSE_DIR"]) / "features_written.resume").write_text("")
        out, _ = demo.communicate(timeout=600)
    finally:
        kill_session(demo)
    (tmp_path / "demo-output.txt").write_text(out)
    assert demo.returncode == 1, out[-3000:]
    assert f"make demo: stopped: the storage root {storage} is gone" in out
    assert "point SOCO_STORAGE (and DAGSTER_HOME) at the new place" in out
    # the last word is ours; only Dagster's own logger (a step process writing to the instance that moved)
    # may print its failed event-log writes, before it or, as the processes interleave, after it
    lines = out.strip().splitlines()
    (at,) = [i for i, line in enumerate(lines) if line.startswith("make demo: stopped: ")]
    dagster_own = ("Exception while writing logger call to event log", "(Background on this error")
    assert all(line.startswith(dagster_own) for line in lines[at + 1 :]), lines[at:]
    assert not storage.exists()  # nothing re-created at the old path
    maps = sorted((moved / "features" / BACKBONE).glob("*/*.npy"))
    assert len(maps) == BATCH  # what was written before the move is all in the moved root
    # the rerun in the new place: the dagster.yaml rewritten for it (make / soco do), then the demo
    write_instance_yaml(moved / "dagster", str(moved), PROJECT_ROOT)
    assert instance_storage((moved / "dagster" / "dagster.yaml").read_text()) == str(moved)
    again = {**without_pause(env), "SOCO_STORAGE": str(moved), "DAGSTER_HOME": str(moved / "dagster")}
    rerun = start_demo(again)
    try:
        out, _ = rerun.communicate(timeout=900)
    except subprocess.TimeoutExpired:
        out = "(timed out)"
    finally:
        kill_session(rerun)
    assert rerun.returncode == 0, out[-3000:]
    assert "is gone (killed or crashed)" in out  # the dead run failed, its slot freed
    assert {p.name for p in maps} <= {p.name for p in (moved / "features" / BACKBONE).glob("*/*.npy")}
    assert not storage.exists()
