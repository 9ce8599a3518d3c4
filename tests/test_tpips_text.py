"""TPIPS aspect text through a backbone spec's CLIP text tower: loaded from a local folder (both CLIP layouts),
unit embeddings, named errors for a missing or wrong tower, spec_hash untouched, and a learned metric that
conditions on the text embeddings and answers an aspect text it was never trained on."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from soco_pipeline.backbones import list_specs
from soco_pipeline.backbones.spec import BackboneSpecError, BackboneWeightsError, parse_spec, spec_hash
from soco_pipeline.backbones.text_encoder import load_text_encoder
from soco_pipeline.tasks.tpips import baselines as b
from soco_pipeline.tasks.tpips.aspect_text import AspectText, AspectVocab, aspect_encoder, describe
from soco_pipeline.tasks.tpips.features import extract_tpips, load_tpips_features
from soco_pipeline.tasks.tpips.images import write_images
from soco_pipeline.tasks.tpips.learned import train_metric
from soco_pipeline.tasks.tpips.ooo import annotate_triplets
from soco_pipeline.tasks.tpips.triplets import generate_triplets
from tests.tpips_helpers import tiny_clip_folder, tiny_config

pytestmark = pytest.mark.unit


def _with_text(text_encoder: str):
    return dataclasses.replace(list_specs()["dense_sift"], text_encoder=text_encoder)


@pytest.fixture(scope="module")
def clip_text(tmp_path_factory):
    return str(tiny_clip_folder(tmp_path_factory.mktemp("clip_text"), "clip_text_model"))


@pytest.mark.parametrize("kind", ["clip_text_model", "clip"])
def test_a_local_clip_tower_embeds_unit_vectors(tmp_path, kind):
    enc = load_text_encoder(_with_text(str(tiny_clip_folder(tmp_path, kind))))
    e = enc.embed(["colour", "pose of the car", "colour"])
    assert e.shape == (3, enc.dim) and enc.dim == (24 if kind == "clip" else 32)
    assert np.allclose(np.linalg.norm(e, axis=1), 1, atol=1e-5)
    assert np.allclose(e[0], e[2], atol=1e-6) and not np.allclose(e[0], e[1], atol=1e-3)
    assert load_text_encoder(list_specs()["dense_sift"]) is None  # text_encoder: none


def test_text_encoder_errors_name_the_spec_and_the_fix(tmp_path):
    with pytest.raises(
        BackboneWeightsError,
        match=r"dense_sift.*text_encoder folder .*missing does not exist.*"
        r"transformers CLIP folder",
    ):
        load_text_encoder(_with_text(str(tmp_path / "missing")))
    with pytest.raises(BackboneWeightsError, match="not in the local cache"):
        load_text_encoder(_with_text("hf:nobody/no-such-clip"))
    (tmp_path / "bert").mkdir()
    (tmp_path / "bert" / "config.json").write_text(json.dumps({"model_type": "bert"}))
    with pytest.raises(ValueError, match="'bert' model; it must be a CLIP model or CLIP text tower"):
        load_text_encoder(_with_text(str(tmp_path / "bert")))
    doc = {"kind": "classical", "model": "sift", "input": {"fixed_grid": 8}}
    with pytest.raises(BackboneSpecError, match="field 'text_encoder' 'hf:a b' is not 'hf:<owner>/<repo>'"):
        parse_spec({**doc, "text_encoder": "hf:a b"}, "s")
    # the tower does not change the image features, so the cache key stays
    assert spec_hash(parse_spec({**doc, "text_encoder": "weights/clip"}, "s")) == spec_hash(
        parse_spec(doc, "s")
    )


def test_a_learned_metric_conditions_on_text_and_answers_unseen_aspect_text(tmp_path, clip_text):
    cfg = tiny_config(30, image_size=64, features={"input_size": 64})
    ts = generate_triplets(cfg)
    ooo, _ = annotate_triplets(ts, cfg)
    images = write_images(ts.images, str(tmp_path / "data"), cfg)
    ids = images.image_id.tolist()
    spec = _with_text(clip_text)
    extract_tpips(spec, images, str(tmp_path / "cache"), cfg, device="cpu")
    feats = load_tpips_features(spec, ids, str(tmp_path / "cache"), cfg, device="cpu")
    vocab = aspect_encoder(spec, cfg.aspects)
    assert isinstance(vocab, AspectText) and describe(vocab) == f"aspect text: {clip_text}"
    assert isinstance(aspect_encoder(list_specs()["dense_sift"], cfg.aspects), AspectVocab)
    pos = b.ooo_positions(ooo, ids)
    mid = train_metric("mid", feats, ooo, pos, vocab, cfg.learned)
    assert mid.epochs > 0 and min(h["train_loss"] for h in mid.history) < np.log(3) - 0.01
    # the gains read the text tower's embedding: aspects get different channel weights
    assert not np.allclose(mid.channel_weights("colour"), mid.channel_weights("pose"))
    a, c = np.arange(6), np.arange(6, 12)
    unseen = mid.sim(a, c, np.array(["the colour of the car"] * 6))
    assert np.isfinite(unseen).all() and len(vocab.vectors) == len(cfg.aspects) + 1
    with pytest.raises(ValueError, match="empty aspect"):
        mid.sim(a, c, np.array([""] * 6))
    closed = train_metric("mid", feats, ooo, pos, AspectVocab(cfg.aspects), cfg.learned)
    with pytest.raises(ValueError, match="unseen aspect 'the colour of the car'.*closed vocabulary"):
        closed.sim(a, c, np.array(["the colour of the car"] * 6))


def test_checked_spec_refuses_a_missing_text_tower(tmp_path, clip_text):
    from soco_pipeline.backbones.validate import checked_spec

    doc = "kind: classical\nmodel: sift\ninput: {fixed_grid: 8}\ntext_encoder: %s\n"
    (tmp_path / "ok.yaml").write_text(doc % clip_text)
    assert checked_spec(tmp_path / "ok.yaml").text_encoder == clip_text
    (tmp_path / "gone.yaml").write_text(doc % (tmp_path / "nowhere"))
    with pytest.raises(BackboneWeightsError, match=r"gone.*text_encoder folder .*nowhere has no config.json"):
        checked_spec(tmp_path / "gone.yaml")
