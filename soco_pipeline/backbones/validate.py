"""Checks a spec must pass before it is accepted: its weights exist locally and the kind's `check_spec`."""

from __future__ import annotations

from pathlib import Path

from soco_pipeline.backbones.spec import (
    BackboneSpec,
    BackboneSpecError,
    BackboneWeightsError,
    load_spec,
    local_path,
)
from soco_pipeline.storage import PROJECT_ROOT


def _check_hf_cached(spec: BackboneSpec, repo: str, field: str = "") -> None:
    """BackboneWeightsError naming the spec (and `field`) when the Hugging Face repo is not in the local cache."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    from soco_pipeline.backbones.timm_backbone import hf_cache_hint

    try:
        snapshot_download(repo, local_files_only=True)
    except (LocalEntryNotFoundError, OSError, ValueError):
        raise BackboneWeightsError(
            f"backbone {spec.name!r} ({spec.source or 'the spec'}): {field}{hf_cache_hint(repo)}"
        ) from None


def check_weights(spec: BackboneSpec, project_root: Path = PROJECT_ROOT) -> None:
    """BackboneWeightsError when a local weights file is missing or an hf: repo is not in the local cache."""
    w = spec.weights
    if w in ("none", "packaged"):
        return
    if w.startswith("hf:"):
        return _check_hf_cached(spec, w[3:])
    path = local_path(w, project_root)
    if not path.is_file():
        raise BackboneWeightsError(
            f"backbone {spec.name!r} ({spec.source or 'the spec'}): weights file {path} does not exist; put the "
            f"checkpoint there or fix `weights:` (none | packaged | <local file> | hf:<repo id>)"
        )


def check_text_encoder(spec: BackboneSpec, project_root: Path = PROJECT_ROOT) -> None:
    """BackboneWeightsError when the spec's `text_encoder` folder is missing or its hf: repo not cached."""
    t = spec.text_encoder
    if t == "none":
        return
    if t.startswith("hf:"):
        return _check_hf_cached(spec, t[3:], "text_encoder: ")
    path = local_path(t, project_root)
    if not (path / "config.json").is_file():
        raise BackboneWeightsError(
            f"backbone {spec.name!r} ({spec.source or 'the spec'}): text_encoder folder {path} has no config.json; "
            f"put a transformers CLIP folder there or fix `text_encoder:` (none | <local folder> | hf:<repo id>)"
        )


def validate_for_add(
    spec: BackboneSpec, project_root: Path = PROJECT_ROOT, weights: bool = True, kind: bool = True
) -> None:
    """Every check of a parsed spec against the world (weights, then, with `kind`, its kind's `check_spec`)."""
    from soco_pipeline.backbones.kinds import check_spec

    if weights:
        check_weights(spec, project_root)
        check_text_encoder(spec, project_root)
    if kind:
        check_spec(spec)


def checked_spec(
    path: str | Path, project_root: Path = PROJECT_ROOT, weights: bool = True, kind: bool = True
) -> BackboneSpec:
    """Load a spec file and run every check on it: the one way a spec is accepted (errors name the fix).
    `kind=False` leaves out the kind's own check (for timm, importing timm: 3 s), for a file already accepted."""
    spec = load_spec(path)
    validate_for_add(spec, project_root, weights, kind)
    if spec.reference:
        from soco_pipeline.published_figures import PublishedTableError, check_reference, load_published

        try:
            check_reference(spec.reference, load_published(), f"{path}: field 'reference'")
        except PublishedTableError as e:
            raise BackboneSpecError(str(e)) from None
    return spec
