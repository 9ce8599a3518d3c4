"""The SOCO-LVLM item protocol (assets/lvlm_protocol.yaml): item sample, marks, question texts."""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

from soco_pipeline.lvlm.specs import SETTINGS
from soco_pipeline.taxonomy import ASSETS_DIR

DEFAULT_PATH = ASSETS_DIR / "lvlm_protocol.yaml"
_COLOR = re.compile(r"#[0-9A-Fa-f]{6}")


class LvlmProtocolError(ValueError):
    """The LVLM protocol file is malformed; the message names the field and the fix."""


@dataclass(frozen=True)
class LvlmProtocol:
    """Validated SOCO-LVLM item settings."""

    name: str = "soco_lvlm"
    items_per_group: int = 20
    levels: tuple[str, ...] = ("intra", "cross")
    image_max_side: int = 768
    jpeg_quality: int = 95
    query_color: str = "#E23A3A"
    candidate_color: str = "#2F8F4E"
    outline_color: str = "#FFFFFF"
    dot_radius: float = 0.012
    outline_width: float = 0.004
    letter_size: float = 0.05
    option_text: str = "Point {letter}"
    questions: dict[str, str] = field(default_factory=dict)

    def version_hash(self) -> str:
        """Hash of every field (first 16 hex digits)."""
        return hashlib.sha256(json.dumps(asdict(self), sort_keys=True).encode()).hexdigest()[:16]

    def marks(self) -> dict[str, Any]:
        """The fields that decide how an image is marked (they key the render cache)."""
        keys = ("image_max_side", "jpeg_quality", "query_color", "candidate_color", "outline_color",
                "dot_radius", "outline_width", "letter_size")
        return {k: getattr(self, k) for k in keys}


def load_lvlm_protocol(path: str | Path | None = None) -> LvlmProtocol:
    """Read and validate the protocol file (default: assets/lvlm_protocol.yaml)."""
    path = Path(path) if path is not None else DEFAULT_PATH
    doc = yaml.safe_load(Path(path).read_text()) or {}
    if not isinstance(doc, dict):
        raise LvlmProtocolError(f"{path}: expected a mapping of fields")
    known = set(LvlmProtocol.__dataclass_fields__)
    unknown = sorted(set(doc) - known)
    if unknown:
        raise LvlmProtocolError(f"{path}: unknown field(s) {unknown}; allowed: {sorted(known)}")
    vals = dict(doc)
    if "levels" in vals:
        vals["levels"] = tuple(vals["levels"])
        if not set(vals["levels"]) <= {"intra", "cross"} or not vals["levels"]:
            raise LvlmProtocolError(f"{path}: 'levels' must list intra and/or cross, got {doc['levels']}")
    proto = LvlmProtocol(**vals)
    for key in ("query_color", "candidate_color", "outline_color"):
        if not _COLOR.fullmatch(str(getattr(proto, key))):
            raise LvlmProtocolError(f"{path}: {key!r} must be a #RRGGBB colour, got {getattr(proto, key)!r}")
    missing = [s for s in SETTINGS if not proto.questions.get(s)]
    if missing:
        raise LvlmProtocolError(f"{path}: 'questions' lacks the setting(s) {missing}; give one text per setting")
    for s in ("vis_desc", "desc"):
        if "{description}" not in proto.questions[s]:
            raise LvlmProtocolError(f"{path}: the {s} question must contain '{{description}}'")
    if "{letter}" not in proto.option_text:
        raise LvlmProtocolError(f"{path}: 'option_text' must contain '{{letter}}'")
    if proto.items_per_group < 0 or proto.image_max_side < 64 or not 1 <= proto.jpeg_quality <= 100:
        raise LvlmProtocolError(f"{path}: items_per_group >= 0, image_max_side >= 64, jpeg_quality in 1..100")
    return proto
