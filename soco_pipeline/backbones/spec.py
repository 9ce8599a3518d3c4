"""Backbone specs: one small YAML file per backbone, parsed into a frozen, validated dataclass.

A spec reads as plainly as OmniProbe's backbone configs::

    kind: timm                       # timm | diffusion | classical | oracle | packaged
    model: vit_base_patch14_dinov2   # timm name / diffusers id / sift / oracle_part / efficientnet_lite0
    weights: hf:timm/vit_base_patch14_dinov2.lvd142m   # none | packaged | <local path> | hf:<repo id>
    layer: -1                        # final block
    input: {nearest_multiple: 800}   # or {fixed_grid: 60}; add `resize: tensor` for the GPU resize
    normalisation: imagenet          # imagenet | clip | half | raw
    batch_size: 4
    device: auto                     # auto = CUDA when available, else CPU
    seed: 0
    # GPU options, each off by default (see GPU_OPTIONS): precision: bf16 | fp16 (autocast),
    # channels_last: true (convolutional kinds), compile: true (torch.compile)

The name is the file stem. Kind-specific fields (``layer``, ``t``, ``stride`` ...) are listed in
``KIND_FIELDS`` with their types and defaults; anything else is an error naming the file and field.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

# How a ViT's position embeddings are resized to the input grid (backbones/pos_embed.py does it).
POS_EMBED_MODES = ("auto", "dinov2_hub", "timm")

# Bump when a change in the extraction code changes the features a spec produces: every cache
# folder is keyed by spec_hash, which includes this constant, so old features are never reused.
# 2: the cache also stores the class token of timm ViTs. 3: the PIL resize is the default (input.resize),
# and a timm checkpoint is built at its own position-embedding grid.
FEATURE_CODE_VERSION = "3"

KINDS = ("timm", "diffusion", "classical", "oracle", "packaged")
NORMALISATIONS = ("imagenet", "clip", "half", "raw")
INPUT_POLICIES = ("nearest_multiple", "fixed_grid")
# input.resize: pil = the official scorer's PIL bicubic resize of the uint8 square (the default);
# tensor = F.interpolate on the float tensor (faster on a GPU; features move a little, see
# docs/preprocessing.md).
RESIZE_MODES = ("pil", "tensor")

COMMON_FIELDS: dict[str, tuple[type | tuple[type, ...], Any]] = {
    "name": (str, None),  # optional; must equal the file stem when given
    "kind": (str, None),
    "model": (str, None),
    "weights": (str, "none"),
    "input": (dict, None),
    "normalisation": (str, "imagenet"),
    "batch_size": (int, 1),
    "device": (str, "auto"),
    "seed": (int, 0),
    "description": (str, ""),
}

# Per kind: field -> (type, default). Defaults follow the official protocol / DIFT / OmniProbe.
KIND_FIELDS: dict[str, dict[str, tuple[type | tuple[type, ...], Any]]] = {
    # layer: block index (negative counts from the end; -1 = final block, no final norm).
    # pos_embed_interpolation: auto (dinov2_hub for DINOv2 models without registers, else timm) |
    # dinov2_hub (as the official torch.hub model) | timm (timm's antialiased resampling).
    "timm": {"layer": (int, -1), "pos_embed_interpolation": (str, "auto")},
    # DIFT-style Stable Diffusion features: up-block index, noise timestep, ensemble size, prompt
    # ("{category}" is replaced by the image's category; "" = the empty prompt).
    "diffusion": {
        "up_ft_index": (int, 1),
        "t": (int, 261),
        "ensemble": (int, 8),
        "prompt": (str, ""),
    },
    # Dense SIFT: grid stride and keypoint size (diameter) in input pixels.
    "classical": {"stride": (int, 8), "descriptor_size": ((int, float), 8.0)},
    # EfficientNet-Lite0 stages: "stride16" or "stride16+stride32" (upsampled and concatenated).
    "packaged": {"layer": (str, "stride16+stride32")},
    # Oracles: grid stride (input px), bump width (grid cells), noise floor level and channels.
    "oracle": {
        "stride": (int, 4),
        "sigma": ((int, float), 0.5),
        "noise": ((int, float), 0.05),
        "noise_channels": (int, 8),
        "concept_weight": ((int, float), 0.0),
    },
}

# Speed options (off by default). Each may change the features a little, so a spec that sets one gets
# its own spec_hash; left at its default it is not hashed, so no existing cache folder changes.
GPU_OPTIONS: dict[str, tuple[type | tuple[type, ...], Any]] = {
    "precision": (str, "fp32"),  # fp32 | bf16 | fp16: torch.autocast around the forward pass
    "channels_last": (bool, False),  # NHWC memory format for the models and the input batch
    "compile": (bool, False),  # torch.compile the backbone's forward (pays off over long runs)
}
PRECISIONS = ("fp32", "bf16", "fp16")
# Kinds with a torch model the options apply to; channels_last only helps convolutional models.
GPU_OPTION_KINDS = {
    "precision": ("timm", "diffusion", "packaged"),
    "channels_last": ("diffusion", "packaged"),
    "compile": ("timm", "diffusion", "packaged"),
}

POSITIVE_FIELDS = ("ensemble", "stride", "descriptor_size", "sigma", "noise", "noise_channels")

MODELS_BY_KIND = {
    "classical": ("sift",),
    "oracle": ("oracle_part", "oracle_concept"),
    "packaged": ("efficientnet_lite0",),
}
WEIGHTS_BY_KIND = {
    "classical": ("none",),
    "oracle": ("none",),
}


class BackboneSpecError(ValueError):
    """A backbone spec is malformed; the message names the file, the field and the fix."""


def input_size(policy: str, value: int, multiple: int) -> int:
    """The input side S: the multiple of `multiple` nearest `value` (nearest_multiple; 800 -> 798 for
    /14) or `value` grid cells (fixed_grid; 60 -> 840 for /14)."""
    if policy == "fixed_grid":
        return value * multiple
    if policy == "nearest_multiple":
        return max(1, int(value / multiple + 0.5)) * multiple
    raise ValueError(f"unknown input policy {policy!r}; use nearest_multiple or fixed_grid")


@dataclass(frozen=True)
class InputPolicy:
    """How the square input side S is chosen (nearest multiple of the stride, or a fixed grid) and how
    the padded square is resized to it (`resize`: pil, the official path, or tensor)."""

    policy: str
    value: int
    resize: str = "pil"

    def size(self, multiple: int) -> int:
        """The input side S for a backbone whose grid cell is `multiple` input pixels.

        nearest_multiple: the multiple of `multiple` nearest to `value` (800 -> 798 for /14, 800 for
        /16; halves round up); fixed_grid: `value` cells, S = value * multiple (60 -> 840 for /14).
        """
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
            **{k: getattr(self, k) for k, (_t, d) in GPU_OPTIONS.items() if getattr(self, k) != d},
        }


def _type_name(t: type | tuple[type, ...]) -> str:
    if isinstance(t, tuple):
        return " or ".join(x.__name__ for x in t)
    return t.__name__


def _check_type(src: str, key: str, value: Any, expected: type | tuple[type, ...]) -> Any:
    types = expected if isinstance(expected, tuple) else (expected,)
    # bool is an int subclass in Python; a spec saying `seed: true` is a mistake.
    if (isinstance(value, bool) and bool not in types) or not isinstance(value, types):
        raise BackboneSpecError(
            f"{src}: field {key!r} must be {_type_name(expected)}, got {value!r} "
            f"({type(value).__name__}); fix the value in the spec file"
        )
    return float(value) if float in types and int in types else value


def parse_spec(doc: Any, name: str, source: str = "<spec>") -> BackboneSpec:
    """Validate a spec document (the parsed YAML) and return the BackboneSpec."""
    src = source
    if not isinstance(doc, dict):
        raise BackboneSpecError(f"{src}: expected a mapping of fields (kind, model, weights, input ...)")
    if not re.fullmatch(r"[A-Za-z0-9_.\-]+", name):
        raise BackboneSpecError(
            f"{src}: backbone name {name!r} (the file stem) may only hold letters, digits, '_', '-', '.'"
        )
    kind = doc.get("kind")
    if kind not in KINDS:
        raise BackboneSpecError(f"{src}: field 'kind' is {kind!r}; it must be one of {list(KINDS)}")
    allowed = {**COMMON_FIELDS, **GPU_OPTIONS, **KIND_FIELDS[kind]}
    unknown = sorted(set(doc) - set(allowed))
    if unknown:
        raise BackboneSpecError(
            f"{src}: unknown field(s) {unknown} for kind {kind!r}; allowed fields are {sorted(allowed)}"
        )
    for req in ("model", "input"):
        if doc.get(req) is None:
            raise BackboneSpecError(f"{src}: field {req!r} is missing; every backbone spec needs one")
    vals: dict[str, Any] = {}
    for key, (typ, default) in allowed.items():
        vals[key] = _check_type(src, key, doc[key], typ) if doc.get(key) is not None else default

    if vals["name"] is not None and vals["name"] != name:
        raise BackboneSpecError(
            f"{src}: field 'name' is {vals['name']!r} but the file stem is {name!r}; the name is the file "
            f"stem, so rename the file or drop the field"
        )
    inp = dict(vals["input"])
    resize = inp.pop("resize", "pil")
    if len(inp) != 1 or next(iter(inp)) not in INPUT_POLICIES:
        raise BackboneSpecError(
            f"{src}: field 'input' must be one of {{nearest_multiple: <px>}} or {{fixed_grid: <cells>}}, "
            f"optionally with resize: pil | tensor, got {vals['input']!r}"
        )
    if resize not in RESIZE_MODES:
        raise BackboneSpecError(
            f"{src}: field 'input.resize' is {resize!r}; use one of {list(RESIZE_MODES)} (pil = the official "
            f"preprocessing, tensor = the faster GPU resize)"
        )
    policy, value = next(iter(inp.items()))
    _check_type(src, f"input.{policy}", value, int)
    if value <= 0:
        raise BackboneSpecError(f"{src}: field 'input.{policy}' must be positive, got {value}")
    if vals["normalisation"] not in NORMALISATIONS:
        raise BackboneSpecError(
            f"{src}: field 'normalisation' is {vals['normalisation']!r}; use one of {list(NORMALISATIONS)}"
        )
    for key in ("batch_size",):
        if vals[key] <= 0:
            raise BackboneSpecError(f"{src}: field {key!r} must be positive, got {vals[key]}")
    if not re.fullmatch(r"auto|cpu|cuda(:\d+)?|mps", vals["device"]):
        raise BackboneSpecError(f"{src}: field 'device' is {vals['device']!r}; use auto, cpu, cuda or cuda:N")
    model = vals["model"]
    if kind in MODELS_BY_KIND and model not in MODELS_BY_KIND[kind]:
        raise BackboneSpecError(
            f"{src}: field 'model' is {model!r}; kind {kind!r} offers {list(MODELS_BY_KIND[kind])}"
        )
    weights = vals["weights"].strip()
    if kind in WEIGHTS_BY_KIND and weights not in WEIGHTS_BY_KIND[kind]:
        raise BackboneSpecError(f"{src}: field 'weights' must be 'none' for kind {kind!r} (got {weights!r})")
    if weights == "packaged" and kind != "packaged":
        raise BackboneSpecError(f"{src}: weights 'packaged' only exists for kind 'packaged'")
    if weights.startswith("hf:") and not re.fullmatch(r"hf:[\w.\-]+(/[\w.\-]+)?", weights):
        raise BackboneSpecError(f"{src}: field 'weights' {weights!r} is not 'hf:<owner>/<repo>'")
    for key in KIND_FIELDS[kind]:
        v = vals[key]
        if key in POSITIVE_FIELDS and v <= 0:
            raise BackboneSpecError(f"{src}: field {key!r} must be positive, got {v}")
        if key in ("up_ft_index", "t") and v < 0:
            raise BackboneSpecError(f"{src}: field {key!r} must be >= 0, got {v}")
    if kind == "timm" and vals["pos_embed_interpolation"] not in POS_EMBED_MODES:
        raise BackboneSpecError(
            f"{src}: field 'pos_embed_interpolation' is {vals['pos_embed_interpolation']!r}; use one of "
            f"{list(POS_EMBED_MODES)}"
        )
    if vals["precision"] not in PRECISIONS:
        raise BackboneSpecError(
            f"{src}: field 'precision' is {vals['precision']!r}; use one of {list(PRECISIONS)} (fp32 = no autocast)"
        )
    for key, (_typ, default) in GPU_OPTIONS.items():
        if vals[key] != default and kind not in GPU_OPTION_KINDS[key]:
            raise BackboneSpecError(
                f"{src}: field {key!r} does not apply to kind {kind!r} (only {list(GPU_OPTION_KINDS[key])}); "
                f"drop it from the spec"
            )
    if kind == "packaged" and vals["layer"] not in ("stride16", "stride16+stride32"):
        raise BackboneSpecError(
            f"{src}: field 'layer' is {vals['layer']!r}; use 'stride16' or 'stride16+stride32'"
        )
    return BackboneSpec(
        name=name,
        kind=kind,
        model=model,
        weights=weights,
        input=InputPolicy(policy, value, resize),
        normalisation=vals["normalisation"],
        batch_size=vals["batch_size"],
        device=vals["device"],
        seed=vals["seed"],
        options=tuple((k, vals[k]) for k in KIND_FIELDS[kind]),
        description=vals["description"],
        source=str(source),
        precision=vals["precision"],
        channels_last=vals["channels_last"],
        compile=vals["compile"],
    )


def load_spec(path: str | Path) -> BackboneSpec:
    """Load and validate one backbone spec file; its name is the file stem."""
    path = Path(path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise BackboneSpecError(f"backbone spec {path} does not exist") from None
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise BackboneSpecError(f"{path}: not valid YAML ({e}); fix the syntax") from None
    return parse_spec(doc, name=path.stem, source=str(path))


def spec_hash(spec: BackboneSpec) -> str:
    """A short hash of what determines the features: the normalised spec and FEATURE_CODE_VERSION.

    Name, device, batch size and description are left out: they do not change the features (the
    cache folder is already per backbone name).
    """
    d = spec.to_dict()
    for k in ("name", "device", "batch_size"):
        d.pop(k)
    payload = json.dumps({"spec": d, "code": FEATURE_CODE_VERSION}, sort_keys=True, default=str)
    return hashlib.sha256(payload.encode()).hexdigest()[:16]
