"""The FG-BMK config (assets/fgbmk.yaml) as one typed pydantic model, resolved at the chosen scale."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

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
    optimizer: Literal["sgd", "adam"] = "sgd"
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
        "contrastive", "generative", "reconstruction", "supervised", "random", "classical", "oracle"
    ]
    text_aligned: bool = False  # trained against text (CLIP-like), or an LVLM's aligned visual tokens


class FindingsConfig(_Strict):
    """What the check of the paper's five findings needs to know about the backbones, and its thresholds."""

    paradigms: dict[str, Paradigm]  # fnmatch pattern of a spec name -> its paradigm (first match wins)
    min_above_chance: float = Field(default=2.0, gt=0)  # a probe counts if clean top-1 >= this x chance
    min_spread: float = Field(default=30.0, ge=0)  # finding 5: max - min per-class top-1, points

    def paradigm_of(self, backbone: str) -> Paradigm | None:
        """The first pattern matching the spec name, or None (unknown: left out of findings 1 and 2)."""
        import fnmatch

        return next((p for pat, p in self.paradigms.items() if fnmatch.fnmatchcase(backbone, pat)), None)


class DatasetConfig(_Strict):
    """A user's dataset in FG-BMK's machine-oriented layout, used instead of the embedded set."""

    folder: str  # the folder holding train.csv, test.csv (and classes.txt)
    image_root: str | None = None  # what the CSV paths are relative to (default: the folder)


class FgbmkConfig(_Strict):
    """The whole family's config at one scale (demo or full)."""

    scale: Literal["demo", "full"]
    seed: int
    dataset: DatasetConfig | None = None  # None: the embedded (simulated) set
    embedded: EmbeddedConfig
    global_features: GlobalInputPolicy
    linear_probe: TrainConfig
    retrieval: RetrievalConfig
    robustness: RobustnessConfig
    questions: QuestionConfig
    findings: FindingsConfig


def _resolve(node: Any, scale: str) -> Any:
    """Replace every {demo: a, full: b} mapping by the value at `scale`."""
    if isinstance(node, dict):
        if set(node) == set(SCALES):
            return _resolve(node[scale], scale)
        return {k: _resolve(v, scale) for k, v in node.items()}
    if isinstance(node, list):
        return [_resolve(v, scale) for v in node]
    return node


def parse_config(doc: dict, scale: str | None = None, source: str = "<fgbmk config>") -> FgbmkConfig:
    """Validate a config document; `scale` overrides the file's `scale` (demo | full)."""
    if not isinstance(doc, dict):
        raise ValueError(f"{source}: expected a mapping (scale, seed, embedded, global_features, ...)")
    scale = scale or doc.get("scale", "demo")
    if scale not in SCALES:
        raise ValueError(f"{source}: scale {scale!r} is not one of {list(SCALES)}")
    resolved = _resolve({**doc, "scale": scale}, scale)
    if "global_features" not in resolved:  # the run's shared policy (features/), unless the file has its own
        resolved["global_features"] = load_global_policy(scale).model_dump()
    try:
        return FgbmkConfig.model_validate(resolved)
    except ValidationError as e:
        raise ValueError(f"{source}: invalid FG-BMK config:\n{e}") from None


def load_config(path: str | Path | None = None, scale: str | None = None, **overrides: Any) -> FgbmkConfig:
    """The config at `path` (default assets/fgbmk.yaml) at `scale`; `overrides` replace top-level sections
    key by key (e.g. embedded={"images_per_subclass": {"train": 1, "test": 1}})."""
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
