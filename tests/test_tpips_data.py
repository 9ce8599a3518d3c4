"""TPIPS data: generator determinism and cue control on pixels, simulated observers, pruning, consensus,
agreement of the oracle / random / constant choosers, JSONL round trip and named errors for bad input."""

from __future__ import annotations

import colorsys
import json

import numpy as np
import pytest

from soco_pipeline.tasks.tpips.afc import annotate_afc, generate_afc
from soco_pipeline.tasks.tpips.annotators import normalise
from soco_pipeline.tasks.tpips.aspect_text import AspectVocab
from soco_pipeline.tasks.tpips.baselines import (
    afc_positions,
    afc_scores,
    constant_choice,
    ooo_positions,
    ooo_scores,
    oracle_sim,
    random_sim,
)
from soco_pipeline.tasks.tpips.formats import (
    TpipsFormatError,
    load_afc_jsonl,
    load_ooo_jsonl,
    write_afc_jsonl,
    write_ooo_jsonl,
)
from soco_pipeline.tasks.tpips.images import write_images
from soco_pipeline.tasks.tpips.ooo import annotate_triplets
from soco_pipeline.tasks.tpips.render import background_image, render_values
from soco_pipeline.tasks.tpips.scoring import agreement, rater_agreement, summarise
from soco_pipeline.tasks.tpips.triplets import generate_triplets
from tests.tpips_helpers import tiny_config

pytestmark = pytest.mark.unit


def test_generator_is_deterministic_and_aspects_disagree():
    cfg = tiny_config(20)
    a, b = generate_triplets(cfg), generate_triplets(cfg)
    assert a.images.equals(b.images) and a.triplets.equals(b.triplets)
    assert not generate_triplets(cfg, seed=1).images.equals(a.images)
    assert a.images.image_id.str.startswith("tpips/").all() and a.images.image_id.is_unique
    # every triplet varies >= 3 aspects with different odd images
    odd = a.triplets.odd_by_construction.str.split(",").map(lambda xs: {x.split(":")[1] for x in xs})
    assert (odd.map(len) >= 2).all()
    ooo, summary = annotate_triplets(a, cfg)
    assert summary["judgements"] == "simulated" and (ooo.judgements == "simulated").all()
    assert summary["observer"]["n_annotators"] == 5 and summary["pruned"] > 0
    # a triplet's aspects disagree about the odd image
    per_triplet = (
        ooo[ooo.aspect != "overall"]
        .groupby("triplet_id")
        .apply(
            lambda g: len(set(np.argmax(g[["y_0", "y_1", "y_2"]].to_numpy(float), 1))), include_groups=False
        )
    )
    assert (per_triplet >= 2).mean() > 0.8


def _hue(rgb: np.ndarray) -> np.ndarray:
    return np.array([colorsys.rgb_to_hsv(*px)[0] for px in rgb])


def test_cue_control_on_pixels_colour_background_size():
    cfg = tiny_config(8)
    ts = generate_triplets(cfg)
    g = cfg.scene.warmth_gain
    for rec in ts.images.to_dict("records"):
        img, mask, body = render_values(rec, cfg, with_body=True)
        # background: every non-object pixel is the recorded background, exactly
        bg = background_image(rec["background_id"], cfg.image_size)
        assert np.array_equal(img[~mask], bg[~mask]), rec["image_id"]
        # colour: body pixels (warmth gain undone) have the recorded hue
        px = img[body & mask].astype(float) / 255.0
        px = px[(px.max(1) > 0.15) & (px.max(1) < 0.99)]
        px[:, 0] /= 1 + g * rec["warmth"]
        px[:, 2] /= 1 - g * rec["warmth"]
        hue = np.median(((_hue(np.clip(px, 0, 1)) - rec["hue"] + 0.5) % 1.0) - 0.5)
        assert abs(hue) < 0.03, (rec["image_id"], hue)
        # size: one object's box covers about the recorded area
        if rec["count"] == 1:
            rows, cols = np.flatnonzero(mask.any(1)), np.flatnonzero(mask.any(0))
            box = (rows[-1] - rows[0] + 1) * (cols[-1] - cols[0] + 1) / mask.size
            assert 0.6 < box / rec["area"] < 1.4, (rec["image_id"], box, rec["area"])


