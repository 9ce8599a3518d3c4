"""The feature cache: manifest, fp16 files, resumption after a failure, invalidation on spec change,
clear errors for bad images and non-finite features, FeatureStore reads."""

from __future__ import annotations

import os

import numpy as np
import pandas as pd
import pytest
import torch
from PIL import Image

from soco_pipeline.backbones import build_backbone, parse_spec, spec_hash
from soco_pipeline.features import FeatureError, FeatureStore, extract_features, feature_dir
from soco_pipeline.features.layout import checksum_matches
from soco_pipeline.schemas import FeatureManifestSchema
from soco_pipeline.storage import write_parquet_atomic

pytestmark = pytest.mark.unit

SIFT = {
    "kind": "classical",
    "model": "sift",
    "input": {"nearest_multiple": 32},
    "normalisation": "raw",
    "batch_size": 1,
}


@pytest.fixture
def images(tmp_path) -> pd.DataFrame:
    rng = np.random.default_rng(0)
    rows = []
    for i, (w, h) in enumerate([(40, 30), (24, 36), (32, 32), (50, 20), (30, 30)]):
        uri = str(tmp_path / "img" / f"car_{i:04d}.png")
        os.makedirs(os.path.dirname(uri), exist_ok=True)
        Image.fromarray(rng.integers(0, 256, size=(h, w, 3), dtype=np.uint8)).save(uri)
        rows.append({"image_id": f"car_{i:04d}", "uri": uri, "width": w, "height": h, "category": "car"})
    return pd.DataFrame(rows)


class Counting:
    """Wraps a backbone's extract: counts images and optionally fails after `fail_after` of them."""

    def __init__(self, backbone, fail_after: int | None = None):
        self.backbone, self.fail_after, self.seen = backbone, fail_after, 0
        self.inner = backbone.extract
        backbone.extract = self

    def __call__(self, imgs, recs):
        if self.fail_after is not None and self.seen + len(imgs) > self.fail_after:
            raise RuntimeError("injected failure")
        self.seen += len(imgs)
        return self.inner(imgs, recs)


def mtimes(cache: str, manifest: pd.DataFrame) -> dict[str, int]:
    return {r.image_id: os.stat(os.path.join(cache, r.path)).st_mtime_ns for r in manifest.itertuples()}


def test_extract_writes_manifest_and_normalised_fp16_maps(tmp_path, images):
    spec = parse_spec(SIFT, "sift_test")
    cache = str(tmp_path / "cache")
    logs: list[str] = []
    manifest = extract_features(spec, images, cache, log=logs.append)
    FeatureManifestSchema.validate(manifest)
    assert list(manifest.image_id) == list(images.image_id)
    assert (manifest.grid_h == 4).all() and (manifest.channels == 128).all() and (manifest.stride == 8).all()
    assert any("images/s" in m and "ETA" in m for m in logs)
    for r in manifest.itertuples():
        path = os.path.join(cache, r.path)
        assert r.path.startswith(f"sift_test/{spec_hash(spec)}/")
        with open(path, "rb") as f:
            assert r.checksum.startswith("xxh3_128:") and checksum_matches(f.read(), r.checksum)
        assert np.load(path).dtype == np.float16
    store = FeatureStore(cache, "sift_test")
    feats, meta = store.get("car_0001", verify=True)
    assert feats.dtype == np.float32 and feats.shape == (128, 4, 4)
    norms = np.linalg.norm(feats, axis=0)
    assert np.all((np.abs(norms - 1) < 2e-3) | (norms == 0))
    assert meta == {
        "input_size": 32,
        "stride": 8.0,
        "grid_h": 4,
        "grid_w": 4,
        "channels": 128,
        "width": 24,
        "height": 36,
    }
    assert len(store.get_many(["car_0000", "car_0002"])) == 2 and "car_0004" in store and len(store) == 5
    with pytest.raises(KeyError, match="no cached features"):
        store.get("car_9999")


def test_resume_after_failure_recomputes_only_missing(tmp_path, images):
    spec = parse_spec(SIFT, "sift_test")
    cache = str(tmp_path / "cache")
    first = Counting(build_backbone(spec), fail_after=3)
    with pytest.raises(RuntimeError, match="injected failure"):
        extract_features(spec, images, cache, backbone=first.backbone)
    assert first.seen == 3
    partial = FeatureStore(cache, "sift_test").manifest  # flushed on the failure
    assert sorted(partial.image_id) == ["car_0000", "car_0001", "car_0002"]
    before = mtimes(cache, partial)

    second = Counting(build_backbone(spec))
    manifest = extract_features(spec, images, cache, backbone=second.backbone)
    assert second.seen == 2  # only car_0003 and car_0004
    assert len(manifest) == 5
    after = mtimes(cache, manifest)
    assert all(after[i] == before[i] for i in before)

    # A corrupted file fails its checksum and is the only one recomputed.
    path = os.path.join(cache, manifest.path.iloc[1])
    with open(path, "r+b") as f:
        f.seek(-4, os.SEEK_END)
        f.write(b"\x00\x01\x02\x03")
    third = Counting(build_backbone(spec))
    extract_features(spec, images, cache, backbone=third.backbone)
    assert third.seen == 1
    FeatureStore(cache, "sift_test").get(manifest.image_id.iloc[1], verify=True)

    # Nothing missing: the backbone is not even built.
    fourth = Counting(build_backbone(spec))
    extract_features(spec, images, cache, backbone=fourth.backbone)
    assert fourth.seen == 0


