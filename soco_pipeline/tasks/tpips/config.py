"""The typed TPIPS config (assets/tpips.yaml): scene ranges, triplet sampling, observer, features, training."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field

DEFAULT_PATH = Path(__file__).resolve().parents[3] / "assets" / "tpips.yaml"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SceneConfig(_Strict):
    """What the renderer may vary, and over which ranges."""

    shapes: list[str]
    textures: list[str]
    counts: list[int]
    size_range: tuple[float, float]
    elevation_deg: float
    saturation: float
    value: float
    warmth_gain: float
    n_backgrounds: int


class TripletConfig(_Strict):
    """How many triplets, how many aspects each varies and by how much, and the split shares."""

    n: int
    vary_min: int
    vary_max: int
    graded_fraction: float
    min_delta: float
    max_delta: float
    graded_delta: float
    splits: dict[str, float]


class ObserverConfig(_Strict):
    """The simulated annotators' noisy-observer model."""

    n_annotators: int = 5
    vote_mode: Literal["expected", "sampled"] = "expected"
    temperature: float
    noise_sd: float
    cannot_tell_margin: float
    prune_cannot_tell: int = 3


class AfcConfig(_Strict):
    """The 2AFC set: sources, degradation strengths, aspects asked per source."""

    n: int
    sources: list[str]
    blur_sigma: tuple[float, float]
    jpeg_quality: tuple[int, int]
    blur_per_sigma: float
    jpeg_per_unit: float
    aspects: dict[str, list[str]]


class FeaturesConfig(_Strict):
    """Input size of the derived specs, extra layers per backbone kind, backbones that do not apply."""

    input_size: int
    # images per forward pass for the derived specs (None: the spec's own); not in spec_hash, so the cache
    # folders stay; the TPIPS renders are small, so larger batches than the specs' (set for SOCO's inputs) pay
    batch_size: int | None = None
    layers: dict[str, list]


class LearnedConfig(_Strict):
    """Training of the late- and mid-fusion metrics."""

    seed: int
    aspect_dim: int
    hidden: int
    proj_dim: int
    late_grid: int = 1
    late_head: Literal["distance", "gated"] = "distance"
    mid_weights: Literal["signed", "squared"] = "signed"
    epochs: int
    lbfgs_iter: int = 10
    lr: float
    weight_decay: float
    patience: int
    tau_init: float
    tau_mid: float = 1.0
    learn_tau: bool


class RetrievalConfig(_Strict):
    """Aspect-conditioned and compositional retrieval."""

    overall_penalty: float = 0.3
    top_k: int
    queries: int
    # compositional retrieval: each entry's i-th aspect is asked of the i-th query image (published: the scores
    # of the (query, aspect) pairs add up)
    compositions: list[list[str]] = Field(default_factory=list)


class LvlmPrompts(_Strict):
    """Prompt text of the LVLM baselines ({aspect} is filled in)."""

    scale_max: int
    pairwise_prompt: str
    triplet_prompt: str
    afc_prompt: str


class TpipsConfig(_Strict):
    """The whole family's config."""

    seed: int
    image_size: int
    aspects: list[str]
    overall_weights: dict[str, float]
    scene: SceneConfig
    triplets: TripletConfig
    observer: ObserverConfig
    afc: AfcConfig
    features: FeaturesConfig
    baselines: dict[str, str] = Field(default_factory=dict)
    learned: LearnedConfig
    retrieval: RetrievalConfig
    lvlm: LvlmPrompts

    def with_updates(self, **sections: dict) -> TpipsConfig:
        """A copy with some fields of some sections replaced (tests and benchmarks shrink the scale)."""
        doc = self.model_dump()
        for name, upd in sections.items():
            if isinstance(doc.get(name), dict) and isinstance(upd, dict):
                doc[name] = {**doc[name], **upd}
            else:
                doc[name] = upd
        return TpipsConfig.model_validate(doc)


def load_config(path: str | Path | None = None) -> TpipsConfig:
    """Read and validate assets/tpips.yaml (or `path`); a bad field is named with the file."""
    p = Path(path) if path is not None else DEFAULT_PATH
    try:
        doc = yaml.safe_load(p.read_text())
        cfg = TpipsConfig.model_validate(doc)
    except (OSError, yaml.YAMLError) as e:
        raise ValueError(f"{p}: cannot read the TPIPS config ({e})") from None
    if "overall" not in cfg.aspects:
        raise ValueError(f"{p}: 'aspects' must include 'overall' (published)")
    for comp in cfg.retrieval.compositions:
        if not 2 <= len(comp) <= cfg.retrieval.queries or set(comp) - set(cfg.aspects):
            raise ValueError(
                f"{p}: retrieval.compositions entry {comp} must list 2 to retrieval.queries "
                f"({cfg.retrieval.queries}) aspects of the vocabulary {cfg.aspects} (one per query image)"
            )
    return cfg
