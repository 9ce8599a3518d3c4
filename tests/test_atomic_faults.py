"""Atomic writes under real kills and a really full disk: readers never see temp files, the next write cleans.

Each fault is injected for real: a child process is SIGKILLed between write and rename (a complete temp
file is left) or mid-write (a truncated one); a tmpfs of a few hundred KB fills up (ENOSPC).
"""

import io
import os
import subprocess
from pathlib import Path

import pandas as pd
import pytest

from soco_pipeline.report.results_db import query, refresh_views, table_files
from soco_pipeline.storage import (
    StorageFullError,
    open_atomic,
    read_parquet,
    remove_stale_temps,
    write_bytes_atomic,
    write_parquet_atomic,
)
from soco_pipeline.tables import table_for
from tests.faults import kill_during_write, metrics_frame
from tests.needs import need

pytestmark = pytest.mark.pipeline


def _parquet_bytes(df: pd.DataFrame) -> bytes:
    buf = io.BytesIO()
    df.to_parquet(buf, index=False)
    return buf.getvalue()


def _temps(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith(".tmp-"))


@pytest.mark.parametrize("how", ["full", "half"])
def test_killed_write_is_never_read_and_the_next_write_removes_it(tmp_path, how):
    storage = tmp_path / "storage"
    tables = storage / "tables"
    metrics = table_for("metrics")
    write_parquet_atomic(metrics_frame("a", 200), metrics.path(str(tables), "a"))
    target = metrics.path(str(tables), "b")
    kill_during_write(target, _parquet_bytes(metrics_frame("b", 200, seed=1)), how, tmp_path)

    folder = tables / "metrics"
    assert len(_temps(folder)) == 1, "the kill left no temp file: the fault was not injected"
    assert not Path(target).exists()
    db = storage / "results.duckdb"
    assert refresh_views(db, str(tables)) == ["metrics"]
    assert query(db, "SELECT count(*) AS n FROM metrics").n.iloc[0] == 200  # not 400, no magic-bytes error
    assert table_files(str(tables), metrics) == [str(folder / "a.parquet")]

    # The next write of the same file removes the dead writer's temp; the published file is complete.
    write_parquet_atomic(metrics_frame("b", 200, seed=1), target)
    assert _temps(folder) == []
    refresh_views(db, str(tables))
    assert query(db, "SELECT count(*) AS n FROM metrics").n.iloc[0] == 400
    pd.testing.assert_frame_equal(read_parquet(target), metrics_frame("b", 200, seed=1))


def test_a_live_writers_temp_is_kept(tmp_path):
    """Only temps of dead writers are stale: a concurrent writer in this process keeps its file."""
    target = str(tmp_path / "x.bin")
    with open_atomic(target) as f:
        f.write(b"partial")
        f.flush()
        assert remove_stale_temps(str(tmp_path)) == []
        assert len(_temps(tmp_path)) == 1
    assert Path(target).read_bytes() == b"partial" and _temps(tmp_path) == []


@pytest.fixture
def tiny_tmpfs(tmp_path):
    """A 256 KiB tmpfs (root only): writes past it fail with a real ENOSPC."""
    mnt = tmp_path / "tiny"
    mnt.mkdir()
    try:
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mnt)],
            check=True,
            capture_output=True,
            timeout=20,
        )
    except (OSError, subprocess.SubprocessError) as e:
        need(False, f"a tmpfs mount (root with mount rights; here: {e})")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False, capture_output=True, timeout=20)


def test_disk_full_names_the_storage_root_and_bytes_and_leaves_no_orphan(tiny_tmpfs, monkeypatch):
    monkeypatch.setenv("SOCO_STORAGE", str(tiny_tmpfs))
    write_bytes_atomic(str(tiny_tmpfs / "small.bin"), b"x" * 1000)
    big = os.urandom(600_000)
    with pytest.raises(StorageFullError) as e:
        write_bytes_atomic(str(tiny_tmpfs / "features" / "big.npy"), big)
    msg = str(e.value)
    assert str(tiny_tmpfs) in msg and "600,000 bytes" in msg and "SOCO_STORAGE" in msg
    assert e.value.errno == 28
    assert sorted(p.name for p in tiny_tmpfs.rglob("*") if p.is_file()) == ["small.bin"]  # no orphan
    df = metrics_frame("a", 50_000)
    with pytest.raises(StorageFullError, match="bytes"):
        write_parquet_atomic(df, str(tiny_tmpfs / "tables" / "metrics" / "a.parquet"))
    assert not (tiny_tmpfs / "tables" / "metrics" / "a.parquet").exists()
    assert _temps(tiny_tmpfs / "tables" / "metrics") == []


