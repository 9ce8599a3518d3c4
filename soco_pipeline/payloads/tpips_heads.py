"""The TPIPS training payload: one backbone's learned perceptual heads, their scores and retrieval."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pandas as pd

from soco_pipeline.payloads.registry import PayloadResult, frame_checksum

OUTCOMES, HITS = "tpips_learned_outcomes", "retrieval_hits"  # the extra tables' names


def train(inputs: dict[str, Any], log: Callable[[str], None]) -> PayloadResult:
    """Inputs: `backbone`, `spec_file`, `features` (its tpips_features manifest), `images`, `ooo` (with a
    train split), `afc`, `cache_root`, `config`; the scores, outcomes and retrieval hits as extra tables."""
    from soco_pipeline.backbones.validate import checked_spec
    from soco_pipeline.tasks.tpips.aspect_text import aspect_encoder, describe
    from soco_pipeline.tasks.tpips.baselines import afc_positions, ooo_positions
    from soco_pipeline.tasks.tpips.config import TpipsConfig
    from soco_pipeline.tasks.tpips.evaluate import evaluate_sim_outcomes
    from soco_pipeline.tasks.tpips.features import features_from_manifest
    from soco_pipeline.tasks.tpips.learned import CONDITIONED, KINDS, train_metric, vocabulary
    from soco_pipeline.tasks.tpips.retrieval import retrieve, retrieve_compositional

    backbone, images, ooo, afc = inputs["backbone"], inputs["images"], inputs["ooo"], inputs["afc"]
    cfg = TpipsConfig.model_validate_json(inputs["config"])
    ids = images.image_id.tolist()
    opos, apos = ooo_positions(ooo, ids), afc_positions(afc, ids)
    feats = features_from_manifest(inputs["features"], ids, inputs["cache_root"])
    vocab = aspect_encoder(checked_spec(inputs["spec_file"]), vocabulary(cfg.aspects, ooo))
    parts, meta, trained = [], {"aspect_text": describe(vocab)}, {}
    for kind in KINDS:
        log(f"[{backbone}] TPIPS head {kind}: training on the OOO train split")
        m = trained[kind] = train_metric(kind, feats, ooo, opos, vocab, cfg.learned)
        note = f"epochs {m.epochs}, best {m.best_epoch}, tau {m.tau:.4f}; {describe(vocab)}"
        parts.append(
            evaluate_sim_outcomes(backbone, kind, kind in CONDITIONED, m.sim, ooo, opos, afc, apos, note=note)
        )
        meta[f"{kind}_triplets_per_s"] = round(m.triplets_per_second, 1)
    # retrieval over the triplet images with the conditioned mid-fusion head
    r = cfg.retrieval
    queries = [int(i) for i in images.role.eq("triplet").to_numpy().nonzero()[0][: r.queries]]
    aspects = [a for a in cfg.aspects if a != "overall"]
    mid = trained["mid"].sim
    hits = pd.concat(
        [
            retrieve(mid, ids, queries, aspects, r.top_k, r.overall_penalty),
            retrieve_compositional(mid, ids, queries, r.compositions, r.top_k, r.overall_penalty),
        ],
        ignore_index=True,
    )
    scores, outcomes = (pd.concat([p[i] for p in parts], ignore_index=True) for i in (0, 1))
    meta["checksum"] = frame_checksum(scores, outcomes, hits)
    return PayloadResult(scores, meta, {OUTCOMES: outcomes, HITS: hits})
