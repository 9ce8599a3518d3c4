"""Class tokens in the feature cache: checksummed in the manifest, verified on every read, resumable.

Faults are injected for real into the files on disk: the values of a class token overwritten (its .npy
header intact), the whole file replaced by random bytes, the file deleted, and a cached map overwritten
in place while a FeatureStore holds it memory-mapped in its LRU.
"""

from __future__ import annotations

import os

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from soco_pipeline.backbones import build_backbone, parse_spec
from soco_pipeline.features import FeatureError, FeatureStore, extract_features
from soco_pipeline.features.layout import checksum_matches

pytestmark = pytest.mark.unit

VIT = {
    "kind": "timm",
    "model": "vit_tiny_patch16_224",
    "input": {"nearest_multiple": 32},
    "batch_size": 2,
    "device": "cpu",
}


@pytest.fixture
def images(tmp_path) -> pd.DataFrame:
    rng = np.random.default_rng(0)
    rows = []
    for i, (w, h) in enumerate([(40, 30), (24, 36), (32, 32), (50, 20)]):
        uri = tmp_path / "img" / f"car_{i:04d}.png"
        uri.parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(rng.integers(0, 256, size=(h, w, 3), dtype=np.uint8)).save(uri)
        rows.append({"image_id": f"car_{i:04d}", "uri": str(uri), "width": w, "height": h, "category": "car"})
    return pd.DataFrame(rows)


class Counting:
    """Wraps a backbone's extract and counts the images it is given."""

    def __init__(self, backbone):
        self.backbone, self.seen, self.inner = backbone, 0, backbone.extract
        backbone.extract = self

    def __call__(self, imgs, recs, **kwargs):
        self.seen += len(imgs)
        return self.inner(imgs, recs, **kwargs)


@pytest.fixture
def cached(tmp_path, images):
    """A ViT's cache of the four images: (spec, cache root, manifest)."""
    spec = parse_spec(VIT, "vit_cls")
    cache = str(tmp_path / "cache")
    return spec, cache, extract_features(spec, images, cache)


def test_class_token_checksums_are_recorded_and_match(cached):
    _spec, cache, manifest = cached
    assert (manifest.cls_path != "").all()
    for r in manifest.itertuples():
        with open(os.path.join(cache, r.cls_path), "rb") as f:
            assert r.cls_checksum.startswith("xxh3_128:") and checksum_matches(f.read(), r.cls_checksum)
    store = FeatureStore.from_manifest(cache, manifest)
    token = store.class_token("car_0000")
    assert token.shape == (192,) and abs(np.linalg.norm(token) - 1) < 2e-3


def _scramble_values(path: str, seed: int = 0) -> None:
    """Overwrite a .npy file's values in place (same size), keeping its 128-byte header."""
    size = os.path.getsize(path)
    with open(path, "r+b") as f:
        f.seek(128)
        f.write(np.random.default_rng(seed).bytes(size - 128))


def _random_bytes(path: str, seed: int = 0) -> None:
    with open(path, "wb") as f:
        f.write(np.random.default_rng(seed).bytes(os.path.getsize(path)))


@pytest.mark.parametrize(
    "fault, error",
    [
        (_scramble_values, "corrupt.*checksum"),
        (_random_bytes, "corrupt.*checksum"),
        (os.remove, "cannot be read"),
    ],
    ids=["values-overwritten", "random-bytes", "deleted"],
)
def test_a_damaged_class_token_is_refused_and_re_extraction_repairs_it(cached, images, fault, error):
    """Every read refuses the damaged token by name; the re-extraction the error advises recomputes that
    image alone, and then the token reads again."""
    spec, cache, manifest = cached
    bad = manifest.image_id.iloc[1]
    before = FeatureStore.from_manifest(cache, manifest).class_token(bad)
    fault(os.path.join(cache, manifest.cls_path.iloc[1]))
    store = FeatureStore.from_manifest(cache, manifest)
    with pytest.raises(
        FeatureError, match=f"(?s){bad}.*{error}.*re-extract this backbone.*feature_manifest\\[vit_cls\\]"
    ):
        store.class_token(bad)
    for other in manifest.image_id.drop(1):
        store.class_token(other)  # the others read fine

    logs: list[str] = []
    again = Counting(build_backbone(spec))
    fixed = extract_features(spec, images, cache, backbone=again.backbone, log=logs.append)
    assert again.seen == 1 and any("3 cached" in m and "1 to extract" in m for m in logs)
    after = FeatureStore.from_manifest(cache, fixed).class_token(bad)
    assert np.allclose(after, before, atol=2e-3)


def test_an_lru_hit_on_a_map_overwritten_in_place_is_refused(cached):
    """A map memory-mapped into the store's LRU shows a write into its file; the next hit re-hashes it."""
    _spec, cache, manifest = cached
    store = FeatureStore.from_manifest(cache, manifest)
    image_id = manifest.image_id.iloc[0]
    store.get_stored(image_id)
    _scramble_values(os.path.join(cache, manifest.path.iloc[0]))
    with pytest.raises(FeatureError, match=f"{image_id}.*corrupt.*checksum.*re-extract this backbone"):
        store.get_stored(image_id)
