"""Global-feature metrics: kNN and retrieval mAP against plain reference loops, pooling, the seeded split,
the class token in the feature cache, and re-scoring from the cache without any backbone."""

import os

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from soco_pipeline.analysis.global_metrics import (
    global_metrics,
    headline_global,
    image_cells,
    knn_accuracy,
    pooled_features,
    retrieval_map,
    seeded_split,
)
from soco_pipeline.analysis.leaderboard import leaderboard
from soco_pipeline.backbones import parse_spec
from soco_pipeline.backbones.base import Backbone
from soco_pipeline.features import FeatureError, FeatureStore, extract_features

pytestmark = pytest.mark.unit


def unit(x):
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def reference_knn(train_x, train_y, test_x, test_y, k, T, n_classes, allowed=None):
    """DINO's weighted kNN written as a plain loop over queries (the test's reference)."""
    top1 = top5 = 0
    for i in range(len(test_x)):
        sims = [float(train_x[j] @ test_x[i]) for j in range(len(train_x))]
        cand = [j for j in range(len(train_x)) if allowed is None or allowed[i][j]]
        cand.sort(key=lambda j: -sims[j])
        votes = [0.0] * n_classes
        for j in cand[:k]:
            votes[train_y[j]] += np.exp(sims[j] / T)
        ranked = sorted(range(n_classes), key=lambda c: -votes[c])
        top1 += ranked[0] == test_y[i]
        top5 += test_y[i] in ranked[:5]
    return 100 * top1 / len(test_x), 100 * top5 / len(test_x)


def reference_map(gx, gy, qx, qy, allowed=None):
    aps = []
    for i in range(len(qx)):
        cand = [j for j in range(len(gx)) if allowed is None or allowed[i][j]]
        cand.sort(key=lambda j: -float(gx[j] @ qx[i]))
        hits, precisions = 0, []
        for rank, j in enumerate(cand, start=1):
            if gy[j] == qy[i]:
                hits += 1
                precisions.append(hits / rank)
        if hits:
            aps.append(sum(precisions) / hits)
    return 100 * float(np.mean(aps))


def test_knn_matches_a_reference_loop_on_random_features():
    rng = np.random.default_rng(0)
    n_classes = 12
    train_x, test_x = unit(rng.normal(size=(300, 16))), unit(rng.normal(size=(70, 16)))
    train_y, test_y = rng.integers(0, n_classes, 300), rng.integers(0, n_classes, 70)
    # Features correlated with labels, so that accuracy is not only chance.
    centres = unit(rng.normal(size=(n_classes, 16)))
    train_x, test_x = unit(train_x + 1.2 * centres[train_y]), unit(test_x + 1.2 * centres[test_y])
    got = knn_accuracy(train_x, train_y, test_x, test_y, ks=(20, 100, 200), n_classes=n_classes, block=16)
    for k in (20, 100, 200):
        ref = reference_knn(train_x, train_y, test_x, test_y, k, 0.07, n_classes)
        assert got[k] == pytest.approx(ref), k
    assert got[20][0] > 100 / n_classes * 2  # well above chance
    # Restricted neighbours (the fine-grained track): the same against the loop with the mask.
    groups_tr, groups_te = train_y % 3, test_y % 3
    mask = groups_te[:, None] == groups_tr[None, :]
    import torch

    got = knn_accuracy(
        train_x,
        train_y,
        test_x,
        test_y,
        ks=(20,),
        n_classes=n_classes,
        block=16,
        allowed=lambda s: torch.from_numpy(mask[s]),
    )
    assert got[20] == pytest.approx(
        reference_knn(train_x, train_y, test_x, test_y, 20, 0.07, n_classes, mask)
    )


def test_retrieval_map_matches_a_reference_loop():
    rng = np.random.default_rng(1)
    gx, qx = unit(rng.normal(size=(120, 8))), unit(rng.normal(size=(30, 8)))
    gy, qy = rng.integers(0, 6, 120), rng.integers(0, 7, 30)  # class 6: no relevant item, left out
    assert retrieval_map(gx, gy, qx, qy, block=7) == pytest.approx(reference_map(gx, gy, qx, qy))
    assert retrieval_map(gx, gy, gx, gy) == pytest.approx(reference_map(gx, gy, gx, gy))


def test_seeded_split_is_per_category_and_reproducible():
    labels = pd.Series(np.repeat(["a", "b", "c"], [10, 4, 1]))
    m1, m2, m3 = seeded_split(labels, 0.5, 3), seeded_split(labels, 0.5, 3), seeded_split(labels, 0.5, 4)
    assert (m1 == m2).all() and not (m1 == m3).all()
    per = pd.Series(m1).groupby(labels).sum()
    assert dict(per) == {"a": 5, "b": 2, "c": 1}


class DictStore:
    """A scripted test double of FeatureStore: maps and metas from a dict."""

    def __init__(self, maps: dict, metas: dict):
        self.maps, self.metas = maps, metas

    def get(self, image_id):
        return self.maps[image_id], self.metas[image_id]


