"""A full disk under the storage root (issue 38): the error names the full mount and its free space (not the
storage root's), and a run's one-line failure summary shows the named StorageFullError (file, bytes needed),
not the bare `OSError: [Errno 28]` beneath it."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import dagster as dg
import pytest

from soco_pipeline.cli.demo import first_error
from soco_pipeline.storage import StorageFullError, write_bytes_atomic
from tests.needs import need

pytestmark = pytest.mark.pipeline

SIZE = 256 * 1024


@pytest.fixture
def storage_with_full_features(tmp_path):
    """A storage root on the big disk whose features/ folder is a 256 KiB tmpfs (root only): writes there fail
    with a real ENOSPC while the storage root itself has plenty of space."""
    root, mnt = tmp_path / "storage", tmp_path / "storage" / "features"
    mnt.mkdir(parents=True)
    try:
        mounted = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={SIZE}", "tmpfs", str(mnt)], capture_output=True, timeout=20
        )
    except (OSError, subprocess.SubprocessError):
        mounted = None
    need(mounted is not None and mounted.returncode == 0, "mounting a tmpfs (root)")
    try:
        yield root, mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False, capture_output=True, timeout=20)


def _free_figure(message: str) -> int:
    return int(message.split(" has ", 1)[1].split(" bytes free", 1)[0].replace(",", ""))


def test_the_free_space_figure_is_the_full_mounts(storage_with_full_features, monkeypatch):
    root, mnt = storage_with_full_features
    monkeypatch.setenv("SOCO_STORAGE", str(root))
    target = mnt / "vit" / "abc" / "big.npy"
    with pytest.raises(StorageFullError) as err:
        write_bytes_atomic(str(target), os.urandom(400_000))
    msg = str(err.value)
    assert str(target) in msg and "400,000 bytes" in msg
    assert f"(mount {mnt}) has" in msg and _free_figure(msg) <= SIZE  # the tmpfs, not the storage root's disk


def test_the_run_summary_names_storage_full(storage_with_full_features, monkeypatch):
    root, mnt = storage_with_full_features
    monkeypatch.setenv("SOCO_STORAGE", str(root))
    target = mnt / "big.npy"

    @dg.asset
    def writes_a_big_file() -> None:
        write_bytes_atomic(str(target), os.urandom(400_000))

    result = dg.materialize([writes_a_big_file], raise_on_error=False)
    assert not result.success
    summary = first_error(result)
    assert "StorageFullError" in summary and str(target) in summary and "400,000 bytes" in summary
    assert "\n" not in summary.strip() and not Path(target).exists()
