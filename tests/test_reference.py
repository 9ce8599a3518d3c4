"""The per-pair reference scorer's steps against the fast path's building blocks, one step at a time."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from soco_pipeline.evaluation.geometry import scale_keypoints
from soco_pipeline.evaluation.matching import sample_descriptors
from tests.soco_reference import (
    is_correct,
    official_mean,
    official_unit_point,
    pck_threshold,
    predicted_point,
    source_descriptor,
)

pytestmark = pytest.mark.unit


def test_step4_truncates_like_the_fast_path():
    rng = np.random.default_rng(0)
    xy = rng.uniform(0, 500, size=(200, 2))
    sizes = rng.integers(50, 500, size=(200, 2))
    fast = scale_keypoints(xy, sizes, 798)
    ref = np.array([official_unit_point(x, y, w, h, 798) for (x, y), (w, h) in zip(xy, sizes, strict=True)])
    np.testing.assert_array_equal(fast, ref)
    # int() before and after scaling: 9.9 px of a 100 px image at S = 798 is int(9 * 7.98) = 71, not 79.
    assert official_unit_point(9.9, 0, 100, 50, 798) == (71 / 798, 0.0)


def test_step5_reads_grid_sample_at_the_cell_centres():
    rng = np.random.default_rng(1)
    fmap = torch.from_numpy(rng.standard_normal((8, 5, 7)).astype(np.float32))
    uv = rng.uniform(0, 1, size=(30, 2))
    fast = sample_descriptors(fmap, uv)
    ref = torch.stack([source_descriptor(fmap, u, v) for u, v in uv])
    torch.testing.assert_close(fast, ref, rtol=0, atol=1e-6)
    # align_corners=True: p = 0 is the centre of the first cell, so the descriptor is that cell's vector.
    torch.testing.assert_close(source_descriptor(fmap, 0.0, 0.0), fmap[:, 0, 0])


def test_step6_reports_the_top_left_corner_and_geo_masks():
    sim = torch.zeros(4, 5)
    sim[2, 3], sim[0, 1] = 1.0, 0.5
    assert predicted_point(sim) == (3 / 5, 2 / 4)
    assert predicted_point(sim, [(0, 1), (3, 4)]) == (1 / 5, 0 / 4)


def test_step7_is_strict_and_step8_is_unweighted():
    target = pd.Series({"bbox_l": 10, "bbox_t": 0, "bbox_r": 60, "bbox_b": 20, "width": 100, "height": 80})
    thr = pck_threshold(0.1, target)
    assert thr == 0.1 * 50 / 100
    assert is_correct((0.0, 0.0), (thr, 0.0), thr) == 0.0  # exactly at the threshold: wrong (`<`)
    assert is_correct((0.0, 0.0), (thr * 0.99, 0.0), thr) == 1.0
    assert official_mean({("soc", "car"): 50.0, ("soc", "bus"): 100.0, ("cc", "car"): 0.0}, "soc") == 75.0