def test_disk_full_during_extraction_leaves_no_orphan_and_a_rerun_resumes(tiny_tmpfs, tmp_path, monkeypatch):
    """A real ENOSPC in the middle of a feature extraction (SIFT maps of 16 KB into 256 KiB)."""
    import numpy as np
    from PIL import Image

    from soco_pipeline.backbones import parse_spec, spec_hash
    from soco_pipeline.features import FeatureStore, extract_features
    from soco_pipeline.features.layout import feature_dir, read_manifest

    monkeypatch.setenv("SOCO_STORAGE", str(tiny_tmpfs))
    rng = np.random.default_rng(0)
    rows = []
    for i in range(40):
        uri = tmp_path / "img" / f"car_{i:04d}.png"
        uri.parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(rng.integers(0, 256, size=(64, 64, 3), dtype=np.uint8)).save(uri)
        rows.append(
            {"image_id": f"car_{i:04d}", "uri": str(uri), "width": 64, "height": 64, "category": "car"}
        )
    images = pd.DataFrame(rows)
    spec = parse_spec(
        {
            "kind": "classical",
            "model": "sift",
            "input": {"nearest_multiple": 64},
            "normalisation": "raw",
            "batch_size": 2,
        },
        "sift_full",
    )
    cache = str(tiny_tmpfs / "features")
    with pytest.raises(StorageFullError) as e:
        extract_features(spec, images, cache)
    assert str(tiny_tmpfs) in str(e.value) and "bytes" in str(e.value) and "a rerun resumes" in str(e.value)
    folder = Path(feature_dir(cache, spec.name, spec_hash(spec)))
    listed = set(read_manifest(str(folder)).path.str.rsplit("/", n=1).str[-1])
    on_disk = {p.name for p in folder.glob("*.npy")}
    assert on_disk == listed and 0 < len(on_disk) < 40  # no orphan: every map left is in the manifest
    assert not list(folder.glob(".tmp-*"))

    subprocess.run(["mount", "-o", "remount,size=4m", str(tiny_tmpfs)], check=True, timeout=20)
    manifest = extract_features(spec, images, cache)
    assert len(manifest) == 40
    assert len(FeatureStore.from_manifest(cache, manifest).get_many(list(images.image_id))) == 40


def test_disk_full_during_a_vit_extraction_keeps_every_listed_class_token(tiny_tmpfs, tmp_path, monkeypatch):
    """A real ENOSPC while a ViT writes maps and class tokens: the orphan cleanup keeps the class tokens
    the manifest lists (it used to delete them all), and after space is freed the rerun resumes and every
    class token reads."""
    import numpy as np
    from PIL import Image

    import soco_pipeline.features.extract as extract_module
    from soco_pipeline.backbones import parse_spec, spec_hash
    from soco_pipeline.features import FeatureStore, extract_features
    from soco_pipeline.features.layout import feature_dir, read_manifest

    monkeypatch.setenv("SOCO_STORAGE", str(tiny_tmpfs))
    # The manifest is flushed after every batch (not every 10 s), so some batches are listed when the disk
    # fills however fast this machine is.
    monkeypatch.setattr(extract_module, "FLUSH_SECONDS", 0.0)
    rng = np.random.default_rng(0)
    rows = []
    for i in range(48):
        uri = tmp_path / "img" / f"car_{i:04d}.png"
        uri.parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(rng.integers(0, 256, size=(48, 64, 3), dtype=np.uint8)).save(uri)
        rows.append(
            {"image_id": f"car_{i:04d}", "uri": str(uri), "width": 64, "height": 48, "category": "car"}
        )
    images = pd.DataFrame(rows)
    # 4 x 4 x 192 fp16 maps (6 KB) and 192-value class tokens: 48 images do not fit in 256 KiB.
    spec = parse_spec(
        {
            "kind": "timm",
            "model": "vit_tiny_patch16_224",
            "input": {"nearest_multiple": 64},
            "batch_size": 4,
            "device": "cpu",
        },
        "vit_full",
    )
    cache = str(tiny_tmpfs / "features")
    with pytest.raises(StorageFullError, match="a rerun resumes"):
        extract_features(spec, images, cache)
    folder = Path(feature_dir(cache, spec.name, spec_hash(spec)))
    manifest = read_manifest(str(folder))
    assert 0 < len(manifest) < 48
    listed = set(manifest.path.str.rsplit("/", n=1).str[-1]) | set(
        manifest.cls_path.str.rsplit("/", n=1).str[-1]
    )
    assert {p.name for p in folder.glob("*.npy")} == listed  # no orphan, and nothing listed deleted
    assert all(name.endswith(".cls.npy") for name in listed - set(manifest.path.str.rsplit("/", n=1).str[-1]))

    subprocess.run(["mount", "-o", "remount,size=4m", str(tiny_tmpfs)], check=True, timeout=20)
    logs: list[str] = []
    manifest = extract_features(spec, images, cache, log=logs.append)
    assert len(manifest) == 48 and any(f"{len(listed) // 2} cached" in m for m in logs)
    store = FeatureStore.from_manifest(cache, manifest)
    assert all(store.class_token(i).shape == (192,) for i in images.image_id)
