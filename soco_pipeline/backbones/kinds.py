"""The backbone-kind registry: each `kind:`'s module (imported on first use) and capabilities (as data)."""

from __future__ import annotations

import dataclasses
import importlib
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from soco_pipeline.backbones.base import Backbone
    from soco_pipeline.backbones.spec import BackboneSpec

KIND_MODULES = {
    "timm": "soco_pipeline.backbones.timm_backbone",
    "diffusion": "soco_pipeline.backbones.diffusion",
    "classical": "soco_pipeline.backbones.classical",
    "packaged": "soco_pipeline.backbones.packaged",
    "oracle": "soco_pipeline.backbones.oracle",
}

# What a backbone kind can offer a task family:
CAPABILITIES = {
    "pixels": "reads the image pixels (any image set; attacks can perturb them)",
    "dense_maps": "a dense feature map per image",
    "global_features": "a global feature per image (class tokens, or the dense map's mean)",
    "part_oracle": "reads the SOCO part maps of the embedded data set instead of pixels",
    "blocks": "its model is read block by block: a `layer:` option picks the block or stage",
}
# What each built-in kind offers (its class's `capabilities` must agree; a plug-in kind's class declares them)
MODEL = frozenset({"pixels", "dense_maps", "global_features"})
KIND_CAPABILITIES = {
    "timm": MODEL | {"blocks"},
    "diffusion": MODEL,
    "classical": MODEL,
    "packaged": MODEL | {"blocks"},
    "oracle": frozenset({"dense_maps", "global_features", "part_oracle"}),
}

# How the global-feature extractor reads a kind's model (none: the mean of its dense map in every part).
GLOBAL_READOUTS = {
    "class_tokens": "the last two blocks' class tokens and the last block's patch-token mean (a ViT)",
    "cnn_stages": "the last stage's average and the pooled pre-logits embedding (a CNN)",
}
KIND_GLOBAL_READOUT = {"timm": "class_tokens", "packaged": "cnn_stages"}

# The built-in kinds with a `check_spec`; accepting a spec of another kind imports no torch.
KIND_SPEC_CHECKS = frozenset({"timm"})

_REGISTERED: dict[str, type[Backbone]] = {}
B = TypeVar("B")


def register_kind(kind: str):
    """Class decorator: make a Backbone subclass the implementation of `kind:`."""

    def register(cls: B) -> B:
        options = getattr(cls, "Options", None)
        annotation = options.model_fields["kind"].annotation if options is not None else None
        if getattr(annotation, "__args__", None) != (kind,):
            raise TypeError(
                f"{cls.__name__}.Options must be a SpecFields subclass with kind: Literal[{kind!r}]"
            )
        unknown = sorted(set(getattr(cls, "capabilities", ())) - set(CAPABILITIES))
        if unknown:
            raise TypeError(f"{cls.__name__}.capabilities names {unknown}; known are {sorted(CAPABILITIES)}")
        if cls.capabilities != KIND_CAPABILITIES.get(kind, cls.capabilities):
            raise TypeError(f"{cls.__name__}.capabilities differ from KIND_CAPABILITIES[{kind!r}]")
        readout = cls.global_readout
        if readout and readout not in GLOBAL_READOUTS:
            raise TypeError(
                f"{cls.__name__}.global_readout is {readout!r}; known are {sorted(GLOBAL_READOUTS)}"
            )
        if kind in KIND_MODULES and readout != KIND_GLOBAL_READOUT.get(kind, ""):
            raise TypeError(f"{cls.__name__}.global_readout differs from KIND_GLOBAL_READOUT for {kind!r}")
        _REGISTERED[kind] = cls
        return cls

    return register


def kinds() -> list[str]:
    """Every kind a spec may name, sorted."""
    return sorted(set(KIND_MODULES) | set(_REGISTERED))


def backbone_class(kind: str) -> type[Backbone]:
    """The Backbone subclass of `kind` (imports its module on first use)."""
    if kind not in _REGISTERED and kind in KIND_MODULES:
        importlib.import_module(KIND_MODULES[kind])
    if kind not in _REGISTERED:
        raise KeyError(f"unknown backbone kind {kind!r}; known kinds are {kinds()}")
    return _REGISTERED[kind]


# The built-in kinds' checks that passed in this process, by spec: a timm check builds the model on `meta`
# (0.3 s) and reads nothing but the spec and timm's registry, and every step of a model's run loads its spec.
_PASSED: set[str] = set()


def check_spec(spec: BackboneSpec) -> None:
    """The spec's kind's own `check_spec`; a built-in kind outside KIND_SPEC_CHECKS imports nothing for it.
    A built-in kind's check that passed for this spec in this process is not run again."""
    if spec.kind in KIND_SPEC_CHECKS and spec.kind in KIND_MODULES:
        key = repr(dataclasses.replace(spec, source=""))  # `soco run`'s file, then the registered copy
        if key not in _PASSED:
            backbone_class(spec.kind).check_spec(spec)
            _PASSED.add(key)
    elif spec.kind not in KIND_MODULES:
        backbone_class(spec.kind).check_spec(spec)


def capabilities(kind: str) -> frozenset[str]:
    """What a backbone of `kind` offers the task families (keys of CAPABILITIES; no kind module imported)."""
    return KIND_CAPABILITIES.get(kind) or backbone_class(kind).capabilities


def global_readout(kind: str) -> str:
    """How the global extractor reads `kind`: a key of GLOBAL_READOUTS, or "" (the mean of its dense map)."""
    if kind in KIND_MODULES or kind not in _REGISTERED:
        return KIND_GLOBAL_READOUT.get(kind, "")
    return _REGISTERED[kind].global_readout


def missing_capabilities(kind: str, needs: frozenset[str] | set[str]) -> list[str]:
    """The capabilities in `needs` that a backbone of `kind` lacks, sorted (empty: it applies)."""
    return sorted(set(needs) - capabilities(kind))


def per_kind(table: dict[str, B], kind: str, capability: str, where: str) -> B | None:
    """A family's choice for `kind` from `table`: None without `capability`; a gap is an error."""
    if capability in capabilities(kind) and kind not in table:
        raise ValueError(f"backbone kind {kind!r} offers {capability!r}: give it an entry in {where}")
    return table[kind] if capability in capabilities(kind) else None


def unregister_kind(kind: str) -> None:
    """Forget a kind registered outside KIND_MODULES (a plug-in or a test's toy kind)."""
    _REGISTERED.pop(kind, None)
