"""The typed TPIPS config (assets/tpips.yaml); a bad file is refused when loaded with `TpipsConfigError`
naming the file, each bad field and the fix (docs/tpips.md, "Config errors")."""

from __future__ import annotations

import string
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, model_validator

from soco_pipeline.config import ConfigModel, read_yaml, validate_doc

# the backbone capabilities TPIPS needs (the family contract): it renders its own images and reads dense maps
NEEDS = frozenset({"pixels", "dense_maps"})
DEFAULT_PATH = Path(__file__).resolve().parents[3] / "assets" / "tpips.yaml"

PositiveInt = Annotated[int, Field(gt=0)]
PositiveFloat = Annotated[float, Field(gt=0)]
Share = Annotated[float, Field(ge=0, le=1)]
# YAML gives lists; a tuple field takes one (lax), its items are still numbers
FloatPair = Annotated[tuple[float, float], Field(strict=False)]
IntPair = Annotated[tuple[int, int], Field(strict=False)]
# the 2AFC sources the generator knows; an official set may name others (listed in `afc.sources`)
GENERATED_SOURCES = ("editing", "compositing", "novel_view", "distortion")
OOO_FILE, AFC_FILE = "ooo.jsonl", "afc.jsonl"
# data seeds (docs/tpips.md): the design seeds were looked at while choosing the learned heads; report on others
DESIGN_SEEDS, REPORT_SEEDS = tuple(range(10)), tuple(range(100, 106))


class TpipsConfigError(ValueError):
    """A TPIPS config that cannot be used; the message names the file, the field and the fix."""


class SourceConfig(ConfigModel):
    """Where the items come from: `generated` or `official` (docs/tpips.md, "Real data")."""

    kind: Literal["generated", "official"] = "generated"
    # official: the .jsonl file, or the folder holding ooo.jsonl (and afc.jsonl); relative to the config's folder
    path: str | None = None
    # official: the folder the image paths are relative to (default: the folder of the file)
    image_root: str | None = None
    # official: the split of every line that names none (the release names none: its file is one split)
    split: str = "test"
    # official: who gave the votes (human for a real release); generated data is always simulated
    judgements: Literal["human", "simulated"] = "human"

    @model_validator(mode="after")
    def _path_given(self) -> SourceConfig:
        if self.kind == "official" and not self.path:
            raise ValueError(
                "source.kind official needs source.path: the released .jsonl file or the folder holding ooo.jsonl"
            )
        if self.kind == "generated" and (self.path or self.image_root):
            raise ValueError(
                "source.path and source.image_root are only read with source.kind official; drop them or set the kind"
            )
        return self

    @property
    def votes_are(self) -> str:
        """The `judgements` marker of every table made from this source."""
        return "simulated" if self.kind == "generated" else self.judgements


class SceneConfig(ConfigModel):
    """What the renderer may vary, and over which ranges."""

    shapes: Annotated[list[str], Field(min_length=2)]
    textures: Annotated[list[str], Field(min_length=2)]
    counts: Annotated[list[PositiveInt], Field(min_length=2)]
    size_range: FloatPair
    elevation_deg: float
    saturation: Share
    value: Share
    warmth_gain: Share
    n_backgrounds: PositiveInt

    @model_validator(mode="after")
    def _range(self) -> SceneConfig:
        lo, hi = self.size_range
        if not 0 < lo < hi <= 1:
            raise ValueError(f"scene.size_range must be 0 < min < max <= 1, got {list(self.size_range)}")
        return self


class TripletConfig(ConfigModel):
    """How many triplets, how many aspects each varies and by how much, and the split shares."""

    n: PositiveInt
    vary_min: PositiveInt
    vary_max: PositiveInt
    graded_fraction: Share
    min_delta: Share
    max_delta: Share
    graded_delta: Share
    splits: dict[str, Annotated[float, Field(ge=0)]]

    @model_validator(mode="after")
    def _consistent(self) -> TripletConfig:
        if self.vary_max < self.vary_min:
            raise ValueError(
                f"triplets.vary_max ({self.vary_max}) must be >= triplets.vary_min ({self.vary_min})"
            )
        if self.max_delta < self.min_delta:
            raise ValueError(
                f"triplets.max_delta ({self.max_delta}) must be >= triplets.min_delta ({self.min_delta})"
            )
        if "train" not in self.splits or "test" not in self.splits or sum(self.splits.values()) <= 0:
            raise ValueError(f"triplets.splits must name train and test with shares > 0, got {self.splits}")
        return self


