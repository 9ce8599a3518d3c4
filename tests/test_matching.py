"""Zero-shot matching against a per-pair reference written from the protocol text, and oracle features."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
import torch
import torch.nn.functional as F

from soco_pipeline.evaluation.four_choice_matching import predict_four_choice
from soco_pipeline.evaluation.matching import predict
from soco_pipeline.evaluation.metrics import compute_metrics
from soco_pipeline.evaluation.protocol import ProtocolConfig
from soco_pipeline.native import half_matmul
from soco_pipeline.storage import read_parquet, write_parquet_atomic
from soco_pipeline.taxonomy import load_taxonomy
from tests.needs import need_hardware
from tests.soco_reference import reference_category_pck
from tests.soco_theory import expected_concept_oracle_soc, random_feature_chance

pytestmark = pytest.mark.unit

TAX = load_taxonomy()
CATS = ["car", "bus", "mug", "teapot", "chair", "stool"]
PROTOCOL = ProtocolConfig()


class DictStore:
    """A feature store held in memory: image_id -> (C x h x w float32, meta)."""

    def __init__(self, maps: dict[str, np.ndarray], input_size: int):
        self.maps, self.input_size = maps, input_size

    def get(self, image_id):
        return self.maps[image_id], {"input_size": self.input_size}


def make_world(seed=0, n_per_cat=6, lattice=False, pairs_per_cat=8, cross_per_cat=4):
    """Images, keypoints, evaluated pairs and correspondences built straight from the SOCO definitions.

    lattice=True: max side 390, keypoints at multiples of 10 px on cells >= 6 apart (40 x 40 grid,
    S = 390), so that the official bilinear sample hits the keypoint's cell exactly.
    """
    rng = np.random.default_rng(seed)
    img_rows, kp_rows = [], []
    for cat in CATS:
        kps = TAX.category_keypoints(cat)
        for i in range(n_per_cat):
            iid = f"{cat}_{i:04d}"
            if lattice:
                W, H = (
                    (390, int(rng.integers(250, 391)))
                    if rng.random() < 0.5
                    else (int(rng.integers(250, 391)), 390)
                )
            else:
                W, H = int(rng.integers(120, 400)), int(rng.integers(120, 400))
            bl, bt = rng.uniform(0, 0.1 * W), rng.uniform(0, 0.1 * H)
            br, bb = rng.uniform(0.8 * W, W), rng.uniform(0.8 * H, H)
            img_rows.append(
                dict(
                    image_id=iid,
                    category=cat,
                    supercategory=TAX.supercategory(cat),
                    width=W,
                    height=H,
                    bbox_l=bl,
                    bbox_t=bt,
                    bbox_r=br,
                    bbox_b=bb,
                )
            )
            vis = rng.random(len(kps)) < 0.8
            if lattice:
                slots = np.array(
                    [(c, r) for r in range(0, 40, 6) for c in range(0, 40, 6) if c * 10 < W and r * 10 < H]
                )
                slots = slots[rng.permutation(len(slots))[: len(kps)]] * 10.0
                xy = slots
            else:
                xy = np.c_[rng.uniform(bl, br, len(kps)), rng.uniform(bt, bb, len(kps))]
            for k, name in enumerate(kps):
                kp_rows.append(
                    dict(
                        image_id=iid,
                        category=cat,
                        keypoint=name,
                        concept=TAX.concept_of(name),
                        x=xy[k, 0] if vis[k] else np.nan,
                        y=xy[k, 1] if vis[k] else np.nan,
                        visible=bool(vis[k]),
                        n_annotators=3,
                        spread=0.0,
                    )
                )
    images = pd.DataFrame(img_rows)
    keypoints = pd.DataFrame(kp_rows)
    pair_rows = []
    for cat in CATS:
        ids = images.loc[images.category == cat, "image_id"].to_numpy()
        for j in range(pairs_per_cat):
            s, t = rng.choice(ids, 2, replace=False)
            pair_rows.append(
                dict(
                    pair_id=f"intra-{cat}-{j}",
                    level="intra",
                    pair_group=cat,
                    src_image=s,
                    trg_image=t,
                    src_category=cat,
                    trg_category=cat,
                    ancestor=cat,
                    evaluated=j < pairs_per_cat - 1,
                )
            )
        rel = [c for c in TAX.related_categories(cat) if c in CATS]
        for j in range(cross_per_cat):
            sc = rel[j % len(rel)]
            s = rng.choice(images.loc[images.category == sc, "image_id"].to_numpy())
            t = rng.choice(ids)
            pair_rows.append(
                dict(
                    pair_id=f"cross-{cat}-{j}",
                    level="cross",
                    pair_group=cat,
                    src_image=s,
                    trg_image=t,
                    src_category=sc,
                    trg_category=cat,
                    ancestor=TAX.lowest_common_ancestor(sc, cat),
                    evaluated=True,
                )
            )
    pairs = pd.DataFrame(pair_rows)
    return images, keypoints, pairs, build_correspondences(pairs, keypoints)


def build_correspondences(pairs, keypoints):
    """SOC rows (same name visible in both; n_candidates = visible same-concept targets) and CC rows."""
    vis = keypoints[keypoints.visible][["image_id", "keypoint", "concept"]]
    src = pairs[["pair_id", "level", "src_image"]].merge(vis, left_on="src_image", right_on="image_id")
    trg = pairs[["pair_id", "trg_image"]].merge(vis, left_on="trg_image", right_on="image_id")
    ncand = trg.groupby(["pair_id", "concept"]).size().rename("n_candidates").reset_index()
    soc = src.merge(trg[["pair_id", "keypoint"]], on=["pair_id", "keypoint"]).merge(
        ncand, on=["pair_id", "concept"]
    )
    soc = soc.assign(
        kind="soc", src_keypoint=soc.keypoint, trg_keypoint=soc.keypoint, geo=soc.n_candidates >= 2
    )
    cc = src.merge(trg[["pair_id", "keypoint", "concept"]], on=["pair_id", "concept"], suffixes=("", "_t"))
    cc = cc.merge(ncand, on=["pair_id", "concept"])
    cc = cc.assign(kind="cc", src_keypoint=cc.keypoint, trg_keypoint=cc.keypoint_t, geo=cc.n_candidates >= 2)
    cols = ["pair_id", "level", "kind", "src_keypoint", "trg_keypoint", "concept", "geo", "n_candidates"]
    return pd.concat([soc[cols], cc[cols]], ignore_index=True)


class HalfStore(DictStore):
    """Like FeatureStore: fp16 maps as stored (`get_stored`), float32 copies of them from `get`."""

    def get(self, image_id):
        return self.maps[image_id].astype(np.float32), {"input_size": self.input_size}

    def get_stored(self, image_id):
        return self.maps[image_id], {"input_size": self.input_size}


def gaussian_store(images, seed=0, c=16, grid=12, size=224, half=False):
    rng = np.random.default_rng(seed)
    maps = {}
    for iid in images.image_id:
        f = rng.standard_normal((c, grid, grid)).astype(np.float32)
        maps[iid] = f / np.linalg.norm(f, axis=0, keepdims=True)
    if half:
        return HalfStore({k: v.astype(np.float16) for k, v in maps.items()}, size)
    return DictStore(maps, size)


def lattice_store(images, keypoints, vector_of, c, noise=0.0, seed=0):
    """40 x 40 maps (S = 390): at each visible keypoint's cell, vector_of(keypoint row) plus noise."""
    rng = np.random.default_rng(seed)
    maps = {iid: np.zeros((c, 40, 40), np.float32) for iid in images.image_id}
    for r in keypoints[keypoints.visible].itertuples():
        v = vector_of(r).astype(np.float32) + noise * rng.standard_normal(c).astype(np.float32)
        maps[r.image_id][:, int(r.y) // 10, int(r.x) // 10] = v / np.linalg.norm(v)
    return DictStore(maps, 390)


def identity_store(images, keypoints):
    """A part-identity oracle: one-hot of the keypoint name, plus a weaker one-hot of its concept
    (so a source keypoint whose name is not visible in the target still finds its concept: CC)."""
    names = {n: i for i, n in enumerate(sorted(keypoints.keypoint.unique()))}
    concepts = {n: len(names) + i for i, n in enumerate(sorted(keypoints.concept.unique()))}
    c = len(names) + len(concepts)

    def vec(r):
        v = np.zeros(c)
        v[names[r.keypoint]], v[concepts[r.concept]] = 1.0, 0.5
        return v

    return lattice_store(images, keypoints, vec, c)


def concept_store(images, keypoints, seed):
    """A concept-only oracle: one-hot of the concept, with small random noise to break ties."""
    concepts = {n: i for i, n in enumerate(sorted(keypoints.concept.unique()))}
    c = len(concepts) + 8
    return lattice_store(
        images, keypoints, lambda r: np.eye(c)[concepts[r.concept]], c, noise=0.01, seed=seed
    )


def category_values(metrics, alpha, reduction="official"):
    m = metrics[
        (metrics.scope == "category") & (metrics.reduction == reduction) & (np.isclose(metrics.alpha, alpha))
    ]
    return {(r.metric, r.group): r.value for r in m.itertuples()}


@pytest.mark.parametrize(
    "half, native", [(False, True), (True, True), (True, False)], ids=["float32", "fp16-native", "fp16-torch"]
)
def test_vectorized_matches_per_pair_reference(half, native, monkeypatch):
    """float32 maps; fp16 maps as FeatureStore keeps them, through the native kernel and through torch.
    The reference reads float32 copies of the same maps. 20 channels and a 13 x 13 grid leave tails in
    the kernel's 32-cell tiles and 32-channel blocks."""
    monkeypatch.setenv("SOCO_NATIVE", "1" if native else "0")
    half_matmul._library.cache_clear()
    if native and half and not half_matmul.available():
        need_hardware(False, "a CPU that runs a native kernel (AVX2 or AVX-512)")
    calls = []
    kernel = half_matmul.argmax_into
    monkeypatch.setattr(half_matmul, "argmax_into", lambda *a, **k: calls.append(1) or kernel(*a, **k))
    images, keypoints, pairs, corr = make_world(seed=1)
    store = gaussian_store(images, seed=1, c=20, grid=13, half=half)
    preds = predict(pairs, corr, keypoints, images, store, PROTOCOL, "gauss")
    assert len(calls) == (
        images.image_id.isin(pairs.trg_image[pairs.evaluated]).sum() if native and half else 0
    )
    metrics = compute_metrics(preds, None, corr, keypoints, images, pairs, TAX, PROTOCOL)
    for alpha in PROTOCOL.alphas:
        ref = reference_category_pck(images, keypoints, pairs, corr, store, alpha)
        got = category_values(metrics, alpha)
        assert set(ref) == set(got)
        assert {m for m, _ in ref} == {"cc", "soc", "soc_geo", "cross_soc", "cross_cc"}
        for key, value in ref.items():
            assert got[key] == pytest.approx(value, abs=1e-9), key


def test_queries_are_the_evaluated_soc_and_cc_rows():
    images, keypoints, pairs, corr = make_world(seed=2)
    preds = predict(pairs, corr, keypoints, images, gaussian_store(images), PROTOCOL, "gauss")
    ev = corr[corr.pair_id.isin(pairs.pair_id[pairs.evaluated])]
    free = preds[preds["mode"] == "free"]
    assert len(free) == len(ev.drop_duplicates(["pair_id", "src_keypoint"]))
    assert not free.duplicated(["pair_id", "src_keypoint"]).any()
    assert len(preds[preds["mode"] == "geo"]) == int((ev.kind.eq("soc") & ev.geo).sum())


def test_identity_bumps_score_100_and_predict_the_patch_corner():
    images, keypoints, pairs, corr = make_world(seed=3, lattice=True)
    store = identity_store(images, keypoints)
    preds = predict(pairs, corr, keypoints, images, store, PROTOCOL, "identity")
    metrics = compute_metrics(preds, None, corr, keypoints, images, pairs, TAX, PROTOCOL)
    top = metrics[(metrics.scope == "all") & np.isclose(metrics.alpha, 0.1)]
    assert set(top.metric) == {"cc", "soc", "soc_geo", "cross_soc", "cross_cc"}
    assert (top.value == 100.0).all()
    # The prediction is the top-left corner of the target keypoint's cell, in original pixels.
    soc = (
        corr[(corr.kind == "soc")]
        .merge(pairs[["pair_id", "trg_image"]])
        .merge(preds[preds["mode"] == "free"], on=["pair_id", "src_keypoint"])
    )
    gt = soc.merge(keypoints, left_on=["trg_image", "trg_keypoint"], right_on=["image_id", "keypoint"])
    np.testing.assert_allclose(gt.pred_x, (gt.x // 10) / 40 * 390)
    np.testing.assert_allclose(gt.pred_y, (gt.y // 10) / 40 * 390)
    # Patch-centre prediction moves every point by half a cell.
    centre = predict(
        pairs, corr, keypoints, images, store, replace(PROTOCOL, prediction_point="center"), "identity"
    )
    np.testing.assert_allclose(centre.pred_x - preds.pred_x, 390 / 80)


@pytest.mark.parametrize("option", [{"upsample": True}, {"soft_argmax": True}])
def test_upsample_and_soft_argmax_stay_at_the_peak(option):
    images, keypoints, pairs, corr = make_world(seed=4, lattice=True, n_per_cat=3, pairs_per_cat=3)
    store = identity_store(images, keypoints)
    base = predict(pairs, corr, keypoints, images, store, PROTOCOL, "identity")
    other = predict(pairs, corr, keypoints, images, store, replace(PROTOCOL, **option), "identity")
    soc = corr.loc[corr.kind == "soc", ["pair_id", "src_keypoint"]].drop_duplicates()
    key = pd.MultiIndex.from_frame(base[["pair_id", "src_keypoint"]])
    free = (base["mode"] == "free") & key.isin(pd.MultiIndex.from_frame(soc))
    assert free.sum() > 50
    # A single highest peak (the keypoint's own name): the point stays within one cell of the patch corner.
    assert np.abs(other.pred_x[free] - base.pred_x[free]).max() <= 390 / 40
    assert np.abs(other.pred_y[free] - base.pred_y[free]).max() <= 390 / 40
    assert np.isfinite(other.similarity).all()


def _official_sd(rows: pd.DataFrame) -> float:
    """Std of an official-reduction mean of independent Bernoulli(p) keypoints, in points (0-100)."""
    n_cat = rows.pair_group.nunique()
    pairs_per_cat = rows.groupby("pair_group").pair_id.nunique()
    kps_per_pair = rows.groupby("pair_id").size()
    wt = 1.0 / (n_cat * rows.pair_group.map(pairs_per_cat) * rows.pair_id.map(kps_per_pair))
    return 100 * float(np.sqrt((wt**2 * rows.p * (1 - rows.p)).sum()))


def test_iid_gaussian_features_score_near_random_chance():
    images, keypoints, pairs, corr = make_world(seed=5, n_per_cat=10, pairs_per_cat=40, cross_per_cat=0)
    store = gaussian_store(images, seed=5, c=8, grid=10, size=200)
    proto = replace(PROTOCOL, alphas=(0.3,), headline_alpha=0.3)
    preds = predict(pairs, corr, keypoints, images, store, proto, "gauss")
    metrics = compute_metrics(preds, None, corr, keypoints, images, pairs, TAX, proto)
    soc = metrics[(metrics.metric == "soc") & (metrics.scope == "all") & (metrics.reduction == "official")]
    chance = random_feature_chance(corr, pairs, keypoints, images, (10, 10), 200, proto, "soc")
    # Tolerance: 4 standard deviations of the official mean of independent Bernoulli picks.
    rows = corr[(corr.kind == "soc") & corr.pair_id.isin(pairs.pair_id[pairs.evaluated])].merge(
        pairs[["pair_id", "pair_group"]]
    )
    sd = _official_sd(rows.assign(p=chance / 100))
    assert 5 < chance < 60
    assert abs(float(soc.value.iloc[0]) - chance) < 4 * sd, (soc.value.iloc[0], chance, sd)
    # CC (union of the group's discs) and SOC-geo (uniform over candidate patches) likewise.
    for metric, sub in (("cc", rows), ("soc_geo", rows[rows.geo])):
        value = metrics[
            (metrics.metric == metric) & (metrics.scope == "all") & (metrics.reduction == "official")
        ]
        expected = random_feature_chance(corr, pairs, keypoints, images, (10, 10), 200, proto, metric)
        sd = _official_sd(sub.assign(p=expected / 100))
        assert abs(float(value.value.iloc[0]) - expected) < 4 * sd, (metric, value.value.iloc[0], expected)


def test_concept_oracle_scores_100_cc_and_theory_soc():
    images, keypoints, pairs, corr = make_world(
        seed=6, lattice=True, n_per_cat=8, pairs_per_cat=30, cross_per_cat=0
    )
    store = concept_store(images, keypoints, seed=6)
    preds = predict(pairs, corr, keypoints, images, store, PROTOCOL, "concept")
    metrics = compute_metrics(preds, None, corr, keypoints, images, pairs, TAX, PROTOCOL)
    top = metrics[
        (metrics.scope == "all") & (metrics.reduction == "official") & np.isclose(metrics.alpha, 0.1)
    ]
    value = dict(zip(top.metric, top.value, strict=True))
    assert value["cc"] == 100.0
    rows = corr[(corr.kind == "soc") & corr.pair_id.isin(pairs.pair_id[pairs.evaluated])].merge(
        pairs[["pair_id", "pair_group"]]
    )
    for metric, geo, sub in (("soc", False, rows), ("soc_geo", True, rows[rows.geo])):
        expected = expected_concept_oracle_soc(corr, pairs, keypoints, images, alpha=0.1, geo=geo)
        assert expected == pytest.approx(
            expected_concept_oracle_soc(corr, pairs, geo=geo)
        )  # instances far apart
        sd = _official_sd(sub.assign(p=1.0 / sub.n_candidates))
        assert abs(value[metric] - expected) < 4 * sd, (metric, value[metric], expected, sd)
    assert value["soc"] < 90


def test_geo_picks_only_candidate_patches():
    images, keypoints, pairs, corr = make_world(seed=7)
    store = gaussian_store(images, seed=7, grid=12, size=224)
    preds = predict(pairs, corr, keypoints, images, store, PROTOCOL, "gauss")
    geo = preds[preds["mode"] == "geo"].merge(pairs[["pair_id", "trg_image"]])
    cand = (
        corr[corr.kind == "cc"]
        .merge(pairs[["pair_id", "trg_image"]])
        .merge(keypoints, left_on=["trg_image", "trg_keypoint"], right_on=["image_id", "keypoint"])
    )
    im = images.set_index("image_id")
    side = np.maximum(im.width, im.height)
    for df in (geo, cand):
        s = df.trg_image.map(side).to_numpy()
        x, y = (df.pred_x, df.pred_y) if df is geo else (df.x, df.y)
        if df is geo:
            df["cell"] = (np.round(y / s * 12).astype(int) * 12 + np.round(x / s * 12).astype(int)).to_numpy()
        else:
            u = np.trunc(np.trunc(x) * 224 / s) / 224
            v = np.trunc(np.trunc(y) * 224 / s) / 224
            df["cell"] = (np.floor(v * 12).astype(int) * 12 + np.floor(u * 12).astype(int)).to_numpy()
    allowed = set(zip(cand.pair_id, cand.src_keypoint, cand.cell, strict=True))
    assert len(geo) > 20
    assert all(k in allowed for k in zip(geo.pair_id, geo.src_keypoint, geo.cell, strict=True))
    # Where the free argmax already lands on a candidate patch, geo agrees with it.
    both = geo.merge(preds[preds["mode"] == "free"], on=["pair_id", "src_keypoint"], suffixes=("", "_free"))
    free_cell = np.round(both.pred_y_free / both.trg_image.map(side) * 12).astype(int) * 12 + np.round(
        both.pred_x_free / both.trg_image.map(side) * 12
    ).astype(int)
    same = [k in allowed for k in zip(both.pair_id, both.src_keypoint, free_cell, strict=True)]
    assert np.allclose(both.pred_x[same], both.pred_x_free[same])
    assert (both.similarity <= both.similarity_free + 1e-6).all()


def test_rescoring_from_stored_predictions_needs_no_features(tmp_path):
    images, keypoints, pairs, corr = make_world(seed=8)
    preds = predict(pairs, corr, keypoints, images, gaussian_store(images), PROTOCOL, "gauss")
    path = str(tmp_path / "predictions.parquet")
    write_parquet_atomic(preds, path)
    stored = read_parquet(path)
    wide = replace(PROTOCOL, alphas=(0.1, 0.5), headline_alpha=0.5)
    assert wide.matching_hash() == PROTOCOL.matching_hash() and wide.version_hash() != PROTOCOL.version_hash()
    m = compute_metrics(stored, None, corr, keypoints, images, pairs, TAX, wide)
    top = m[(m.scope == "all") & (m.reduction == "official")].set_index(["metric", "alpha"]).value
    assert set(m.alpha.unique()) == {0.1, 0.5}
    for metric in ("cc", "soc", "soc_geo", "cross_soc", "cross_cc"):
        assert top[(metric, 0.5)] >= top[(metric, 0.1)]
    first = compute_metrics(preds, None, corr, keypoints, images, pairs, TAX, PROTOCOL)
    again = m[np.isclose(m.alpha, 0.1)].reset_index(drop=True)
    pd.testing.assert_frame_equal(first[np.isclose(first.alpha, 0.1)].reset_index(drop=True), again)


def test_four_choice_on_identity_bumps_picks_the_answer():
    images, keypoints, pairs, corr = make_world(seed=9, lattice=True, n_per_cat=3, pairs_per_cat=4)
    store = identity_store(images, keypoints)
    soc = corr[(corr.kind == "soc") & (corr.level == "intra")].merge(pairs[["pair_id", "trg_image"]])
    vis = keypoints[keypoints.visible]
    rng = np.random.default_rng(0)
    items = []
    for r in soc.itertuples():
        others = vis.keypoint[(vis.image_id == r.trg_image) & (vis.keypoint != r.trg_keypoint)].to_numpy()
        if len(others) < 3:
            continue
        opts = list(rng.choice(others, 3, replace=False))
        ans = int(rng.integers(4))
        opts.insert(ans, r.trg_keypoint)
        items.append(
            dict(
                pair_id=r.pair_id,
                src_keypoint=r.src_keypoint,
                option_a=opts[0],
                option_b=opts[1],
                option_c=opts[2],
                option_d=opts[3],
                answer=ans,
            )
        )
    fc = pd.DataFrame(items)
    out = predict_four_choice(fc, keypoints, images, store, PROTOCOL, "identity", image_pairs=pairs)
    assert len(out) == len(fc)
    assert (out[[f"pick_{r}" for r in range(4)]].to_numpy() == fc.answer.to_numpy()[:, None]).all()
    m = compute_metrics(
        predict(pairs, corr, keypoints, images, store, PROTOCOL, "identity"),
        out,
        corr,
        keypoints,
        images,
        pairs,
        TAX,
        PROTOCOL,
    )
    four = m[m.metric.str.startswith("four_choice") & (m.scope == "all")]
    assert len(four) == 4 and (four.value == 100.0).all()


def test_missing_features_name_the_image():
    images, keypoints, pairs, corr = make_world(seed=10, n_per_cat=2, pairs_per_cat=2, cross_per_cat=0)
    store = gaussian_store(images)
    del store.maps[images.image_id.iloc[0]]
    with pytest.raises(ValueError, match=images.image_id.iloc[0]):
        predict(pairs, corr, keypoints, images, store, PROTOCOL, "gauss")


def test_half_precision_compute_agrees_with_float32():
    images, keypoints, pairs, corr = make_world(seed=11)
    store = gaussian_store(images, seed=11)
    full = predict(pairs, corr, keypoints, images, store, PROTOCOL, "gauss")
    half = predict(pairs, corr, keypoints, images, store, replace(PROTOCOL, compute_dtype="float16"), "gauss")
    same = np.isclose(full.pred_x, half.pred_x) & np.isclose(full.pred_y, half.pred_y)
    assert same.mean() > 0.95
    np.testing.assert_allclose(full.similarity, half.similarity, atol=2e-2)


def test_sample_descriptors_is_grid_sample_align_corners():
    from soco_pipeline.evaluation.matching import sample_descriptors

    g = torch.Generator().manual_seed(0)
    fmap = torch.randn(7, 9, 11, generator=g)
    uv = torch.cat([torch.rand(50, 2, generator=g), torch.tensor([[0.0, 0.0], [0.999, 0.999], [0.5, 0.0]])])
    ref = F.grid_sample(fmap[None], (2 * uv - 1).view(1, 1, -1, 2), mode="bilinear", align_corners=True)
    torch.testing.assert_close(sample_descriptors(fmap, uv), ref[0, :, 0, :].T, rtol=0, atol=1e-6)
    torch.testing.assert_close(sample_descriptors(fmap.half(), uv), ref[0, :, 0, :].T, rtol=0, atol=1e-2)


def test_categorical_key_columns_give_the_same_predictions():
    """Parquet hands back dictionary (categorical) columns, often with categories a subset does not use."""
    images, keypoints, pairs, corr = make_world(seed=12, n_per_cat=3, pairs_per_cat=4, cross_per_cat=2)
    store = gaussian_store(images, seed=12)
    plain = predict(pairs, corr, keypoints, images, store, PROTOCOL, "gauss")
    cat = corr.copy()
    for col in ("pair_id", "src_keypoint", "trg_keypoint"):
        cat[col] = pd.Categorical(cat[col], categories=["zz_unused", *pd.unique(cat[col])])
    pairs_cat = pairs.assign(pair_id=pd.Categorical(pairs.pair_id))
    got = predict(pairs_cat, cat, keypoints, images, store, PROTOCOL, "gauss")
    pd.testing.assert_frame_equal(
        got.astype({"pair_id": str, "src_keypoint": str}), plain.astype({"pair_id": str, "src_keypoint": str})
    )


@pytest.mark.parametrize("mode", ["1", "avx2"], ids=["default-isa", "avx2"])
def test_native_kernel_and_torch_give_the_same_predictions(monkeypatch, mode):
    monkeypatch.setenv("SOCO_NATIVE", mode)
    half_matmul._library.cache_clear()
    try:
        if not half_matmul.available():
            need_hardware(False, f"a CPU that runs the native kernel for SOCO_NATIVE={mode}")
        if mode == "avx2":
            assert half_matmul.instruction_set() == "avx2"
        images, keypoints, pairs, corr = make_world(seed=13)
        store = gaussian_store(images, seed=13, c=70, grid=21, half=True)
        native = predict(pairs, corr, keypoints, images, store, PROTOCOL, "gauss")
    finally:
        monkeypatch.delenv("SOCO_NATIVE")
        half_matmul._library.cache_clear()
    monkeypatch.setattr(half_matmul, "available", lambda: False)
    torch_only = predict(pairs, corr, keypoints, images, store, PROTOCOL, "gauss")
    pd.testing.assert_frame_equal(native.drop(columns="similarity"), torch_only.drop(columns="similarity"))
    np.testing.assert_allclose(native.similarity, torch_only.similarity, rtol=0, atol=1e-6)


def test_duplicate_keypoint_rows_are_named():
    images, keypoints, pairs, corr = make_world(seed=14, n_per_cat=2, pairs_per_cat=2, cross_per_cat=0)
    doubled = pd.concat([keypoints, keypoints.iloc[:1]], ignore_index=True)
    with pytest.raises(ValueError, match=r"several rows for one \(image_id, keypoint\)"):
        predict(pairs, corr, doubled, images, gaussian_store(images), PROTOCOL, "gauss")
