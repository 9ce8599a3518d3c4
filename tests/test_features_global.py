"""The shared feature cache's global output: one folder per (backbone spec, input policy), extracted once for
every family that asks, the backbone built only when something is missing; SOCO's kNN / retrieval read it."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from soco_pipeline.analysis.global_metrics import global_metrics
from soco_pipeline.backbones import list_specs
from soco_pipeline.features import GlobalInputPolicy, cached_global, global_cache, read_global
from soco_pipeline.features.global_cache import extract_global
from soco_pipeline.features.global_extractors import GlobalExtractor
from soco_pipeline.features.layout import FeatureError

pytestmark = pytest.mark.unit

POLICY = GlobalInputPolicy(
    resize=40, crop=32, normalisation="clip", final_norm=True, batch_size=4, dense_input=32
)


def _images(folder, prefix: str, n: int, seed: int) -> pd.DataFrame:
    """n random RGB images (two categories) written as PNG, as an image table (ids, uris, sizes)."""
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n):
        w, h = 48 + 8 * (i % 2), 40
        uri = str(folder / f"{prefix}{i}.png")
        Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).save(uri)
        rows.append(
            {
                "image_id": f"{prefix}/{i}",
                "uri": uri,
                "width": w,
                "height": h,
                "category": "car" if i % 2 else "bus",
            }
        )
    return pd.DataFrame(rows)


@pytest.fixture
def spec():
    return list_specs()["dense_sift"]


def test_two_families_share_one_folder_and_extract_each_image_once(tmp_path, spec):
    soco, fgbmk = _images(tmp_path, "soco", 6, 0), _images(tmp_path, "fgbmk", 5, 1)
    cache, logs = str(tmp_path / "cache"), []
    a, folder_a = cached_global(spec, soco, cache, POLICY, {"device": "cpu"}, logs.append)
    b, folder_b = cached_global(spec, fgbmk, cache, POLICY, {"device": "cpu"}, logs.append)
    assert folder_a == folder_b and "/dense_sift/" in folder_a and "/global_" in folder_a
    # the folder known before building is the one the built extractor names
    assert (
        global_cache.build_global_extractor(spec, POLICY, {"device": "cpu"}).cache_folder(cache, POLICY)
        == folder_a
    )
    assert "0 cached" in logs[0] and "6 to extract" in logs[0] and "5 to extract" in logs[2]

    # the second family's writes kept the first one's rows: both read back whole, no backbone is built
    def no_build(*_args, **_kwargs):
        raise AssertionError("every image is cached: the backbone must not be built")

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(global_cache, "build_global_extractor", no_build)
        logs.clear()
        both, _ = cached_global(spec, pd.concat([fgbmk, soco]), cache, POLICY, {"device": "cpu"}, logs.append)
    assert "11 cached" in logs[0] and "0 to extract" in logs[0]
    np.testing.assert_array_equal(both.subset(soco.image_id).cls_last, a.cls_last)
    np.testing.assert_array_equal(both.subset(fgbmk.image_id).patch_mean, b.patch_mean)
    assert list(both.image_ids) == list(fgbmk.image_id) + list(soco.image_id)
    assert a.cls_last.shape == (6, a.cls_last.shape[1]) and np.isfinite(a.cls_last).all()


def test_the_policy_decides_the_folder_threads_and_batch_size_do_not(tmp_path, spec):
    imgs = _images(tmp_path, "x", 2, 2)
    cache = str(tmp_path / "cache")
    _, base = cached_global(spec, imgs, cache, POLICY, {"device": "cpu"})
    _, same = cached_global(
        spec, imgs, cache, POLICY.model_copy(update={"threads": 1, "batch_size": 1}), {"device": "cpu"}
    )
    feats, other = cached_global(
        spec, imgs, cache, POLICY.model_copy(update={"crop": 24, "dense_input": 24}), {"device": "cpu"}
    )
    assert same == base and other != base
    assert read_global(other, imgs.image_id).cls_last.shape == feats.cls_last.shape


def test_two_workers_write_the_same_bytes_as_one(tmp_path):
    """A torch model's batches extracted two at a time (the demo's `workers: 2`, one thread each) give
    byte-identical shards to one at a time, in the same folder (workers is not in the cache key)."""
    from soco_pipeline.backbones import parse_spec

    vit = parse_spec(
        {"kind": "timm", "model": "vit_tiny_patch16_224", "input": {"nearest_multiple": 32}, "device": "cpu"},
        "vit_workers",
    )
    imgs = _images(tmp_path, "w", 10, 3)
    policy = POLICY.model_copy(update={"threads": 1, "batch_size": 3})  # four batches, the last of one image
    shards = {}
    for workers in (1, 2):
        cache = str(tmp_path / f"cache{workers}")
        feats, folder = cached_global(
            vit, imgs, cache, policy.model_copy(update={"workers": workers}), {"device": "cpu"}
        )
        assert global_cache.build_global_extractor(vit, policy, {"device": "cpu"}).concurrent_batches
        files = sorted(Path(folder).glob("part-*.npy"))
        assert len(files) == 4
        shards[workers] = (folder.split("/cache")[1][1:], [(f.name, f.read_bytes()) for f in files])
        assert list(feats.image_ids) == list(imgs.image_id)
    assert shards[1] == shards[2]


def test_soco_global_metrics_score_the_shared_global_features(tmp_path, spec):
    """The `global` kind is the kNN / retrieval of the shared cache's class tokens; the headline stays the dense
    cache's kind, so the leaderboard does not move when the global output is added."""
    from soco_pipeline.analysis.global_metrics import headline_global

    imgs = _images(tmp_path, "g", 8, 3)
    feats, _ = cached_global(spec, imgs, str(tmp_path / "cache"), POLICY, {"device": "cpu"})

    class MeanOnly:  # a dense store of one constant map per image: the `mean` kind
        def get(self, image_id):
            return np.ones((4, 2, 2), np.float16), {"width": 2, "height": 2, "grid_h": 2, "grid_w": 2}

    without = global_metrics(MeanOnly(), imgs, "dense_sift", ks=(3,))
    with_global = global_metrics(MeanOnly(), imgs, "dense_sift", ks=(3,), global_features=feats)
    assert set(with_global.feature) == {"mean", "global"} and set(without.feature) == {"mean"}
    pd.testing.assert_frame_equal(headline_global(with_global), headline_global(without))
    g = with_global[(with_global.feature == "global") & (with_global.metric == "retrieval_map")]
    assert len(g) == 1 and 0 <= g.value.iloc[0] <= 100 and not g.headline.iloc[0]


class SlowNaNAt(GlobalExtractor):
    """A pixel-mean extractor that may run two batches at once, gives NaN for one image and counts its
    batches (each takes 50 ms, so a pool that kept going would run them all)."""

    name, concurrent_batches = "slow_nan", True

    def __init__(self, bad: str):
        self.bad, self.calls, self.lock = bad, 0, threading.Lock()

    def identity(self):
        return {"hash": "slow-nan"}

    def forward(self, pixels, records):
        with self.lock:
            self.calls += 1
        time.sleep(0.05)
        m = pixels.mean(dim=(2, 3))
        if self.bad in set(records.image_id):
            m = m * float("nan")
        return m, m, m


def test_a_failed_batch_stops_the_workers_without_extracting_the_rest(tmp_path):
    imgs = _images(tmp_path, "n", 30, 4)
    extractor = SlowNaNAt(bad="n/1")
    policy = POLICY.model_copy(update={"batch_size": 1, "threads": 1, "workers": 2})
    with pytest.raises(FeatureError, match="NaN/inf global features for image 'n/1'"):
        extract_global(extractor, imgs, str(tmp_path / "cache"), policy)
    assert extractor.calls < 10, extractor.calls  # 30 batches were queued; the ones not started were dropped