def test_consensus_formula_with_pruning_on_hand_made_votes():
    votes = np.array([[5, 0, 0], [3, 1, 1], [1, 1, 0], [2, 0, 0], [0, 0, 0]])
    cannot = np.array([0, 0, 3, 3, 5])
    keep, y = normalise(votes, cannot, prune_cannot_tell=3)
    assert keep.tolist() == [True, True, False, False, False]
    assert np.allclose(y[1], [0.6, 0.2, 0.2])
    assert np.allclose(rater_agreement(y[keep]), [1.0, 0.36 + 0.04 + 0.04])
    keep2, _ = normalise(np.array([[2, 2], [3, 1]]), np.array([1, 1]), 3, drop_ties=True)
    assert keep2.tolist() == [False, True]


def test_oracle_reaches_best_achievable_random_and_constant_choosers():
    cfg = tiny_config(40)
    ts = generate_triplets(cfg)
    ooo, _ = annotate_triplets(ts, cfg)
    ids = ts.images.image_id.tolist()
    pos = ooo_positions(ooo, ids)
    asp = ooo.aspect.to_numpy()
    y = ooo[["y_0", "y_1", "y_2"]].to_numpy()
    best = np.mean([max(r.y_0, r.y_1, r.y_2) for r in ooo.itertuples()])  # computed independently
    oracle = agreement(ooo_scores(oracle_sim(ts.images, ids, cfg), pos, asp), y)
    assert oracle.mean() == pytest.approx(best, abs=1e-12)
    # a chooser that always names one position scores exactly the mean vote share of that position
    for k in range(3):
        const = agreement(constant_choice(len(ooo), 3, k), y)
        assert const.mean() == pytest.approx(ooo[f"y_{k}"].mean(), abs=1e-12)
    # no preference at all (every option scores the same) is a tie: exactly chance, not the first option's share
    assert agreement(np.zeros((len(ooo), 3)), y) == pytest.approx(np.full(len(ooo), 1 / 3), abs=1e-12)
    assert ooo.y_0.mean() != pytest.approx(1 / 3, abs=1e-3)
    runs = [agreement(ooo_scores(random_sim(s), pos, asp), y).mean() for s in range(20)]
    rnd = agreement(ooo_scores(random_sim(0), pos, asp), y)
    se = rnd.std(ddof=1) / np.sqrt(len(rnd))
    assert abs(np.mean(runs) - 1 / 3) < 2 * se / np.sqrt(20) + 0.01
    assert abs(rnd.mean() - 1 / 3) < 2 * se
    table = summarise(ooo, oracle, y)
    assert table.iloc[0].aspect == "all" and table.iloc[0].agreement == pytest.approx(100 * best)
    # the ceiling is mean max y (the oracle reaches it); the rater agreement Σ y² lies below it
    assert table.iloc[0].ceiling == pytest.approx(100 * best)
    assert table.iloc[0].rater_agreement == pytest.approx(100 * rater_agreement(y).mean())
    assert (table.rater_agreement <= table.ceiling + 1e-9).all() and table.iloc[
        0
    ].rater_agreement < 100 * best


def test_afc_has_no_overall_and_its_oracle_equals_its_ceiling():
    cfg = tiny_config(4, 40)
    values, items = generate_afc(cfg)
    afc, summary = annotate_afc(values, items, cfg)
    assert len(afc) > 10 and "overall" not in set(afc.aspect)
    assert set(afc.source) == {"editing", "compositing", "novel_view", "distortion"}
    assert set(afc[afc.source == "distortion"].aspect) == {"texture"}
    ids = values.image_id.tolist()
    y = afc[["y_0", "y_1"]].to_numpy()
    oracle = agreement(
        afc_scores(oracle_sim(values, ids, cfg), afc_positions(afc, ids), afc.aspect.to_numpy()), y
    )
    assert oracle.mean() == pytest.approx(y.max(1).mean(), abs=1e-12)
    for k in range(2):
        assert agreement(constant_choice(len(afc), 2, k), y).mean() == pytest.approx(afc[f"y_{k}"].mean())


