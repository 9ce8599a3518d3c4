"""The evaluation protocol as a frozen dataclass, loaded from assets/protocol.yaml.

The defaults are the official SOCO/OmniProbe protocol; every alternative is a value of a knob.
`version_hash()` covers every knob (a change re-runs predictions and metrics); `matching_hash()` covers
only the knobs that change predictions, so re-scoring with other alphas needs no features.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from soco_pipeline.taxonomy import ASSETS_DIR

DEFAULT_PROTOCOL_PATH = ASSETS_DIR / "protocol.yaml"

_CHOICES: dict[str, tuple[str, ...]] = {
    "size_policy": ("backbone",),
    "keypoint_scaling": ("official_int", "exact"),
    "source_sampling": ("bilinear_align_corners",),
    "prediction_point": ("top_left", "center"),
    "compute_dtype": ("float32", "float16", "bfloat16"),
    "threshold": ("strict", "inclusive"),
    "target_keypoint": ("scaled", "raw"),
    "four_choice_tie_break": ("first_presented",),
}
_REDUCTIONS = ("official", "keypoint")
# Knobs that change predictions; the rest only change scoring.
MATCHING_KNOBS = (
    "size_policy",
    "keypoint_scaling",
    "source_sampling",
    "prediction_point",
    "upsample",
    "soft_argmax",
    "soft_argmax_window",
    "soft_argmax_temperature",
    "geo_min_candidates",
    "compute_dtype",
    "four_choice_tie_break",
)


class ProtocolError(ValueError):
    """The protocol file is malformed; the message names the knob and the fix."""


@dataclass(frozen=True)
class ProtocolConfig:
    """Every knob of the zero-shot correspondence protocol (see assets/protocol.yaml)."""

    name: str = "correspondence_soco"
    size_policy: str = "backbone"
    keypoint_scaling: str = "official_int"
    source_sampling: str = "bilinear_align_corners"
    prediction_point: str = "top_left"
    upsample: bool = False
    soft_argmax: bool = False
    soft_argmax_window: int = 5
    soft_argmax_temperature: float = 0.04
    geo_min_candidates: int = 2
    compute_dtype: str = "float32"
    alphas: tuple[float, ...] = (0.05, 0.1, 0.15)
    headline_alpha: float = 0.1
    threshold: str = "strict"
    target_keypoint: str = "scaled"
    reductions: tuple[str, ...] = field(default=_REDUCTIONS)
    four_choice_tie_break: str = "first_presented"

    def __post_init__(self) -> None:
        for knob, allowed in _CHOICES.items():
            if getattr(self, knob) not in allowed:
                raise ProtocolError(
                    f"protocol knob {knob!r} = {getattr(self, knob)!r}: expected one of {list(allowed)}"
                )
        object.__setattr__(self, "alphas", tuple(float(a) for a in self.alphas))
        object.__setattr__(self, "reductions", tuple(self.reductions))
        if not self.alphas or any(not 0 < a < 1 for a in self.alphas):
            raise ProtocolError(f"protocol knob 'alphas' = {self.alphas}: give PCK alphas in (0, 1)")
        if not any(abs(a - self.headline_alpha) < 1e-12 for a in self.alphas):
            raise ProtocolError(
                f"protocol knob 'headline_alpha' = {self.headline_alpha} is not in alphas {self.alphas}"
            )
        bad = [r for r in self.reductions if r not in _REDUCTIONS]
        if bad or not self.reductions:
            raise ProtocolError(f"protocol knob 'reductions' = {self.reductions}: use a subset of {_REDUCTIONS}")
        if self.soft_argmax_window < 1 or self.soft_argmax_window % 2 == 0:
            raise ProtocolError(
                f"protocol knob 'soft_argmax_window' = {self.soft_argmax_window}: give an odd number of cells"
            )
        if self.soft_argmax_temperature <= 0:
            raise ProtocolError("protocol knob 'soft_argmax_temperature' must be > 0")
        if self.geo_min_candidates < 2:
            raise ProtocolError("protocol knob 'geo_min_candidates' must be >= 2 (SOC-geo needs a choice)")
        if self.upsample and self.soft_argmax:
            raise ProtocolError("protocol knobs 'upsample' and 'soft_argmax' are exclusive; enable one")

    def as_dict(self) -> dict[str, Any]:
        """The knobs as plain JSON-able values."""
        d = dataclasses.asdict(self)
        d["alphas"] = list(self.alphas)
        d["reductions"] = list(self.reductions)
        return d

    def version_hash(self) -> str:
        """A stable hash of every knob: changing any of them re-runs predictions and metrics."""
        return _hash(self.as_dict())

    def matching_hash(self) -> str:
        """A stable hash of the knobs that change predictions (scoring knobs excluded)."""
        d = self.as_dict()
        return _hash({k: d[k] for k in MATCHING_KNOBS})


def _hash(d: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()[:16]


def parse_protocol(doc: dict[str, Any], source: str = "protocol") -> ProtocolConfig:
    """Build and validate a ProtocolConfig from a YAML document (unknown knobs are an error)."""
    if not isinstance(doc, dict):
        raise ProtocolError(f"{source}: expected a mapping of protocol knobs at the top level")
    known = {f.name for f in dataclasses.fields(ProtocolConfig)}
    unknown = sorted(set(doc) - known)
    if unknown:
        raise ProtocolError(f"{source}: unknown protocol knobs {unknown}; known knobs are {sorted(known)}")
    try:
        return ProtocolConfig(**doc)
    except ProtocolError as e:
        raise ProtocolError(f"{source}: {e}") from None


def load_protocol(path: str | Path | None = None) -> ProtocolConfig:
    """Load the protocol config (default: assets/protocol.yaml)."""
    path = Path(path) if path is not None else DEFAULT_PROTOCOL_PATH
    try:
        with open(path) as f:
            doc = yaml.safe_load(f)
    except FileNotFoundError:
        raise ProtocolError(f"protocol file {path} does not exist") from None
    except yaml.YAMLError as e:
        raise ProtocolError(f"{path}: not valid YAML: {e}") from None
    return parse_protocol(doc, source=str(path))
