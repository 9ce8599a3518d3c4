"""End to end on a small generated data set: readers -> image set -> keypoints -> release round trip."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from soco_pipeline import synth
from soco_pipeline.data.imageset import build_image_set
from soco_pipeline.data.keypoints import aggregate_keypoints
from soco_pipeline.sources import SourceConfig, read_candidates, read_raw_keypoints
from soco_pipeline.storage import join, read_bytes, read_parquet
from soco_pipeline.taxonomy import load_taxonomy

# a whole pipeline runs in a module fixture (the first test's setup)
pytestmark = [pytest.mark.unit, pytest.mark.timeout(900)]

TAX = load_taxonomy()
CATEGORIES = ["bus", "mug", "chair", "dog"]


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("embedded"))
    manifest = synth.generate_dataset(root, size="demo", seed=3, categories=CATEGORIES, images_per_category=6)
    cfg = SourceConfig.embedded(root)
    kept, rejected = build_image_set(read_candidates(cfg, TAX), cfg, TAX)
    keypoints, stats = aggregate_keypoints(read_raw_keypoints(cfg, TAX), kept, TAX, cfg)
    return root, manifest, kept, rejected, keypoints, stats


def _noise_sigma(manifest: dict) -> float:
    """The injected click noise (fraction of the longer side): click_noise.sigma_frac, else any *sigma* key."""
    if isinstance(manifest.get("click_noise"), dict) and "sigma_frac" in manifest["click_noise"]:
        return float(manifest["click_noise"]["sigma_frac"])
    found = []

    def walk(d):
        for k, v in d.items():
            if isinstance(v, dict):
                walk(v)
            elif isinstance(v, int | float) and "sigma" in k.lower():
                found.append(float(v))

    walk(manifest)
    if not found:
        pytest.fail(f"manifest.json records no noise sigma: {sorted(manifest)}")
    return found[0]


def test_intended_rejects_are_rejected_with_their_reason(generated):
    root, _, kept, rejected, _, _ = generated
    truth = read_parquet(join(root, "ground_truth", "images.parquet"))
    got = dict(zip(rejected.image_id, rejected.reason, strict=True))
    intended = truth[truth.intended_reject != ""]
    assert len(intended) > 0
    assert {i: got.get(i) for i in intended.image_id} == dict(
        zip(intended.image_id, intended.intended_reject, strict=True)
    )
    keep_ids = set(truth.image_id[truth.intended_reject == ""])
    assert keep_ids == set(kept.image_id) and not keep_ids & set(rejected.image_id)


def test_aggregated_keypoints_match_the_exact_positions(generated):
    root, _, kept, _, keypoints, _ = generated
    gt = read_parquet(join(root, "ground_truth", "keypoints.parquet"))
    gt = gt[gt.image_id.isin(kept.image_id) & gt.visible.astype(bool)]
    m = gt.merge(keypoints, on=["image_id", "keypoint"], suffixes=("_gt", ""), how="left")
    long_side = m.image_id.map(kept.set_index("image_id").pipe(lambda d: np.maximum(d.width, d.height)))
    err = np.hypot(m.x - m.x_gt, m.y - m.y_gt) / long_side
    ok = m.visible.fillna(False).astype(bool) & (err < 0.02)
    assert ok.mean() >= 0.95, f"only {ok.mean():.3f} of {len(m)} visible keypoints within 2%"


def test_median_spread_close_to_the_injected_noise(generated):
    root, manifest, _, _, _, stats = generated
    sigma = _noise_sigma(json.loads(read_bytes(join(root, "manifest.json"))))
    # With three clicks, sqrt((s_x^2 + s_y^2) / 2) has median ~0.92 sigma; clipping and outlier removal
    # pull it down a little.
    assert 0.7 * sigma <= stats["median_spread"] <= 1.1 * sigma, (stats["median_spread"], sigma)


def test_every_kept_image_has_all_its_keypoints(generated):
    _, _, kept, _, keypoints, _ = generated
    expected = sum(len(TAX.category_keypoints(c)) for c in kept.category)
    assert len(keypoints) == expected
    assert set(keypoints.image_id) == set(kept.image_id)
    assert pd.api.types.is_bool_dtype(keypoints.visible)