def test_pooling_covers_the_image_cells_not_the_padding():
    meta = {"width": 40, "height": 20, "grid_h": 4, "grid_w": 4, "input_size": 64}
    assert image_cells(meta) == (2, 4)
    fmap = np.zeros((3, 4, 4), np.float32)
    fmap[0, :2, :] = 1.0  # the image
    fmap[1, 2:, :] = 5.0  # the white padding below it
    pooled = pooled_features(DictStore({"x": fmap}, {"x": meta}), ["x"])
    np.testing.assert_allclose(pooled, [[1.0, 0.0, 0.0]])


VIT = {
    "kind": "timm",
    "model": "vit_small_patch14_dinov2",
    "weights": "none",
    "input": {"nearest_multiple": 28},
    "normalisation": "imagenet",
    "batch_size": 4,
    "seed": 0,
}


@pytest.fixture
def images(tmp_path) -> pd.DataFrame:
    rng = np.random.default_rng(0)
    rows = []
    for cat, base in [("car", 40), ("bus", 200), ("dog", 120)]:
        for i in range(6):
            w, h = (40, 30) if i % 2 else (30, 36)
            uri = str(tmp_path / "img" / f"{cat}_{i:04d}.png")
            os.makedirs(os.path.dirname(uri), exist_ok=True)
            img = np.clip(rng.normal(base, 20, size=(h, w, 3)), 0, 255).astype(np.uint8)
            Image.fromarray(img).save(uri)
            rows.append({"image_id": f"{cat}_{i:04d}", "uri": uri, "width": w, "height": h, "category": cat})
    return pd.DataFrame(rows)


def test_class_token_cached_for_timm_vits_and_rescoring_runs_no_backbone(tmp_path, images, monkeypatch):
    spec = parse_spec(VIT, "vit_test")
    cache = str(tmp_path / "cache")
    manifest = extract_features(spec, images, cache)
    assert (manifest.cls_path != "").all()
    store = FeatureStore.from_manifest(cache, manifest)
    assert store.has_class_token
    token = store.class_token("car_0000")
    assert token.shape == (384,) and np.linalg.norm(token) == pytest.approx(1.0, abs=1e-3)

    def no_backbone(*args, **kwargs):
        raise AssertionError("global metrics must read the cache, not run a backbone")

    monkeypatch.setattr(Backbone, "extract", no_backbone)
    monkeypatch.setattr(Backbone, "forward_with_class_token", no_backbone)
    fresh = FeatureStore(cache, "vit_test")
    table = global_metrics(
        fresh, images, "vit_test", family_of=lambda c: "road" if c in ("car", "bus") else c, seed=0
    )
    assert set(table.feature) == {"mean", "cls"} and set(table.track) == {"category", "fine_grained"}
    fine = table[(table.track == "fine_grained")]
    assert set(fine.n_classes) == {2}  # car vs bus (dog has no sibling in its family)
    cat = table[(table.track == "category") & (table.metric == "knn_top1")]
    assert set(cat.n_queries) == {9} and set(cat.n_gallery) == {9} and set(cat.k) == {20, 100, 200}
    assert table.value.between(0, 100).all()
    # Colour-separated classes: the mean-pooled maps of a random ViT still tell them apart.
    assert cat[(cat.feature == "mean") & (cat.k == 20)].value.iloc[0] > 60
    head = table[table.headline]
    assert set(head.feature) == {"cls"} and set(head.metric) == {"knn_top1", "knn_top5", "retrieval_map"}
    assert set(head.k.dropna()) == {20}
    # The leaderboard gains knn_top1 / retrieval_map from these rows.
    m = pd.DataFrame(
        {
            "backbone": "vit_test",
            "metric": ["cc", "soc", "soc_geo", "cross_soc"],
            "alpha": 0.1,
            "reduction": "official",
            "scope": "all",
            "group": "all",
            "value": [50.0, 30, 20, 10],
            "n": 5,
        }
    )
    board = leaderboard(m, global_metrics=table).set_index("backbone")
    hg = headline_global(table).set_index("backbone")
    assert board.loc["vit_test", "knn_top1"] == hg.loc["vit_test", "knn_top1"]
    assert board.loc["vit_test", "retrieval_map"] == hg.loc["vit_test", "retrieval_map"]
    assert "knn_top1" not in leaderboard(m).columns


def test_backbones_without_class_token_use_mean_maps(tmp_path, images):
    sift = {
        "kind": "classical",
        "model": "sift",
        "input": {"nearest_multiple": 32},
        "normalisation": "raw",
        "batch_size": 2,
    }
    manifest = extract_features(parse_spec(sift, "sift_test"), images, str(tmp_path / "c"))
    store = FeatureStore.from_manifest(str(tmp_path / "c"), manifest)
    assert not store.has_class_token
    with pytest.raises(FeatureError, match="no cached class token for image 'car_0000'"):
        store.class_token("car_0000")
    table = global_metrics(store, images, "sift_test")
    assert set(table.feature) == {"mean"} and table[table.headline].feature.eq("mean").all()