class ObserverConfig(ConfigModel):
    """The simulated annotators' noisy-observer model (and, for every source, the panel size and pruning)."""

    n_annotators: PositiveInt = 5
    vote_mode: Literal["expected", "sampled"] = "expected"
    temperature: PositiveFloat
    noise_sd: Annotated[float, Field(ge=0)]
    cannot_tell_margin: PositiveFloat
    prune_cannot_tell: PositiveInt = 3


class AfcConfig(ConfigModel):
    """The 2AFC set: sources, degradation strengths, aspects asked per source (never "overall")."""

    n: Annotated[int, Field(ge=0)]
    sources: Annotated[list[str], Field(min_length=1)]
    blur_sigma: FloatPair
    jpeg_quality: IntPair
    blur_per_sigma: Annotated[float, Field(ge=0)]
    jpeg_per_unit: Annotated[float, Field(ge=0)]
    aspects: dict[str, Annotated[list[str], Field(min_length=1)]]

    @model_validator(mode="after")
    def _no_overall(self) -> AfcConfig:
        bad = sorted(s for s, asp in self.aspects.items() if "overall" in asp)
        if bad:
            raise ValueError(
                f"afc.aspects of {bad} list 'overall'; the paper's 2AFC has no overall aspect (appendix A.2): "
                "name the aspects each source is judged on"
            )
        return self


class FeaturesConfig(ConfigModel):
    """Input size of the derived specs, extra layers per backbone kind, backbones that do not apply."""

    input_size: PositiveInt
    # images per forward pass for the derived specs (None: the spec's own); not in spec_hash, so the cache
    # folders stay; the TPIPS renders are small, so larger batches than the specs' (set for SOCO's inputs) pay
    batch_size: PositiveInt | None = None
    layers: dict[str, list]


class LearnedConfig(ConfigModel):
    """Training of the late- and mid-fusion metrics."""

    seed: int
    aspect_dim: PositiveInt
    hidden: PositiveInt
    proj_dim: Annotated[int, Field(ge=0)]
    late_grid: PositiveInt = 1
    late_head: Literal["distance", "gated"] = "distance"
    mid_weights: Literal["signed", "squared"] = "signed"
    epochs: Annotated[int, Field(ge=0)]
    lbfgs_iter: PositiveInt = 10
    lr: PositiveFloat
    weight_decay: Annotated[float, Field(ge=0)]
    patience: PositiveInt
    tau_init: PositiveFloat
    tau_mid: PositiveFloat = 1.0
    learn_tau: bool


class RetrievalConfig(ConfigModel):
    """Aspect-conditioned and compositional retrieval."""

    overall_penalty: Annotated[float, Field(ge=0)] = 0.3
    top_k: PositiveInt
    queries: PositiveInt
    # compositional retrieval: each entry's i-th aspect is asked of the i-th query image (published: the scores
    # of the (query, aspect) pairs add up)
    compositions: list[list[str]] = Field(default_factory=list)


def _fields_of(template: str) -> set[str]:
    return {f for _, f, _, _ in string.Formatter().parse(template) if f is not None}


class LvlmPrompts(ConfigModel):
    """Prompt text of the LVLM baselines, each with one `{clause}` (`overall_clause` for overall)."""

    scale_max: PositiveInt
    clause: str = "in terms of {aspect}"
    overall_clause: str = "overall"
    pairwise_prompt: str
    triplet_prompt: str
    afc_prompt: str

    @model_validator(mode="after")
    def _placeholders(self) -> LvlmPrompts:
        if _fields_of(self.clause) != {"aspect"}:
            raise ValueError(f"lvlm.clause must hold exactly one {{aspect}}, got {self.clause!r}")
        for name in ("pairwise_prompt", "triplet_prompt", "afc_prompt"):
            if _fields_of(getattr(self, name)) != {"clause"}:
                raise ValueError(
                    f"lvlm.{name} must hold exactly one {{clause}} (filled with lvlm.clause or "
                    f"lvlm.overall_clause), got {getattr(self, name)!r}"
                )
        return self

    def ask(self, template: str, aspect: str) -> str:
        """The prompt `template` (one of the three) for one aspect."""
        clause = self.overall_clause if aspect == "overall" else self.clause.format(aspect=aspect)
        return " ".join(template.format(clause=clause).split())