def test_jsonl_round_trip(tmp_path):
    cfg = tiny_config(6, 8)
    ts = generate_triplets(cfg)
    ooo, _ = annotate_triplets(ts, cfg)
    imgs = write_images(ts.images, str(tmp_path / "data"), cfg)
    uris = dict(zip(imgs.image_id, imgs.uri, strict=True))
    path = str(tmp_path / "ooo.jsonl")
    assert write_ooo_jsonl(ooo, uris, path) == len(ooo)
    back, _ = load_ooo_jsonl(path)
    expect = ooo.copy()
    for c in ("image_0", "image_1", "image_2"):
        expect[c] = expect[c].map(uris)
    assert back.drop(columns="votes").equals(expect.drop(columns="votes"))
    assert back.votes.tolist() == expect.votes.tolist()
    values, items = generate_afc(cfg)
    afc, _ = annotate_afc(values, items, cfg)
    aimgs = write_images(values, str(tmp_path / "data"), cfg)
    auris = dict(zip(aimgs.image_id, aimgs.uri, strict=True))
    apath = str(tmp_path / "afc.jsonl")
    write_afc_jsonl(afc, auris, apath)
    aback, _ = load_afc_jsonl(apath)
    assert aback.item_id.tolist() == afc.item_id.tolist()
    assert np.allclose(aback[["y_0", "y_1"]].to_numpy(), afc[["y_0", "y_1"]].to_numpy())
    assert (aback.ref == afc.ref.map(auris)).all() and (aback.source == afc.source).all()


def _one_line(tmp_path, **changes) -> str:
    img = tmp_path / "x.png"
    img.write_bytes(b"not checked for content")
    rec = {
        "triplet_id": "t0",
        "images": [str(img)] * 3,
        "aspect": "colour",
        "votes": [3, 1, 0],
        "cannot_tell": 1,
        "split": "test",
    } | changes
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(rec) + "\n")
    return str(path)


def test_bad_input_gets_named_errors(tmp_path):
    assert len(load_ooo_jsonl(_one_line(tmp_path))[0]) == 1
    with pytest.raises(TpipsFormatError, match=r"bad.jsonl:1: image .*missing.png.* does not exist"):
        load_ooo_jsonl(
            _one_line(tmp_path, images=[str(tmp_path / "x.png")] * 2 + [str(tmp_path / "missing.png")])
        )
    with pytest.raises(
        TpipsFormatError, match=r"bad.jsonl:1: votes \[3, 1, 0\] \+ cannot_tell 0 = 4, not the annotator"
    ):
        load_ooo_jsonl(_one_line(tmp_path, cannot_tell=0))
    with pytest.raises(TpipsFormatError, match=r"bad.jsonl:1: empty aspect"):
        load_ooo_jsonl(_one_line(tmp_path, aspect="  "))
    with pytest.raises(ValueError, match="unseen aspect 'glossiness'.*closed vocabulary"):
        AspectVocab(tiny_config().aspects).encode(["colour", "glossiness"])
    with pytest.raises(ValueError, match="empty aspect"):
        AspectVocab(tiny_config().aspects).encode([""])


def test_a_bad_composition_is_refused_with_the_config_key(tmp_path):
    import yaml

    from soco_pipeline.tasks.tpips.config import DEFAULT_PATH, load_config

    doc = yaml.safe_load(DEFAULT_PATH.read_text())
    for bad in (["colour", "glossiness"], ["colour"], ["colour", "pose", "size"]):
        doc["retrieval"]["compositions"] = [bad]
        (tmp_path / "t.yaml").write_text(yaml.safe_dump(doc))
        with pytest.raises(
            ValueError, match=r"retrieval.compositions entry .* must list 2 to retrieval.queries"
        ):
            load_config(tmp_path / "t.yaml")
