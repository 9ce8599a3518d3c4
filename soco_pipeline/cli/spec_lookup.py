"""Which spec file `soco run ARG` means: a path, or the name of a shipped preset; a name that is neither gets
the closest preset and spec names (difflib) and where the presets and their docs are."""

from __future__ import annotations

import difflib
from pathlib import Path

from soco_pipeline.storage import PROJECT_ROOT

# where specs ship: the backbone presets, the active backbone specs, the LVLM presets (README.md, docs/config.md)
SPEC_FOLDERS = ("assets/backbone_presets", "assets/backbones", "assets/lvlm_presets")
DOCS = "docs/config.md (sections 'Backbone specs' and 'LVLM specs')"


def shipped_specs(root: Path = PROJECT_ROOT) -> dict[str, Path]:
    """{name: path} of every shipped spec (SPEC_FOLDERS in order; the first folder naming a stem wins)."""
    out: dict[str, Path] = {}
    for folder in SPEC_FOLDERS:
        for path in sorted((root / folder).glob("*.yaml")):
            out.setdefault(path.stem, path)
    return out


def _shown(path: Path) -> str:
    """`path` relative to the working directory when inside it, else as it is."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def resolve_spec(arg: str, root: Path = PROJECT_ROOT) -> Path:
    """The spec file `arg` names (a file, or a shipped spec's name), else close names."""
    path = Path(arg)
    if path.is_file():
        return path
    shipped = shipped_specs(root)
    name = path.name.removesuffix(".yaml").removesuffix(".yml")
    if name in shipped and path.parent == Path("."):
        return shipped[name]
    # close names among the shipped specs and the files beside the one asked for
    candidates = dict(shipped)
    if path.parent.is_dir():
        candidates.update({p.stem: p for p in sorted(path.parent.glob("*.y*ml"))})
    close = difflib.get_close_matches(name, list(candidates), n=3, cutoff=0.6)
    hint = f"; did you mean {', '.join(_shown(candidates[c]) for c in close)}?" if close else ""
    folders = ", ".join(f"{f}/" for f in SPEC_FOLDERS)
    raise FileNotFoundError(
        f"no spec file {arg}{hint} Pass a backbone or LVLM spec YAML, or the name of a shipped one (in "
        f"{folders}; see {DOCS})"
    )