class TpipsConfig(ConfigModel):
    """The whole family's config."""

    seed: int
    source: SourceConfig = Field(default_factory=SourceConfig)
    image_size: PositiveInt
    aspects: Annotated[list[str], Field(min_length=1)]
    overall_weights: dict[str, Annotated[float, Field(ge=0)]]
    scene: SceneConfig
    triplets: TripletConfig
    observer: ObserverConfig
    afc: AfcConfig
    features: FeaturesConfig
    baselines: dict[str, str] = Field(default_factory=dict)
    learned: LearnedConfig
    retrieval: RetrievalConfig
    lvlm: LvlmPrompts

    @model_validator(mode="after")
    def _vocabulary(self) -> TpipsConfig:
        if "overall" not in self.aspects:
            raise ValueError("'aspects' must include 'overall' (published: every triplet is asked it)")
        blank = [a for a in self.aspects if not a.strip()]
        if blank or len(set(self.aspects)) != len(self.aspects):
            raise ValueError(f"'aspects' must be distinct non-empty texts, got {self.aspects}")
        unknown = sorted({a for asp in self.afc.aspects.values() for a in asp} - set(self.aspects))
        if unknown:
            raise ValueError(f"afc.aspects name {unknown}, which are not in 'aspects' {self.aspects}")
        if self.source.split not in self.triplets.splits:
            raise ValueError(
                f"source.split {self.source.split!r} is not one of triplets.splits {sorted(self.triplets.splits)}"
            )
        if self.source.kind == "generated":
            missing = sorted(set(self.afc.sources) - set(self.afc.aspects))
            foreign = sorted(set(self.afc.sources) - set(GENERATED_SOURCES))
            if foreign:
                raise ValueError(
                    f"afc.sources {foreign} cannot be generated; the generator knows {list(GENERATED_SOURCES)}"
                )
            if missing:
                raise ValueError(f"afc.sources {missing} have no entry in afc.aspects; list their aspects")
        for comp in self.retrieval.compositions:
            if not 2 <= len(comp) <= self.retrieval.queries or set(comp) - set(self.aspects):
                raise ValueError(
                    f"retrieval.compositions entry {comp} must list 2 to retrieval.queries "
                    f"({self.retrieval.queries}) aspects of the vocabulary {self.aspects} (one per query image)"
                )
        return self

    def with_updates(self, **sections: dict) -> TpipsConfig:
        """A copy with some fields of some sections replaced (tests and benchmarks shrink the scale)."""
        doc = self.model_dump()
        for name, upd in sections.items():
            if isinstance(doc.get(name), dict) and isinstance(upd, dict):
                doc[name] = {**doc[name], **upd}
            else:
                doc[name] = upd
        return validate_doc(TpipsConfig, doc, "<TPIPS config update>", TpipsConfigError)


def parse_config(doc: object, source: str = "<TPIPS config>", base: Path | None = None) -> TpipsConfig:
    """Validate a parsed TPIPS config document; an official source's paths resolve against `base`."""
    cfg = validate_doc(TpipsConfig, doc, source, TpipsConfigError, allowed=TpipsConfig.model_fields)
    if cfg.source.kind == "official":

        def resolved(p: str) -> Path:
            q = Path(p).expanduser()
            return (base / q if not q.is_absolute() and base is not None else q).resolve()

        path = resolved(cfg.source.path)
        if not (path.is_file() or (path / OOO_FILE).is_file()):
            raise TpipsConfigError(
                f"{source}: field 'source.path': {path} holds no {OOO_FILE} and is not a .jsonl file; "
                f"point it at the released odd-one-out file or the folder of the official layout (docs/tpips.md, "
                f"'Real data')"
            )
        update = {"path": str(path)}
        if cfg.source.image_root is not None:
            root = resolved(cfg.source.image_root)
            if not root.is_dir():
                raise TpipsConfigError(
                    f"{source}: field 'source.image_root': {root} is not a folder; point it at the folder the image "
                    f"paths of the file are relative to"
                )
            update["image_root"] = str(root)
        cfg = cfg.model_copy(update={"source": cfg.source.model_copy(update=update)})
    return cfg


def load_config(path: str | Path | None = None) -> TpipsConfig:
    """Read and validate assets/tpips.yaml (or `path`); a bad file or field is named with the file."""
    p = Path(path) if path is not None else DEFAULT_PATH
    doc = read_yaml(p, TpipsConfigError, "TPIPS config file")
    return parse_config(doc, str(p), p.parent)
