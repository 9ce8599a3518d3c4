"""The FG-BMK config (assets/fgbmk.yaml) as one typed pydantic model, resolved at the chosen scale."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from soco_pipeline.config import resolve_scale
from soco_pipeline.features.policy import GlobalInputPolicy, load_global_policy
from soco_pipeline.storage import PROJECT_ROOT

DEFAULT_CONFIG = PROJECT_ROOT / "assets" / "fgbmk.yaml"
SCALES = ("demo", "full")
LEVELS = ("superclass", "class", "subclass")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Split(_Strict):
    """Images per subclass in each split."""

    train: int = Field(ge=1)
    test: int = Field(ge=1)


class EmbeddedConfig(_Strict):
    """The simulated fine-grained set."""

    image_size: int = Field(ge=32)
    object_area: tuple[float, float]
    images_per_subclass: Split
    workers: int = Field(ge=1)
    subclasses: tuple[str, ...] | None = None  # None: all 100 taxonomy categories
    subclasses_per_class: int = Field(default=0, ge=0)  # keep the first n of each class (0: all)


class TrainConfig(_Strict):
    """The shared knobs of the linear probe and the retrieval projection (one grid of heads)."""

    learning_rates: tuple[float, ...]
    n_last_blocks: tuple[int, ...]
    avgpool: tuple[bool, ...]
    batch_size: int = Field(ge=1)
    optimizer: Literal["sgd", "adam"] = "adam"  # the release: Adam for the probe, SGD for retrieval
    momentum: float = 0.9
    weight_decay: float = 0.0
    epochs: int = Field(ge=1)
    epoch_length: int = Field(ge=1)

    @field_validator("n_last_blocks")
    @classmethod
    def _blocks(cls, v: tuple[int, ...]) -> tuple[int, ...]:
        if not v or any(n not in (1, 2) for n in v):
            raise ValueError(
                "n_last_blocks must be a non-empty subset of [1, 2] (the cache keeps two blocks)"
            )
        return v

    @property
    def max_iter(self) -> int:
        """Training iterations: epochs x epoch_length (the published 10 x 1000)."""
        return self.epochs * self.epoch_length


class RetrievalConfig(TrainConfig):
    """The projection head and the open-set evaluation."""

    optimizer: Literal["sgd", "adam"] = "sgd"  # eval_retrieval.py: SGD, momentum 0.9
    embed_dim: int = Field(ge=1)
    margin: float = 1.0
    top_k: int = Field(ge=1)
    gallery_cap: int = Field(ge=1)
    negative: Literal["uniform", "other_class"] = "uniform"


class RobustnessConfig(_Strict):
    """Perturbations of the input against the frozen backbone and its trained probe."""

    epsilons: tuple[float, ...]
    pgd_steps: int = Field(ge=1)
    pgd_step_scale: float = Field(gt=0)
    noise_sigmas: tuple[float, ...]
    max_images: int = Field(ge=0)
    levels: tuple[Literal["superclass", "class", "subclass"], ...]


class QuestionConfig(_Strict):
    """Question templates (published wording) and how many images get them."""

    level_words: dict[str, str]
    level_plurals: dict[str, str]
    n_choices: int = Field(ge=2)
    images_per_subclass: int = Field(ge=0)
    choice: tuple[str, ...]
    true_false: tuple[str, ...]
    short_answer: tuple[str, ...]
    attribute: tuple[str, ...]
    superclass_words: dict[str, str]


class Paradigm(_Strict):
    """How a backbone was trained (findings 1 and 2 compare these)."""

    paradigm: Literal[
        "contrastive",
        "generative",
        "reconstruction",
        "supervised",
        "specialist",
        "random",
        "classical",
        "oracle",
    ]
    text_aligned: bool = False  # trained against text (CLIP-like), or an LVLM's aligned visual tokens


class FindingsConfig(_Strict):
    """What the check of the paper's five findings needs to know about the backbones, and its thresholds."""

    paradigms: dict[str, Paradigm]  # fnmatch pattern of a spec name -> its paradigm (first match wins)
    min_above_chance: float = Field(default=2.0, gt=0)  # a probe counts if clean top-1 >= this x chance
    min_spread: float = Field(default=30.0, ge=0)  # finding 4 (knowledge bias): max - min per-class top-1
    alpha: float = Field(default=0.05, gt=0, lt=1)  # the knowledge-bias spread test's level
    simulations: int = Field(default=2000, ge=100)  # Monte Carlo draws of that test
    seed: int = 0  # its seed
    lvlm_choices: int = Field(default=4, ge=2)  # options of an LVLM choice question (chance = 100 / this)

    def paradigm_of(self, backbone: str) -> Paradigm | None:
        """The first pattern matching the spec name, or None (unknown: left out of findings 1 and 2)."""
        import fnmatch

        return next((p for pat, p in self.paradigms.items() if fnmatch.fnmatchcase(backbone, pat)), None)


