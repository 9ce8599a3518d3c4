"""One feature backbone on the MMVM items: cached dense maps (the shared feature cache), mask pooling,
zero-shot answers and the contrastive head's; or a not-applicable row for the SOCO oracles."""

from __future__ import annotations

from collections.abc import Callable

import pandas as pd

from soco_pipeline.features.extract import extract_features
from soco_pipeline.features.store import FeatureStore
from soco_pipeline.tasks.mmvm.contrastive import apply_head, train_head
from soco_pipeline.tasks.mmvm.scoring import (
    not_applicable,
    oracle_descriptors,
    pooled_descriptors,
    predict_items,
)

ORACLE_REASON = ("not applicable: SOCO oracles read the part/concept keypoint maps of the embedded SOCO data set "
                 "(ground_truth/keypoints.parquet); MMVM frames have no SOCO keypoints")
FEATURE_COLUMNS = ["image_id", "uri", "width", "height", "category"]


def backbone_predictions(spec, tables: dict[str, pd.DataFrame], features_root: str, device: str | None = None,
                         log: Callable[[str], None] = lambda _m: None) -> tuple[pd.DataFrame, pd.DataFrame | None]:
    """(predictions of the zero-shot and contrastive-head methods, feature manifest) of one backbone spec;
    a SOCO oracle gets not-applicable rows and no manifest."""
    items, cases, objects, images = tables["items"], tables["cases"], tables["objects"], tables["images"]
    if spec.kind == "oracle":
        return not_applicable(items, spec.name, ORACLE_REASON), None
    manifest = extract_features(spec, images[FEATURE_COLUMNS], features_root, context={"device": device}, log=log)
    store = FeatureStore.from_manifest(features_root, manifest)
    desc = pooled_descriptors(objects, images, store)
    zero = predict_items(items, cases, objects, desc, spec.name)
    head = train_head(desc, objects, cases, seed=int(getattr(spec, "seed", 0)))
    tuned = predict_items(items, cases, objects, apply_head(desc, head), spec.name, method="contrastive_head")
    return pd.concat([zero, tuned], ignore_index=True), manifest


def oracle_predictions(tables: dict[str, pd.DataFrame], name: str = "instance_oracle") -> pd.DataFrame:
    """The instance-identity oracle's predictions (a check of the scoring: 100 on every breakdown)."""
    return predict_items(tables["items"], tables["cases"], tables["objects"], oracle_descriptors(tables["objects"]),
                         name)
