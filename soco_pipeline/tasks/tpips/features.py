"""TPIPS features through the shared cache: derived specs (input size, extra layers), token and global arrays;
a kind lacking a capability in NEEDS is `not_applicable` (docs/tpips.md, "Models")."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np
import pandas as pd

from soco_pipeline.backbones.kinds import missing_capabilities, per_kind
from soco_pipeline.backbones.spec import BackboneSpec, InputPolicy
from soco_pipeline.features.extract import extract_features
from soco_pipeline.features.store import FeatureStore
from soco_pipeline.tasks.tpips.config import NEEDS, TpipsConfig


def not_applicable(spec: BackboneSpec, cfg: TpipsConfig | None = None) -> str:
    """The reason a backbone cannot score TPIPS images ("" when it can): a capability its kind lacks."""
    missing = missing_capabilities(spec.kind, NEEDS)
    return f"needs {', '.join(missing)}, which a {spec.kind!r} backbone does not offer" if missing else ""


def config_layers(spec: BackboneSpec, cfg: TpipsConfig) -> list:
    """The layers the TPIPS config names for the spec's kind (empty: the spec's own `layer`, if any)."""
    return per_kind(cfg.features.layers, spec.kind, "blocks", "the TPIPS config's features.layers") or []


def layer_specs(spec: BackboneSpec, cfg: TpipsConfig, device: str | None = None) -> list[BackboneSpec]:
    """The derived specs of one backbone for TPIPS: the first is the main layer (its global embedding)."""
    base = dataclasses.replace(
        spec,
        input=InputPolicy("nearest_multiple", cfg.features.input_size),
        device=device or spec.device,
        batch_size=cfg.features.batch_size or spec.batch_size,
    )
    layers = config_layers(spec, cfg)
    if not layers:
        return [base]
    opts = dict(base.options)
    return [dataclasses.replace(base, options=tuple({**opts, "layer": layer}.items())) for layer in layers]


def extract_tpips(
    spec: BackboneSpec,
    images: pd.DataFrame,
    cache_root: str,
    cfg: TpipsConfig,
    device: str | None = None,
    log: Callable[[str], None] | None = None,
) -> list[pd.DataFrame]:
    """Extract every layer spec of a backbone for the images (cached; resumable); one manifest per layer."""
    reason = not_applicable(spec, cfg)
    if reason:
        raise ValueError(f"backbone {spec.name!r} does not apply to TPIPS images: {reason}")
    return [
        extract_features(s, images, cache_root, {"device": device} if device else None, log=log)
        for s in layer_specs(spec, cfg, device)
    ]


@dataclasses.dataclass
class TpipsFeatures:
    """Per image (rows in `image_ids` order): tokens per layer (N, T, C_l) and a global embedding (N, C)."""

    image_ids: list[str]
    layers: list[np.ndarray]
    globals_: np.ndarray

    def index(self, ids) -> np.ndarray:
        """Row positions of image ids."""
        pos = {k: i for i, k in enumerate(self.image_ids)}
        try:
            return np.array([pos[i] for i in ids], dtype=np.int64)
        except KeyError as e:
            raise KeyError(
                f"image {e.args[0]!r} has no TPIPS features; extract features for it first"
            ) from None


def load_tpips_features(
    spec: BackboneSpec, image_ids: list[str], cache_root: str, cfg: TpipsConfig, device: str | None = None
) -> TpipsFeatures:
    """Read the cached layer maps of a spec's derived layer specs (see `features_from_stores`)."""
    stores = [FeatureStore.for_spec(cache_root, s) for s in layer_specs(spec, cfg, device)]
    return features_from_stores(stores, image_ids)


def features_from_manifest(manifest: pd.DataFrame, image_ids: list[str], cache_root: str) -> TpipsFeatures:
    """The TPIPS features listed by a `tpips_features` table (layer 0 the main one), no spec re-derived."""
    stores = [
        FeatureStore.from_manifest(cache_root, m.drop(columns="layer"))
        for _, m in sorted(manifest.groupby("layer", sort=True), key=lambda kv: int(kv[0]))
    ]
    return features_from_stores(stores, image_ids)


def features_from_stores(stores: list[FeatureStore], image_ids: list[str]) -> TpipsFeatures:
    """The cached layer maps as tokens; the global embedding: the main layer's class token or mean token."""
    layers, glob = [], None
    for k, store in enumerate(stores):
        maps = np.stack([m for m, _ in store.get_many(image_ids)])  # N, C, h, w
        tokens = maps.reshape(maps.shape[0], maps.shape[1], -1).transpose(0, 2, 1).astype(np.float32)
        layers.append(tokens)
        if k == 0:
            if store.has_class_token:
                glob = np.stack([store.class_token(i) for i in image_ids])
            else:
                glob = tokens.mean(1)
    glob = glob / (np.linalg.norm(glob, axis=1, keepdims=True) + 1e-8)
    return TpipsFeatures(list(image_ids), layers, glob.astype(np.float32))
