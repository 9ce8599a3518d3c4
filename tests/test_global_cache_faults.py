"""Fault injection on the shared global-feature cache (issue 38): damaged manifest and info.json, a deleted
shard, two writers of one folder, and a crop the backbone cannot take. Each fault gets a named error that
says the fix, and a re-extraction that repairs exactly what is damaged."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from soco_pipeline.backbones import list_specs
from soco_pipeline.features import GlobalInputPolicy, cached_global
from soco_pipeline.features.global_cache import extract_global, read_global
from soco_pipeline.features.global_extractors import VariantOracle
from soco_pipeline.features.layout import FeatureError
from soco_pipeline.storage import read_parquet

pytestmark = pytest.mark.unit

POLICY = GlobalInputPolicy(resize=20, crop=16, batch_size=2, threads=1)


def _images(folder: Path, prefix: str, n: int, seed: int = 0) -> pd.DataFrame:
    """n small random PNGs as an image table with a two-class `label` column (what VariantOracle reads)."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    rows = []
    for i in range(n):
        uri = str(folder / f"{prefix}{i}.png")
        Image.fromarray(rng.integers(0, 256, (18, 20, 3), dtype=np.uint8)).save(uri)
        rows.append({"image_id": f"{prefix}/{i}", "uri": uri, "width": 20, "height": 18, "label": i % 2})
    return pd.DataFrame(rows)


def _manifests(folder: str) -> list[Path]:
    return sorted(Path(folder).glob("manifest*.parquet"))


@pytest.fixture
def cache(tmp_path):
    """A folder with 6 images cached by two extraction runs (4, then 2 more), and the originals."""
    ex, root = VariantOracle("label", 2), str(tmp_path / "cache")
    images = _images(tmp_path / "img", "a", 6)
    extract_global(ex, images.iloc[:4], root, POLICY)
    first = extract_global(ex, images, root, POLICY)
    return ex, root, images, first, ex.cache_folder(root, POLICY)


