"""Learned aspect-conditioned metrics on frozen features: late and mid fusion, on every backbone of the zoo,
beat every frozen aspect-agnostic baseline on the test split of a small generated set (margins measured here),
mid-fusion weights differ across aspects, training is seeded, the ablations train, retrieval ranks with the
published score."""

from __future__ import annotations

import numpy as np
import pytest

from soco_pipeline.backbones import list_specs
from soco_pipeline.tasks.tpips import baselines as b
from soco_pipeline.tasks.tpips.aspect_text import AspectVocab
from soco_pipeline.tasks.tpips.features import extract_tpips, load_tpips_features
from soco_pipeline.tasks.tpips.images import load_pixels, write_images
from soco_pipeline.tasks.tpips.learned import train_metric
from soco_pipeline.tasks.tpips.ooo import annotate_triplets
from soco_pipeline.tasks.tpips.retrieval import (
    compositional_scores,
    retrieval_scores,
    retrieve_compositional,
    top_k,
)
from soco_pipeline.tasks.tpips.scoring import agreement
from soco_pipeline.tasks.tpips.triplets import generate_triplets
from tests.tpips_helpers import tiny_config

pytestmark = pytest.mark.unit

N_TRIPLETS, SIZE, BACKBONE = 120, 64, "efficientnet_lite0"
FROZEN_ZOO = ("efficientnet_lite0", "vit_small_random", "dense_sift")  # every backbone that sees TPIPS images
# Each learned metric, trained on each backbone of the zoo, minus the best of every frozen aspect-agnostic
# baseline (test OOO agreement, ~100 rows at 120 triplets): every margin above 0 and their mean above MEAN_MARGIN.
# Measured at this seed (points): late 2.4 / 2.6 / 3.3, mid 1.4 / 6.7 / 4.4; the smallest margin over data seeds
# 0-3 is 1.2 (late) and 1.4 (mid) (docs/tpips.md). 60 triplets (12 test triplets) were too few: margins of +-5
# points there were noise of the test split.
MEAN_MARGIN = 0.02


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("tpips")
    cfg = tiny_config(N_TRIPLETS, image_size=SIZE, features={"input_size": SIZE})
    ts = generate_triplets(cfg)
    ooo, _ = annotate_triplets(ts, cfg)
    images = write_images(ts.images, str(root / "data"), cfg)
    ids = images.image_id.tolist()
    feats = {}
    for name in FROZEN_ZOO:
        spec = list_specs()[name]
        extract_tpips(spec, images, str(root / "cache"), cfg, device="cpu")
        feats[name] = load_tpips_features(spec, ids, str(root / "cache"), cfg, device="cpu")
    return {
        "cfg": cfg,
        "ooo": ooo,
        "ids": ids,
        "feats": feats[BACKBONE],
        "zoo": feats,
        "pos": b.ooo_positions(ooo, ids),
        "pixels": load_pixels(images.uri.tolist()),
        "values": ts.images,
    }


def _test_agreement(setup, sim) -> float:
    ooo, pos = setup["ooo"], setup["pos"]
    m = (ooo.split == "test").to_numpy()
    y = ooo[["y_0", "y_1", "y_2"]].to_numpy()[m]
    return float(agreement(b.ooo_scores(sim, pos[m], ooo.aspect.to_numpy()[m]), y).mean())


def _frozen_baselines(setup) -> dict[str, float]:
    sims = {"random": b.random_sim(0), "l2": b.l2_sim(setup["pixels"]), "ssim": b.ssim_sim(setup["pixels"])}
    for name, f in setup["zoo"].items():
        sims[f"lpips_style[{name}]"] = b.lpips_style_sim(f)
        sims[f"cosine[{name}]"] = b.cosine_sim(f)
    return {k: _test_agreement(setup, s) for k, s in sims.items()}