def test_spec_change_goes_to_a_new_folder(tmp_path, images):
    cache = str(tmp_path / "cache")
    spec_a = parse_spec(SIFT, "sift_test")
    spec_b = parse_spec({**SIFT, "descriptor_size": 12}, "sift_test")
    ma = extract_features(spec_a, images, cache)
    before = mtimes(cache, ma)
    mb = extract_features(spec_b, images, cache)
    assert spec_hash(spec_a) != spec_hash(spec_b)
    assert set(ma.path).isdisjoint(mb.path)
    assert mtimes(cache, ma) == before
    assert os.path.isdir(feature_dir(cache, "sift_test", spec_hash(spec_a)))
    with pytest.raises(FileNotFoundError, match="2 cached spec versions"):
        FeatureStore(cache, "sift_test")
    fa, _ = FeatureStore.for_spec(cache, spec_a).get("car_0000")
    fb, _ = FeatureStore.for_spec(cache, spec_b).get("car_0000")
    assert not np.allclose(fa, fb)


def test_missing_and_corrupt_images_are_named(tmp_path, images):
    spec = parse_spec(SIFT, "sift_test")
    cache = str(tmp_path / "cache")
    gone = images.copy()
    gone.loc[2, "uri"] = str(tmp_path / "nowhere.png")
    with pytest.raises(FeatureError, match="car_0002.*nowhere.png.*does not exist"):
        extract_features(spec, gone, cache)
    with open(images.uri[3], "wb") as f:
        f.write(b"not a png at all")
    with pytest.raises(FeatureError, match="car_0003.*not a readable image"):
        extract_features(spec, images, cache)
    wrong = images.iloc[:1].assign(width=99)
    with pytest.raises(FeatureError, match="car_0000.*record says 99x30"):
        extract_features(spec, wrong, cache)
    with pytest.raises(ValueError, match="lacks columns"):
        extract_features(spec, images.drop(columns="uri"), cache)


def test_non_finite_features_name_backbone_and_image(tmp_path, images):
    spec = parse_spec(SIFT, "sift_test")
    backbone = build_backbone(spec)
    inner = backbone.extract
    backbone.extract = lambda imgs, recs: [
        f * torch.nan if r == "car_0001" else f for f, r in zip(inner(imgs, recs), recs.image_id, strict=True)
    ]
    with pytest.raises(FeatureError, match="backbone 'sift_test'.*NaN/inf.*'car_0001'"):
        extract_features(spec, images, str(tmp_path / "cache"), backbone=backbone)


def test_oracle_and_fsspec_memory_cache_root(tmp_path, images):
    gt = pd.DataFrame(
        {
            "image_id": images.image_id,
            "category": "car",
            "keypoint": "vehicle_wheel_front_left_center",
            "x": 5.0,
            "y": 6.0,
            "visible": True,
            "part_id": 1,
        }
    )
    write_parquet_atomic(gt, str(tmp_path / "ground_truth" / "keypoints.parquet"))
    spec = parse_spec(
        {
            "kind": "oracle",
            "model": "oracle_concept",
            "input": {"nearest_multiple": 16},
            "normalisation": "raw",
            "batch_size": 2,
        },
        "oracle_concept",
    )
    cache = "memory://soco-test-cache"
    # The Dagster layer passes a dict context; "auto" keeps the spec's device.
    manifest = extract_features(
        spec, images, cache, context={"embedded_root": str(tmp_path), "device": "auto"}
    )
    assert (manifest.grid_w == 4).all()
    store = FeatureStore.from_manifest(cache, manifest)
    feats, meta = store.get("car_0000", verify=True)
    assert meta["input_size"] == 16 and feats.shape[1:] == (4, 4)
    assert store.spec_hash == spec_hash(spec)
    assert FeatureStore(cache, "oracle_concept").image_ids == list(images.image_id)
    # The schema keeps spec_hash; a manifest without it (an older one) still works.
    reduced = FeatureManifestSchema.validate(manifest.iloc[:2])
    assert "spec_hash" in reduced.columns
    reduced = reduced.drop(columns=["spec_hash", "width", "height"])
    small = FeatureStore.from_manifest(cache, reduced)
    assert small.image_ids == ["car_0000", "car_0001"]
    again, _ = small.get("car_0000")
    assert np.array_equal(again, feats) and again is not small.get("car_0000")[0]