@pytest.mark.parametrize("damage", ["random_bytes", "truncated"])
def test_damaged_manifest_named_then_repaired(cache, damage):
    ex, root, images, first, folder = cache
    newest = _manifests(folder)[-1]
    held = len(read_parquet(str(newest)))
    data = newest.read_bytes()
    newest.write_bytes(
        np.random.default_rng(1).bytes(len(data)) if damage == "random_bytes" else data[: len(data) // 2]
    )
    with pytest.raises(FeatureError, match="manifest") as err:
        read_global(folder, images.image_id)
    assert str(newest) in str(err.value) and "extract" in str(err.value)
    logs: list[str] = []
    again = extract_global(ex, images, root, POLICY, logs.append)
    # only the rows the damaged file held are extracted again
    line = next(m for m in logs if "to extract" in m)
    assert f"{len(images) - held} cached" in line and f"{held} to extract" in line
    assert any(str(newest) in m and "damaged" in m for m in logs) and not newest.exists()
    np.testing.assert_array_equal(again.cls_last, first.cls_last)
    np.testing.assert_array_equal(read_global(folder, images.image_id).patch_mean, first.patch_mean)


@pytest.mark.parametrize("damage", ["deleted", "corrupt"])
def test_damaged_info_json_named_then_rewritten_without_extracting(cache, damage):
    ex, root, images, first, folder = cache
    info = Path(folder) / "info.json"
    if damage == "deleted":
        info.unlink()
    else:
        info.write_text('{"dims": [2, 2')
    with pytest.raises(FeatureError, match="info.json") as err:
        read_global(folder, images.image_id)
    assert str(info) in str(err.value) and "extract" in str(err.value)
    shards = {p.name: p.stat().st_mtime_ns for p in Path(folder).glob("part-*.npy")}
    logs: list[str] = []
    again = extract_global(ex, images, root, POLICY, logs.append)
    assert "6 cached" in logs[0] and "0 to extract" in logs[0]
    assert any("info.json" in m and "rewrote" in m for m in logs)
    assert {
        p.name: p.stat().st_mtime_ns for p in Path(folder).glob("part-*.npy")
    } == shards  # no shard touched
    np.testing.assert_array_equal(again.cls_prev, first.cls_prev)
    np.testing.assert_array_equal(read_global(folder).cls_last, read_global(folder).cls_last)


def test_deleted_shard_named_with_the_fix(cache):
    ex, root, images, first, folder = cache
    shard = sorted(Path(folder).glob("part-*.npy"))[0]
    shard.unlink()
    with pytest.raises(FeatureError) as err:
        read_global(folder, images.image_id)
    assert str(shard) in str(err.value) and "missing" in str(err.value) and "materialize" in str(err.value)
    logs: list[str] = []
    again = extract_global(ex, images, root, POLICY, logs.append)
    assert "4 cached" in logs[0] and "2 to extract" in logs[0]  # only the deleted shard's images
    np.testing.assert_array_equal(again.cls_last, first.cls_last)


def test_two_writers_of_one_folder_lose_no_manifest_row(tmp_path):
    """SOCO's global_feature_manifest and FG-BMK's global features write one folder when their policies
    agree: two writers at once, batch size 1, 24 trials, every row of both must be listed afterwards."""
    ex, policy = VariantOracle("label", 2), POLICY.model_copy(update={"batch_size": 1})
    soco, fgbmk = _images(tmp_path / "img", "soco", 8, 1), _images(tmp_path / "img", "fgbmk", 8, 2)
    lost = []
    for trial in range(24):
        root, errors = str(tmp_path / f"cache{trial}"), []

        def write(images, root=root, errors=errors):
            try:
                extract_global(ex, images, root, policy)
            except Exception as e:  # noqa: BLE001 - reported by the assert below
                errors.append(repr(e))

        threads = [threading.Thread(target=write, args=(t,)) for t in (soco, fgbmk)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        assert not errors and not any(t.is_alive() for t in threads), errors
        listed = read_global(ex.cache_folder(root, policy)).image_ids
        lost.append(16 - len(set(listed)))
    assert lost == [0] * 24, f"manifest rows lost per trial: {lost}"


def test_crop_not_a_multiple_of_the_vit_patch_is_refused_before_extraction(tmp_path):
    spec = list_specs()["vit_small_random"]  # ViT-S/14
    images = _images(tmp_path / "img", "v", 2)
    bad = GlobalInputPolicy(resize=256, crop=200, batch_size=2, threads=1)
    with pytest.raises(ValueError, match="crop") as err:
        cached_global(spec, images, str(tmp_path / "cache"), bad, {"device": "cpu"})
    assert "14" in str(err.value) and "196" in str(err.value) and "210" in str(err.value)
    assert not list((tmp_path / "cache").rglob("part-*.npy"))  # refused before any shard was written


def test_a_copied_storage_root_reads_its_own_global_cache(tmp_path):
    """global_feature_manifest / fgbmk_global_features store the cache folder relative to the cache root: a
    copy of the storage root reads the copy's cache, not the original's (which is gone here)."""
    import shutil

    from soco_pipeline.features import resolve_folder

    ex, original = VariantOracle("label", 2), tmp_path / "a" / "features"
    images = _images(tmp_path / "img", "c", 3)
    feats = extract_global(ex, images, str(original), POLICY)
    table = feats.table("oracle_variant", ex.cache_folder(str(original), POLICY), str(original))
    assert not table.folder.iloc[0].startswith("/") and table.folder.iloc[0].startswith("oracle_variant/")
    copy = tmp_path / "b" / "features"
    shutil.copytree(original, copy)
    shutil.rmtree(original)
    folder = resolve_folder(table.folder.iloc[0], str(copy))
    assert folder.startswith(str(copy))
    np.testing.assert_array_equal(read_global(folder, images.image_id).cls_last, feats.cls_last)
    # a table written before (an absolute folder) still names its folder
    assert resolve_folder("/abs/x/global_1", str(copy)) == "/abs/x/global_1"


def test_a_crop_that_is_a_multiple_of_the_patch_extracts(tmp_path):
    spec = list_specs()["vit_small_random"]
    images = _images(tmp_path / "img", "w", 2)
    ok = GlobalInputPolicy(resize=210, crop=196, batch_size=2, threads=1)
    feats, _ = cached_global(spec, images, str(tmp_path / "cache"), ok, {"device": "cpu"})
    assert feats.cls_last.shape == (2, 384) and np.isfinite(feats.cls_last).all()
