"""The evaluation protocol (assets/protocol.yaml) as a frozen pydantic dataclass: `version_hash()` covers
every knob, `matching_hash()` only those that change predictions."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, model_validator
from pydantic.dataclasses import dataclass as pydantic_dataclass

from soco_pipeline.config import STRICT, read_yaml, validate_doc
from soco_pipeline.taxonomy import ASSETS_DIR

DEFAULT_PROTOCOL_PATH = ASSETS_DIR / "protocol.yaml"

# Knobs that change predictions; the rest only change scoring.
MATCHING_KNOBS = tuple(
    (
        "size_policy keypoint_scaling source_sampling prediction_point upsample soft_argmax "
        "soft_argmax_window soft_argmax_temperature geo_min_candidates compute_dtype "
        "four_choice_tie_break"
    ).split()
)
_REDUCTIONS = ("official", "keypoint")
Alpha = Annotated[float, Field(gt=0, lt=1)]


class ProtocolError(ValueError):
    """The protocol file is malformed; the message names the knob and the fix."""


@pydantic_dataclass(frozen=True, config=STRICT)
class ProtocolConfig:
    """Every knob of the correspondence protocol (assets/protocol.yaml), validated."""

    name: str = "correspondence_soco"
    size_policy: Literal["backbone"] = "backbone"
    keypoint_scaling: Literal["official_int", "exact"] = "official_int"
    source_sampling: Literal["bilinear_align_corners"] = "bilinear_align_corners"
    prediction_point: Literal["top_left", "center"] = "top_left"
    upsample: bool = False
    soft_argmax: bool = False
    soft_argmax_window: Annotated[int, Field(ge=1)] = 5
    soft_argmax_temperature: Annotated[float, Field(gt=0)] = 0.04
    geo_min_candidates: Annotated[int, Field(ge=2)] = 2  # SOC-geo needs a choice
    compute_dtype: Literal["float32", "float16", "bfloat16"] = "float32"
    alphas: Annotated[tuple[Alpha, ...], Field(min_length=1, strict=False)] = (0.05, 0.1, 0.15)
    headline_alpha: float = 0.1
    threshold: Literal["strict", "inclusive"] = "strict"
    target_keypoint: Literal["scaled", "raw"] = "scaled"
    reductions: Annotated[tuple[Literal["official", "keypoint"], ...], Field(min_length=1, strict=False)] = (
        _REDUCTIONS
    )
    four_choice_tie_break: Literal["first_presented"] = "first_presented"

    @model_validator(mode="after")
    def _consistent(self) -> ProtocolConfig:
        if not any(abs(a - self.headline_alpha) < 1e-12 for a in self.alphas):
            raise ValueError(
                f"knob 'headline_alpha' = {self.headline_alpha} is not in alphas {list(self.alphas)}"
            )
        if self.soft_argmax_window % 2 == 0:
            raise ValueError(
                f"knob 'soft_argmax_window' = {self.soft_argmax_window}: give an odd number of cells"
            )
        if self.upsample and self.soft_argmax:
            raise ValueError("knobs 'upsample' and 'soft_argmax' are exclusive; enable one")
        return self

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
    allowed = [f.name for f in dataclasses.fields(ProtocolConfig)]
    return validate_doc(ProtocolConfig, doc, source, ProtocolError, "protocol knobs", allowed=allowed)


def load_protocol(path: str | Path | None = None) -> ProtocolConfig:
    """Load the protocol config (default: assets/protocol.yaml)."""
    path = Path(path) if path is not None else DEFAULT_PROTOCOL_PATH
    return parse_protocol(read_yaml(path, ProtocolError, "protocol file"), source=str(path))