def test_store_maps_local_files_read_only_and_names_bad_files(tmp_path, images):
    spec = parse_spec(SIFT, "sift_test")
    cache = str(tmp_path / "cache")
    manifest = extract_features(spec, images, cache).set_index("image_id")
    store = FeatureStore(cache, "sift_test", cache_items=0)
    ids = list(manifest.index)
    path = {i: os.path.join(cache, manifest.loc[i, "path"]) for i in ids}

    arr, meta = store.get_stored(ids[0])
    original = np.load(path[ids[0]])
    assert arr.dtype == np.float16 and not arr.flags.writeable
    assert arr.shape == (meta["channels"], meta["grid_h"], meta["grid_w"]) and np.array_equal(arr, original)
    assert store.get(ids[0])[0].flags.writeable  # float32 copies stay writable
    # Files are replaced by rename: a map already handed out keeps its values; a file that is not what
    # the manifest recorded is refused by its checksum.
    np.save(str(tmp_path / "new.npy"), np.zeros_like(original))
    os.replace(tmp_path / "new.npy", path[ids[0]])
    assert np.array_equal(arr, original)
    with pytest.raises(FeatureError, match=f"{ids[0]}.*corrupt.*checksum.*re-extract this backbone"):
        store.get_stored(ids[0])

    with open(path[ids[1]], "r+b") as f:  # a truncated write
        f.truncate(os.path.getsize(path[ids[1]]) - 10)
    np.save(path[ids[2]], np.zeros((3, 2, 2), dtype=np.float16))  # not the manifest's grid
    with open(path[ids[3]], "wb") as f:
        f.write(b"not a numpy file")
    for image_id, what in [
        (ids[1], "corrupt.*checksum"),
        (ids[2], "corrupt.*checksum"),
        (ids[3], "not a valid .npy"),
    ]:
        with pytest.raises(FeatureError, match=f"(?s){image_id}.*{what}.*re-extract this backbone"):
            store.get_stored(image_id)
    # A manifest of before the xxh3 checksums (no checksum to verify): the reader still names what is wrong.
    store.manifest = store.manifest.assign(checksum="")
    store.__dict__.pop("_columns", None)  # the per-image path and checksum lookups, built before
    for image_id, what in [(ids[1], "truncated"), (ids[2], "manifest says"), (ids[3], "not a valid .npy")]:
        with pytest.raises(FeatureError, match=f"(?s){image_id}.*{what}.*re-"):
            store.get_stored(image_id)


def test_a_corrupt_map_is_refused_by_name_and_only_it_is_re_extracted(tmp_path, images):
    """Random bytes over one cached map (same size, as a disk or copy fault leaves it): every read refuses it."""
    spec = parse_spec(SIFT, "sift_test")
    cache = str(tmp_path / "cache")
    manifest = extract_features(spec, images, cache)
    bad = manifest.image_id.iloc[2]
    path = os.path.join(cache, manifest.path.iloc[2])
    size = os.path.getsize(path)
    with open(path, "r+b") as f:  # keep the .npy header, scramble the values
        f.seek(128)
        f.write(np.random.default_rng(0).bytes(size - 128))
    assert os.path.getsize(path) == size
    store = FeatureStore.from_manifest(cache, manifest)
    with pytest.raises(
        FeatureError, match=f"{bad}.*corrupt.*re-extract this backbone.*feature_manifest\\[sift_test\\]"
    ):
        store.get_stored(bad)
    for other in manifest.image_id.drop(2):
        store.get_stored(other)  # the others read fine

    again = Counting(build_backbone(spec))
    fixed = extract_features(spec, images, cache, backbone=again.backbone)
    assert again.seen == 1  # only the damaged image is recomputed
    FeatureStore.from_manifest(cache, fixed).get_stored(bad)


def test_without_a_fast_checksum_non_finite_values_are_refused(tmp_path, images):
    spec = parse_spec(SIFT, "sift_test")
    cache = str(tmp_path / "cache")
    manifest = extract_features(spec, images, cache).assign(checksum="")  # as a manifest without xxh3 sums
    path = os.path.join(cache, manifest.path.iloc[0])
    arr = np.load(path)
    arr[0, 0, :2] = [np.nan, np.inf]
    np.save(path, arr)
    with pytest.raises(
        FeatureError, match=f"{manifest.image_id.iloc[0]}.*2 NaN/inf.*re-extract this backbone"
    ):
        FeatureStore.from_manifest(cache, manifest).get_stored(manifest.image_id.iloc[0])


