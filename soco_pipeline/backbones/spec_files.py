"""Spec files on disk (backbones and LVLMs): a folder's specs and hashes, a partition's file."""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Callable
from pathlib import Path


def file_hash(path: Path) -> str:
    """sha256 of a file's bytes (first 16 hex digits)."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16]


def scan_folder(
    folder: Path, load: Callable[[Path], object], version: Callable[[object], str] | None = None
) -> tuple[dict[str, str], dict[str, str]]:
    """A folder's spec files as {name: version} when `load` accepts them, else {name: error}."""
    valid, invalid = {}, {}
    for path in sorted(Path(folder).glob("*.yaml")):
        try:
            loaded = load(path)
        except Exception as e:  # noqa: BLE001 - any malformed spec is reported, not raised, by the sensor
            invalid[path.stem] = str(e)
            continue
        valid[path.stem] = version(loaded) if version else file_hash(path)
    return valid, invalid


def scan_specs(folder: Path) -> tuple[dict[str, str], dict[str, str]]:
    """A folder's backbone spec files as {name: spec_data_version} and {name: error}."""
    valid, invalid = scan_folder(folder, lambda path: _checked(str(path), file_hash(path)))
    return {name: spec_data_version(Path(folder) / f"{name}.yaml", h) for name, h in valid.items()}, invalid


def spec_problem(path: Path) -> str | None:
    """Why `checked_spec` refuses a backbone spec file (None: it is valid); checked once per file content."""
    try:
        _checked(str(path), file_hash(path))
    except Exception as e:  # noqa: BLE001 - any malformed spec is reported, not raised
        return str(e)
    return None


def spec_data_version(path: Path, content_hash: str | None = None) -> str:
    """A backbone spec's data version (metadata edits keep it); the file's hash when it does not load."""
    from soco_pipeline.backbones.reads import spec_computation_version

    version = content_hash or file_hash(path)
    spec = _spec_of(str(path), version)
    if spec is None:
        return version
    try:
        return spec_computation_version(spec)
    except OSError:
        return version


@functools.lru_cache(maxsize=256)
def _spec_of(path: str, content_hash: str):
    """The spec of a file, parsed once per file content (None when it does not load)."""
    from soco_pipeline.backbones.spec import load_spec

    try:
        return load_spec(path)
    except (ValueError, OSError):
        return None


@functools.lru_cache(maxsize=256)
def _checked(path: str, content_hash: str) -> None:
    """`checked_spec` once per file content: the sensor scans the folder every tick."""
    from soco_pipeline.backbones.validate import checked_spec

    checked_spec(path)


def spec_kind(path: str | Path) -> str | None:
    """The `kind:` a backbone spec file names, unvalidated; None when it does not parse or names none."""
    import yaml

    try:
        data = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError):
        return None
    kind = data.get("kind") if isinstance(data, dict) else None
    return kind if isinstance(kind, str) else None


def spec_names(folder: str | Path) -> set[str]:
    """The names (file stems) of the spec files present in a folder."""
    return {p.stem for p in Path(folder).glob("*.yaml")}


def partition_spec_file(folder: str, name: str, what: str, redo: str) -> Path:
    """`<folder>/<name>.yaml`, a partition's spec file; a missing file is an error naming the fix."""
    path = Path(folder) / f"{name}.yaml"
    if not path.exists():
        raise FileNotFoundError(
            f"{what} {name!r} has no spec file at {path}: its results stay queryable but it cannot be {redo}; "
            f"restore the file or delete the partition"
        )
    return path
