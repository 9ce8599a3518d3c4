"""The SOCO-LVLM item protocol (assets/lvlm_protocol.yaml): item sample, marks, question texts."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, field
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, model_validator
from pydantic.dataclasses import dataclass as pydantic_dataclass

from soco_pipeline.config import STRICT, read_yaml, validate_doc
from soco_pipeline.lvlm.specs import SETTINGS
from soco_pipeline.taxonomy import ASSETS_DIR

DEFAULT_PATH = ASSETS_DIR / "lvlm_protocol.yaml"


class LvlmProtocolError(ValueError):
    """The LVLM protocol file is malformed; the message names the field and the fix."""


Colour = Annotated[str, Field(pattern=r"^#[0-9A-Fa-f]{6}$")]  # #RRGGBB
Fraction = Annotated[float, Field(gt=0, lt=1)]  # of the image's longer side


@pydantic_dataclass(frozen=True, config=STRICT)
class LvlmProtocol:
    """Validated SOCO-LVLM item settings (a pydantic dataclass: a bad value names its field)."""

    name: str = "soco_lvlm"
    items_per_group: Annotated[int, Field(ge=0)] = 20  # 0 = every item
    levels: Annotated[tuple[Literal["intra", "cross"], ...], Field(min_length=1, strict=False)] = (
        "intra",
        "cross",
    )
    image_max_side: Annotated[int, Field(ge=64)] = 768
    jpeg_quality: Annotated[int, Field(ge=1, le=100)] = 95
    query_color: Colour = "#E23A3A"
    candidate_color: Colour = "#2F8F4E"
    outline_color: Colour = "#FFFFFF"
    dot_radius: Fraction = 0.012
    outline_width: Fraction = 0.004
    letter_size: Fraction = 0.05
    option_text: str = "Point {letter}"
    questions: dict[str, str] = field(default_factory=dict)

    @model_validator(mode="after")
    def _texts(self) -> LvlmProtocol:
        missing = [s for s in SETTINGS if not self.questions.get(s)]
        if missing:
            raise ValueError(f"'questions' lacks the setting(s) {missing}; give one text per setting")
        for s in ("vis_desc", "desc"):
            if "{description}" not in self.questions[s]:
                raise ValueError(f"the {s} question must contain '{{description}}'")
        if "{letter}" not in self.option_text:
            raise ValueError("'option_text' must contain '{letter}'")
        return self

    def version_hash(self) -> str:
        """Hash of every field (first 16 hex digits)."""
        return hashlib.sha256(json.dumps(asdict(self), sort_keys=True).encode()).hexdigest()[:16]

    def marks(self) -> dict[str, Any]:
        """The fields that decide how an image is marked (they key the render cache)."""
        keys = (
            "image_max_side",
            "jpeg_quality",
            "query_color",
            "candidate_color",
            "outline_color",
            "dot_radius",
            "outline_width",
            "letter_size",
        )
        return {k: getattr(self, k) for k in keys}


def load_lvlm_protocol(path: str | Path | None = None) -> LvlmProtocol:
    """Read and validate the protocol file (default: assets/lvlm_protocol.yaml)."""
    path = Path(path) if path is not None else DEFAULT_PATH
    doc = read_yaml(path, LvlmProtocolError, "LVLM protocol file")
    return validate_doc(
        LvlmProtocol,
        {} if doc is None else doc,
        str(path),
        LvlmProtocolError,
        allowed=LvlmProtocol.__dataclass_fields__,
    )
