"""Backbones: specs (assets/backbones/*.yaml), the common interface, and one module per kind."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from soco_pipeline.backbones.spec import (
    FEATURE_CODE_VERSION,
    BackboneSpec,
    BackboneSpecError,
    BackboneWeightsError,
    InputPolicy,
    load_spec,
    parse_spec,
    spec_hash,
)
from soco_pipeline.storage import PROJECT_ROOT

if TYPE_CHECKING:
    from soco_pipeline.backbones.base import Backbone, BackboneContext

# The torch-backed names load on first use: importing torch costs every process about 2 s of CPU.
_FROM_BASE = {"Backbone", "BackboneContext", "as_context", "resolve_device"}


def __getattr__(name: str):
    if name in _FROM_BASE:
        from soco_pipeline.backbones import base

        return getattr(base, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


ACTIVE_SPECS_DIR = PROJECT_ROOT / "assets" / "backbones"
PRESETS_DIR = PROJECT_ROOT / "assets" / "backbone_presets"

__all__ = [
    "ACTIVE_SPECS_DIR",
    "FEATURE_CODE_VERSION",
    "PRESETS_DIR",
    "Backbone",
    "BackboneContext",
    "BackboneSpec",
    "BackboneSpecError",
    "BackboneWeightsError",
    "InputPolicy",
    "as_context",
    "build_backbone",
    "list_specs",
    "load_spec",
    "parse_spec",
    "resolve_device",
    "spec_hash",
]


def list_specs(folder: str | Path | None = None) -> dict[str, BackboneSpec]:
    """Every *.yaml spec in `folder` (default assets/backbones/, the active set), by name, sorted."""
    folder = Path(folder) if folder is not None else ACTIVE_SPECS_DIR
    if not folder.is_dir():
        raise BackboneSpecError(f"backbone spec folder {folder} does not exist")
    specs = {}
    for path in sorted([*folder.glob("*.yaml"), *folder.glob("*.yml")]):
        spec = load_spec(path)
        if spec.name in specs:
            raise BackboneSpecError(f"{path}: a backbone named {spec.name!r} is already defined in {folder}")
        specs[spec.name] = spec
    return specs


def build_backbone(spec: BackboneSpec, context: BackboneContext | dict | None = None) -> Backbone:
    """Instantiate the backbone a spec describes (weights loaded, eval mode)."""
    from soco_pipeline.backbones.base import as_context
    from soco_pipeline.backbones.kinds import backbone_class

    return backbone_class(spec.kind)(spec, as_context(context))