@pytest.mark.parametrize("kind", ["late", "mid"])
def test_learned_metric_beats_every_frozen_agnostic_baseline_on_every_backbone(setup, kind):
    cfg = setup["cfg"]
    base = _frozen_baselines(setup)
    best = max(base, key=base.get)
    margins = {}
    for name, feats in setup["zoo"].items():
        metric = train_metric(kind, feats, setup["ooo"], setup["pos"], AspectVocab(cfg.aspects), cfg.learned)
        margins[name] = _test_agreement(setup, metric.sim) - base[best]
    print(
        f"{kind} fusion minus the best frozen baseline {best} {base[best]:.3f}: {margins}; baselines {base}"
    )
    assert min(margins.values()) > 0, f"{kind} fusion does not beat {best} on every backbone: {margins}"
    assert np.mean(list(margins.values())) > MEAN_MARGIN, (
        f"{kind} fusion's mean margin is too small: {margins}"
    )


def test_mid_fusion_weights_depend_on_the_aspect_and_training_is_seeded(setup):
    cfg, feats = setup["cfg"], setup["feats"]
    vocab = AspectVocab(cfg.aspects)
    mid = train_metric("mid", feats, setup["ooo"], setup["pos"], vocab, cfg.learned)
    assert mid.epochs > 0 and mid.triplets_per_second > 0 and 0 < mid.tau
    w = np.stack([mid.channel_weights(a) for a in cfg.aspects])
    spread = np.abs(w[:, None, :] - w[None, :, :]).mean(-1) / np.abs(w).mean()
    assert (
        spread[np.triu_indices(len(w), 1)].min() > 0.01
    )  # every two aspects weight the channels differently
    # seeded: the same training gives the same metric
    again = train_metric("mid", feats, setup["ooo"], setup["pos"], vocab, cfg.learned)
    assert np.allclose(again.channel_weights("colour"), mid.channel_weights("colour"))


def test_ablations_and_retrieval(setup):
    cfg, feats = setup["cfg"], setup["feats"]
    vocab = AspectVocab(cfg.aspects)
    frozen = train_metric("mid_frozen", feats, setup["ooo"], setup["pos"], vocab, cfg.learned)
    assert frozen.epochs == 0
    # the frozen, unconditioned mid fusion is exactly the LPIPS-style distance
    a, c = np.arange(10), np.arange(10, 20)
    assert np.allclose(
        frozen.sim(a, c, np.array(["colour"] * 10)), b.lpips_style_sim(feats)(a, c, None), atol=1e-5
    )
    shared = train_metric("mid_unconditioned", feats, setup["ooo"], setup["pos"], vocab, cfg.learned)
    assert np.allclose(shared.channel_weights("colour"), shared.channel_weights("pose"))
    # it trains (it used to stall at its start, all ties, when L-BFGS's line search had no trial to spare)
    assert np.abs(shared.channel_weights("colour")).max() > 0
    assert min(h["train_loss"] for h in shared.history) < np.log(3) - 0.01
    # retrieval with the oracle metric: the colour neighbours of a query share its hue best
    sim = b.oracle_sim(setup["values"], setup["ids"], cfg)
    n = len(setup["ids"])
    s = retrieval_scores(sim, n, 0, "colour", cfg.retrieval.overall_penalty)
    assert np.isneginf(s[0])
    hits = top_k(s, 5)
    hue = setup["values"].hue.to_numpy()
    d = np.minimum(np.abs(hue - hue[0]), 1 - np.abs(hue - hue[0]))
    assert d[hits].mean() < d[1:].mean()
    expect = retrieval_scores(sim, n, 0, "colour") + retrieval_scores(sim, n, 3, "pose")
    assert np.allclose(compositional_scores(sim, n, [(0, "colour"), (3, "pose")])[4:], expect[4:])
    comp = retrieve_compositional(sim, setup["ids"], [0, 3], [["colour", "pose"]], 5)
    assert comp.query_id.unique().tolist() == [f"{setup['ids'][0]}|{setup['ids'][3]}"]
    assert comp.aspect.unique().tolist() == ["colour+pose"]
    both = compositional_scores(sim, n, [(0, "colour"), (3, "pose")])
    assert comp.image_id.tolist() == [setup["ids"][i] for i in top_k(both, 5)]
    with pytest.raises(ValueError, match="needs 3 query images; only 2"):
        retrieve_compositional(sim, setup["ids"], [0, 3], [["colour", "pose", "size"]], 5)
