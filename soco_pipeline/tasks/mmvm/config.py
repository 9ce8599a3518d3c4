"""The family's one typed config (assets/mmvm.yaml), validated with pydantic."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from soco_pipeline.storage import PROJECT_ROOT
from soco_pipeline.tasks.mmvm.cues import CUES

DEFAULT_CONFIG = PROJECT_ROOT / "assets" / "mmvm.yaml"
MAX_CANDIDATES = 25  # the reference offers at most 25 lettered IDs (A-Y) plus the None option


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Cases(_Strict):
    """Cases per split."""

    train: int = Field(ge=1)
    test: int = Field(ge=1)


class Frame(_Strict):
    """Frame size in pixels."""

    width: int = Field(ge=96)
    height: int = Field(ge=96)


class Candidates(_Strict):
    """Candidates per case (inclusive range) and the published subset counts."""

    total: tuple[int, int]
    counts: tuple[int, ...] = (4, 8, 12)

    @field_validator("total")
    @classmethod
    def _range(cls, v):
        if not 2 <= v[0] <= v[1] <= MAX_CANDIDATES:
            raise ValueError(
                f"candidates.total must be [lo, hi] with 2 <= lo <= hi <= {MAX_CANDIDATES}, got {v}"
            )
        return v


class JudgeConfig(_Strict):
    """The optional LLM judge of LVLM answers (off by default): a published mode and an LVLM spec file."""

    mode: Literal["off", "matcher", "yes_no"] = "off"
    spec: str | None = None

    @model_validator(mode="after")
    def _spec_when_on(self):
        if self.mode != "off" and not self.spec:
            raise ValueError(
                f"judge.mode {self.mode!r} needs judge.spec: an LVLM spec file (any OpenAI-compatible "
                "server), e.g. assets/lvlms/<judge>.yaml"
            )
        return self

    def spec_path(self) -> Path | None:
        """The judge's spec file (relative paths from the project root), or None when off."""
        if self.mode == "off" or not self.spec:
            return None
        path = Path(self.spec)
        return path if path.is_absolute() else PROJECT_ROOT / path


class NoneRuleConfig(_Strict):
    """How a feature backbone answers "None of the above" (see scoring.py and docs/mmvm.md)."""

    mode: Literal["fitted", "fixed", "never"] = "fitted"
    threshold: float | None = Field(default=None, ge=-1.0, le=1.0)

    @model_validator(mode="after")
    def _threshold_iff_fixed(self):
        if (self.mode == "fixed") != (self.threshold is not None):
            raise ValueError(
                "none_rule.threshold is given exactly when none_rule.mode is 'fixed' "
                f"(got mode {self.mode!r}, threshold {self.threshold!r})"
            )
        return self


class SourceConfig(_Strict):
    """Where the scored items come from: `generated`, `match_bench` or `vlmevalkit` (docs/mmvm.md)."""

    kind: Literal["generated", "match_bench", "vlmevalkit"] = "generated"
    path: str | None = None
    tsv: str | None = None  # match_bench: another TSV than <path>/mllm_match_eval_full.tsv

    @model_validator(mode="after")
    def _path_when_imported(self):
        if (self.kind == "generated") != (self.path is None):
            raise ValueError(
                f"source.path is given exactly when source.kind is not 'generated' (got kind {self.kind!r}, "
                f"path {self.path!r}); match_bench: the folder holding match_bench/ and "
                "mllm_match_eval_full.tsv; vlmevalkit: the MMVMBench.tsv file"
            )
        if self.tsv is not None and self.kind != "match_bench":
            raise ValueError(f"source.tsv is for kind match_bench only (got kind {self.kind!r})")
        if self.path is not None and "://" not in self.path:
            path = self.resolved()
            need = {"match_bench": path / "match_bench", "vlmevalkit": path}[self.kind]
            if not need.exists():
                raise ValueError(
                    f"source.path {self.path!r}: {need} does not exist; "
                    + (
                        "a match_bench source is the folder holding match_bench/ and mllm_match_eval_full.tsv"
                        if self.kind == "match_bench"
                        else "a vlmevalkit source is VLMEvalKit's MMVMBench.tsv"
                    )
                )
        return self

    def resolved(self) -> Path:
        """The source path (relative paths from the project root)."""
        path = Path(str(self.path))
        return path if path.is_absolute() else PROJECT_ROOT / path

    def uri(self) -> str:
        """The source path as the readers take it (an fsspec URL stays as written)."""
        return str(self.path) if "://" in str(self.path) else str(self.resolved())


class MmvmConfig(_Strict):
    """Generator and scoring settings of the MMVM family (see assets/mmvm.yaml for each field)."""

    seed: int = 0
    cases: Cases
    frame: Frame
    candidates: Candidates
    query_absent_share: float = Field(ge=0.0, le=1.0)
    cue_sets: tuple[tuple[int, ...], ...]
    families: dict[str, tuple[str, ...]]
    landmark_category: str
    partner_categories: tuple[str, ...]
    colours: dict[str, tuple[int, int, int]]
    sizes: dict[str, float]
    texts: tuple[str, ...]
    markers: tuple[str, ...]
    orientation_gap_deg: float = Field(gt=0, le=180)
    view_change_deg: tuple[float, float]
    none_rule: NoneRuleConfig = NoneRuleConfig()
    judge: JudgeConfig = JudgeConfig()
    source: SourceConfig = SourceConfig()

    @model_validator(mode="after")
    def _consistent(self):
        bad = [s for s in self.cue_sets if not s or any(c not in CUES for c in s)]
        if bad:
            raise ValueError(f"cue_sets {bad}: every set lists codes 1-8")
        if min(len(self.colours), len(self.texts), len(self.markers), len(self.partner_categories)) < 2:
            raise ValueError("colours, texts, markers and partner_categories need at least 2 values each")
        if set(self.sizes) != {"normal", "small", "large"}:
            raise ValueError(f"sizes must name normal, small and large, got {sorted(self.sizes)}")
        if any(len(v) < 2 for v in self.families.values()):
            raise ValueError("every family lists at least 2 categories (SP distractors are the others)")
        for m in self.markers:
            kind, _, colour = m.partition(":")
            if kind not in ("sticker", "stripe") or not colour:
                raise ValueError(f"marker {m!r} must be sticker:<colour> or stripe:<colour>")
        return self

    def version_hash(self) -> str:
        """A short hash of the whole config (code versions of the assets that depend on it)."""
        digest = hashlib.sha256(json.dumps(self.model_dump(mode="json"), sort_keys=True).encode())
        return digest.hexdigest()[:12]


def load_config(path: str | Path | None = None) -> MmvmConfig:
    """Read and validate the MMVM config; a clear error names the file and the field."""
    path = Path(path or DEFAULT_CONFIG)
    try:
        doc = yaml.safe_load(path.read_text())
        return MmvmConfig.model_validate(doc)
    except Exception as e:  # pydantic.ValidationError, yaml.YAMLError, OSError
        raise ValueError(f"{path}: invalid MMVM config: {e}") from None
