"""docs/contracts.md: the overlapped extraction (loader threads prepare batch n+1, the model runs batch n,
a writer thread writes batch n-1) gives fp32 results bit-identical to a serial loop over the same batches."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch
from PIL import Image

from soco_pipeline.backbones import build_backbone, parse_spec
from soco_pipeline.features import FeatureStore, extract_features, load_image

pytestmark = pytest.mark.unit

SPECS = {
    "vit": {
        "kind": "timm",
        "model": "vit_tiny_patch16_224",
        "input": {"nearest_multiple": 48},
        "batch_size": 2,
    },
    "vit_tensor_resize": {
        "kind": "timm",
        "model": "vit_tiny_patch16_224",
        "input": {"nearest_multiple": 48, "resize": "tensor"},
        "batch_size": 2,
    },
    "sift": {
        "kind": "classical",
        "model": "sift",
        "input": {"nearest_multiple": 32},
        "normalisation": "raw",
        "batch_size": 2,
    },
}


@pytest.fixture
def images(tmp_path) -> pd.DataFrame:
    """Five images of one size (so the batches are consecutive pairs in order: [0, 1], [2, 3], [4])."""
    rng = np.random.default_rng(5)
    rows = []
    for i in range(5):
        uri = tmp_path / "img" / f"car_{i:04d}.png"
        uri.parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(rng.integers(0, 256, size=(30, 44, 3), dtype=np.uint8)).save(uri)
        rows.append(
            {"image_id": f"car_{i:04d}", "uri": str(uri), "width": 44, "height": 30, "category": "car"}
        )
    return pd.DataFrame(rows)


@pytest.mark.parametrize("name", list(SPECS))
def test_overlapped_extraction_is_bit_identical_to_a_serial_loop(tmp_path, images, name):
    spec = parse_spec({**SPECS[name], "device": "cpu"}, name)
    backbone = build_backbone(spec)
    manifest = extract_features(spec, images, str(tmp_path / "cache"), backbone=backbone)
    store = FeatureStore.from_manifest(str(tmp_path / "cache"), manifest)

    # The serial reference: the same batches, one after the other in this thread, images decoded here.
    for start in range(0, len(images), spec.batch_size):
        recs = images.iloc[start : start + spec.batch_size].reset_index(drop=True)
        decoded = [load_image(u) for u in recs.uri]
        if backbone.offers_class_token:
            maps, tokens = backbone.extract(decoded, recs, with_class_token=True)
        else:
            maps, tokens = backbone.extract(decoded, recs), None
        for k, image_id in enumerate(recs.image_id):
            stored, _meta = store.get_stored(image_id)
            serial = maps[k].to(torch.float16).numpy()
            assert stored.dtype == serial.dtype and stored.tobytes() == serial.tobytes(), image_id
            if tokens is not None:
                token = tokens[k].to(torch.float16).numpy().astype(np.float32)
                assert np.array_equal(store.class_token(image_id), token), image_id