# ---------------------------------------------------------------- the overlapped input pipeline

DEADLINE_S = 30.0


class SizeBySide(type(build_backbone(parse_spec(SIFT, "x")))):
    """Test double: dense SIFT whose input side depends on the image (32 for wide, 16 for tall)."""

    def input_size(self, width: int, height: int) -> int:
        return 32 if width >= height else 16


def test_batches_share_an_input_size(tmp_path, images):
    spec = parse_spec({**SIFT, "batch_size": 4}, "sift_test")
    backbone = SizeBySide(spec)
    seen: list[tuple[list[str], int]] = []
    inner = backbone.extract

    def recording(batch, recs):
        seen.append((list(recs.image_id), batch.size))
        return inner(batch, recs)

    backbone.extract = recording
    manifest = extract_features(spec, images, str(tmp_path / "cache"), backbone=backbone)
    # car_0001 (24x36) is the only tall image: it gets a batch of its own at S = 16.
    assert seen == [(["car_0000", "car_0002", "car_0003", "car_0004"], 32), (["car_0001"], 16)]
    assert list(manifest.image_id) == list(images.image_id)
    assert manifest.set_index("image_id").input_size.to_dict() == {
        "car_0000": 32,
        "car_0001": 16,
        "car_0002": 32,
        "car_0003": 32,
        "car_0004": 32,
    }
    assert (manifest.grid_w == manifest.input_size // 8).all()


def test_next_batch_is_prepared_and_last_written_while_the_model_runs(tmp_path, images, monkeypatch):
    """Batch n's model call waits (with a deadline) until batch n+1's decode has started and batch
    n-1's file write has happened: a serial pipeline would fail here."""
    import threading

    import soco_pipeline.features.extract as ext

    spec = parse_spec(SIFT, "sift_test")  # batch_size 1: batch n is image n
    backbone = build_backbone(spec)
    prepared = [threading.Event() for _ in range(len(images))]
    written = [threading.Event() for _ in range(len(images))]
    threads: dict[str, set[str]] = {"prepare": set(), "write": set(), "model": set()}
    inner_prepare, inner_extract, inner_write = backbone.prepare, backbone.extract, ext.write_bytes_atomic

    def prepare(imgs, recs):
        threads["prepare"].add(threading.current_thread().name)
        prepared[int(recs.image_id.iloc[0][-4:])].set()
        return inner_prepare(imgs, recs)

    def write(path, data, **kwargs):
        inner_write(path, data, **kwargs)
        if path.endswith(".npy"):  # a feature map, not info.json
            threads["write"].add(threading.current_thread().name)
            written[int(os.path.basename(path)[4:8])].set()

    def extract(batch, recs):
        threads["model"].add(threading.current_thread().name)
        n = int(recs.image_id.iloc[0][-4:])
        if n + 1 < len(images):
            assert prepared[n + 1].wait(DEADLINE_S), f"batch {n + 1} was not being prepared during batch {n}"
        if n > 0:
            assert written[n - 1].wait(DEADLINE_S), f"batch {n - 1} was not being written during batch {n}"
        return inner_extract(batch, recs)

    backbone.prepare, backbone.extract = prepare, extract
    monkeypatch.setattr(ext, "write_bytes_atomic", write)
    manifest = extract_features(spec, images, str(tmp_path / "cache"), backbone=backbone)
    assert len(manifest) == len(images) and all(e.is_set() for e in written)
    assert threads["model"] == {threading.current_thread().name}
    assert threads["prepare"].isdisjoint(threads["model"]) and threads["write"].isdisjoint(threads["model"])


def test_writer_failure_surfaces_and_keeps_finished_images(tmp_path, images, monkeypatch):
    import soco_pipeline.features.extract as ext

    spec = parse_spec(SIFT, "sift_test")
    cache = str(tmp_path / "cache")
    inner = ext.write_bytes_atomic

    def failing_write(path, data, **kwargs):  # test double: the disk fills up at the fourth map
        if os.path.basename(path).startswith("car_0003"):
            raise OSError("No space left on device")
        inner(path, data, **kwargs)

    monkeypatch.setattr(ext, "write_bytes_atomic", failing_write)
    with pytest.raises(OSError, match="No space left"):
        extract_features(spec, images, cache)
    monkeypatch.setattr(ext, "write_bytes_atomic", inner)
    kept = FeatureStore(cache, "sift_test").manifest
    assert sorted(kept.image_id) == ["car_0000", "car_0001", "car_0002"]
    second = Counting(build_backbone(spec))
    extract_features(spec, images, cache, backbone=second.backbone)
    assert second.seen == 2