class DatasetConfig(_Strict):
    """A user's dataset in FG-BMK's machine-oriented layout, used instead of the embedded set."""

    folder: str  # the folder holding train.csv, test.csv (and classes.txt)
    image_root: str | None = None  # what the CSV paths are relative to (default: the folder)


class SourceConfig(_Strict):
    """Where the family's data comes from: `generated` (the embedded set) or `official` (FG-BMK's layout)."""

    kind: Literal["generated", "official"] = "generated"
    folder: str | None = (
        None  # official: benchmark/machine-oriented/<dataset> (train.csv, test.csv, classes.txt)
    )
    image_root: str | None = None  # official: what the CSV / question image paths are relative to
    questions: str | None = None  # official: benchmark/human-oriented (its question files), optional
    dataset: str | None = None  # official: the dataset's name in the question tree (default: the folder's)

    @model_validator(mode="after")
    def _paths(self) -> SourceConfig:
        if self.kind == "generated":
            given = [k for k in ("folder", "image_root", "questions", "dataset") if getattr(self, k)]
            if given:
                raise ValueError(f"source kind 'generated' takes no {given}; set kind: official to read them")
            return self
        if not self.folder:
            raise ValueError(
                "source kind 'official' needs `folder`: FG-BMK's benchmark/machine-oriented/<dataset> "
                "(train.csv, test.csv, classes.txt)"
            )
        from soco_pipeline import storage

        missing = [f for f in ("train.csv", "test.csv") if not storage.exists(storage.join(self.folder, f))]
        if missing:
            raise ValueError(
                f"source folder {self.folder} has no {missing}; point it at FG-BMK's "
                "benchmark/machine-oriented/<dataset> folder"
            )
        if self.questions and not storage.exists(self.questions):
            raise ValueError(
                f"source questions {self.questions} does not exist; point it at FG-BMK's benchmark/human-oriented "
                "or leave it out"
            )
        return self

    @property
    def dataset_name(self) -> str:
        """The dataset's name (the question tree's folder): `dataset`, else the machine folder's name."""
        return self.dataset or str(self.folder).rstrip("/").rsplit("/", 1)[-1]


class FgbmkConfig(_Strict):
    """The whole family's config at one scale (demo or full)."""

    scale: Literal["demo", "full"]
    seed: int
    source: SourceConfig = SourceConfig()
    # The machine-oriented folder of an official source (derived from `source`; an older config may still
    # give it alone, which means source kind official with that folder). None: the generated set.
    dataset: DatasetConfig | None = None
    embedded: EmbeddedConfig
    global_features: GlobalInputPolicy
    linear_probe: TrainConfig
    retrieval: RetrievalConfig
    robustness: RobustnessConfig
    questions: QuestionConfig
    findings: FindingsConfig

    @model_validator(mode="before")
    @classmethod
    def _source_and_dataset(cls, doc: Any) -> Any:
        """One truth: an older config's `dataset` means source kind official; an official source fills it."""
        if not isinstance(doc, dict):
            return doc
        doc = dict(doc)
        src, ds = doc.get("source") or {"kind": "generated"}, doc.get("dataset")
        if isinstance(src, BaseModel):
            src = src.model_dump()
        if ds and src.get("kind", "generated") == "generated":
            ds = ds.model_dump() if isinstance(ds, BaseModel) else ds
            src = {"kind": "official", "folder": ds.get("folder"), "image_root": ds.get("image_root")}
        if src.get("kind") == "official" and src.get("folder"):
            doc["dataset"] = {"folder": src.get("folder"), "image_root": src.get("image_root")}
        doc["source"] = src
        return doc


def parse_config(doc: dict, scale: str | None = None, source: str = "<fgbmk config>") -> FgbmkConfig:
    """Validate a config document; `scale` overrides the file's `scale` (demo | full)."""
    if not isinstance(doc, dict):
        raise ValueError(f"{source}: expected a mapping (scale, seed, embedded, global_features, ...)")
    scale = scale or doc.get("scale", "demo")
    if scale not in SCALES:
        raise ValueError(f"{source}: scale {scale!r} is not one of {list(SCALES)}")
    resolved = resolve_scale({**doc, "scale": scale}, scale, SCALES)
    if "global_features" not in resolved:  # the run's shared policy (features/), unless the file has its own
        resolved["global_features"] = load_global_policy(scale).model_dump()
    try:
        return FgbmkConfig.model_validate(resolved)
    except ValidationError as e:
        raise ValueError(f"{source}: invalid FG-BMK config:\n{e}") from None


def load_config(path: str | Path | None = None, scale: str | None = None, **overrides: Any) -> FgbmkConfig:
    """The config at `path` (default assets/fgbmk.yaml) at `scale`; `overrides` update top-level sections."""
    path = Path(path) if path is not None else DEFAULT_CONFIG
    try:
        doc = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise FileNotFoundError(
            f"FG-BMK config {path} does not exist; copy assets/fgbmk.yaml there"
        ) from None
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(doc.get(key), dict):
            doc[key] = {**doc[key], **value}
        else:
            doc[key] = value
    return parse_config(doc, scale, str(path))
