"""One feature backbone on the MMVM items: cached dense maps, mask pooling, zero-shot and contrastive-head
answers; an item set without a training split borrows the generated `reference`'s head and thresholds."""

from __future__ import annotations

from collections.abc import Callable

import pandas as pd

from soco_pipeline.backbones.kinds import missing_capabilities
from soco_pipeline.features.extract import extract_features
from soco_pipeline.features.store import FeatureStore
from soco_pipeline.tasks.mmvm.contrastive import apply_head, train_head
from soco_pipeline.tasks.mmvm.scoring import (
    carried_rule,
    not_applicable,
    oracle_descriptors,
    pooled_descriptors,
    predict_items,
)

# What a backbone kind must offer (backbones/kinds.py CAPABILITIES); the SOCO oracles offer part maps only.
NEEDS = frozenset({"pixels", "dense_maps"})
ORACLE_REASON = (
    "not applicable: SOCO oracles read the part/concept keypoint maps of the embedded SOCO data set "
    "(ground_truth/keypoints.parquet); MMVM frames have no SOCO keypoints"
)
NO_MASKS_REASON = (
    "not applicable: these items come from VLMEvalKit's MMVMBench.tsv, which holds the marked frames but no "
    "object masks; feature backbones need the masks (source kind match_bench: match_bench/ + "
    "mllm_match_eval_full.tsv)"
)
FEATURE_COLUMNS = ["image_id", "uri", "width", "height", "category"]
METHODS = ("zero_shot", "contrastive_head")


def _has_masks(tables: dict[str, pd.DataFrame]) -> bool:
    """Whether every item's candidates have masks (VLMEvalKit's TSV gives none: `labels` is "[]")."""
    return bool(len(tables["objects"])) and not (tables["items"]["labels"] == "[]").any()


def _scene(t: dict[str, pd.DataFrame]) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    return t["items"], t["cases"], t["objects"]


def _has_train(tables: dict[str, pd.DataFrame]) -> bool:
    return bool((tables["items"]["split"] == "train").any())


def extract_frames(
    spec, images: pd.DataFrame, features_root: str, device: str | None, log: Callable[[str], None]
) -> pd.DataFrame:
    """The shared feature cache filled for the unmarked frames (resumable); its manifest."""
    return extract_features(spec, images[FEATURE_COLUMNS], features_root, context={"device": device}, log=log)


def _descriptors(
    spec,
    tables: dict[str, pd.DataFrame],
    features_root: str,
    device: str | None,
    log: Callable[[str], None],
    manifest: pd.DataFrame | None = None,
) -> tuple[dict, pd.DataFrame]:
    if manifest is None:
        manifest = extract_frames(spec, tables["images"], features_root, device, log)
    store = FeatureStore.from_manifest(features_root, manifest)
    return pooled_descriptors(tables["objects"], tables["images"], store), manifest


def backbone_predictions(
    spec,
    tables: dict[str, pd.DataFrame],
    features_root: str,
    device: str | None = None,
    log: Callable[[str], None] = lambda _m: None,
    none_rule=None,
    reference: dict[str, pd.DataFrame] | None = None,
    manifest: pd.DataFrame | None = None,
) -> tuple[pd.DataFrame, pd.DataFrame | None]:
    """(zero-shot and contrastive-head predictions, feature manifest) of one backbone spec."""
    items, cases, objects = tables["items"], tables["cases"], tables["objects"]
    if missing_capabilities(spec.kind, NEEDS):
        return not_applicable(items, spec.name, ORACLE_REASON), None
    if not _has_masks(tables):
        return not_applicable(items, spec.name, NO_MASKS_REASON), None
    desc, manifest = _descriptors(spec, tables, features_root, device, log, manifest)
    seed = int(getattr(spec, "seed", 0))
    carried = dict.fromkeys(METHODS)
    if reference is not None and not _has_train(tables) and _has_train(reference):
        ref_desc, _ = _descriptors(spec, reference, features_root, device, log)
        head = train_head(ref_desc, reference["objects"], reference["cases"], seed=seed)
        ref = _both_methods(reference, ref_desc, head, spec.name, None, carried)
        carried = {m: carried_rule(ref, m) for m in METHODS}
        log(
            f"{spec.name}: head and None thresholds from the reference's training split "
            f"({int((reference['items']['split'] == 'train').sum())} items), carried over"
        )
    else:
        head = train_head(desc, objects, cases, seed=seed)
    return _both_methods(tables, desc, head, spec.name, none_rule, carried), manifest


def _both_methods(
    t: dict[str, pd.DataFrame], desc: dict, head, model: str, none_rule, carried: dict
) -> pd.DataFrame:
    """The zero-shot and the contrastive-head predictions of `t`'s items (`carried`: each method's rule)."""
    parts = []
    for m in METHODS:
        d = apply_head(desc, head) if m == "contrastive_head" else desc
        parts.append(predict_items(*_scene(t), d, model, m, none_rule, carried[m]))
    return pd.concat(parts, ignore_index=True)


def oracle_predictions(
    tables: dict[str, pd.DataFrame],
    name: str = "instance_oracle",
    none_rule=None,
    reference: dict[str, pd.DataFrame] | None = None,
) -> pd.DataFrame:
    """The instance-identity oracle's predictions (a check of the scoring: 100 where None can be answered)."""
    if not _has_masks(tables):
        return not_applicable(tables["items"], name, NO_MASKS_REASON)
    carried = None
    if reference is not None and not _has_train(tables) and _has_train(reference):
        ref = predict_items(*_scene(reference), oracle_descriptors(reference["objects"]), name)
        carried = carried_rule(ref, "zero_shot")
    return predict_items(
        *_scene(tables), oracle_descriptors(tables["objects"]), name, none_rule=none_rule, carried=carried
    )
