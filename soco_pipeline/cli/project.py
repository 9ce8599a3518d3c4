"""The Makefile's defaults for a `soco` command run from any directory of the project: DAGSTER_HOME=<root>/
storage/dagster and SOCO_STORAGE=<root>/storage, the root found from the working directory (never
`~/dagster_home`); dagster.yaml written from the template when missing or naming another storage root."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from soco_pipeline.settings import default_storage_root, environment, variable
from soco_pipeline.storage import PROJECT_ROOT, is_remote

MARKERS = ("pyproject.toml", "workspace.yaml")
PROJECT_NAME = 'name = "soco_pipeline"'
MAKEFILE_MARK = "The Makefile copies this file"


@dataclass(frozen=True)
class ProjectEnvironment:
    """The project root, the storage root and DAGSTER_HOME a command uses, and how each was chosen."""

    root: Path
    storage: str
    dagster_home: Path
    how: dict[str, str]


def find_project_root(start: Path | None = None) -> Path:
    """The nearest project root at or above `start`, else the package's checkout."""
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if all((folder / m).is_file() for m in MARKERS) and PROJECT_NAME in (folder / MARKERS[0]).read_text():
            return folder
    return PROJECT_ROOT


def resolve_storage(text: str | None, root: Path, cwd: Path | None = None) -> tuple[str, str]:
    """The storage root for a SOCO_STORAGE value and how it was chosen."""
    if not text:
        return str(root / "storage"), "default <project>/storage"
    if is_remote(text) or Path(text).is_absolute():
        return text, "SOCO_STORAGE"
    cwd = (cwd or Path.cwd()).resolve()
    if (cwd / text).is_dir():
        return str(cwd / text), f"SOCO_STORAGE={text!r} relative to the working directory"
    return str(root / text), f"SOCO_STORAGE={text!r} relative to the project root {root}"


def instance_storage(yaml_text: str) -> str:
    """The storage root a dagster.yaml written from the template names ("" when it names none)."""
    import yaml

    try:
        base = yaml.safe_load(yaml_text)["storage"]["sqlite"]["base_dir"]
    except (yaml.YAMLError, KeyError, TypeError):
        return ""
    return str(base).removesuffix("/dagster/history")


def write_instance_yaml(dagster_home: Path, storage: str, root: Path) -> bool:
    """Write dagster.yaml from the template when missing or stale; True when written."""
    if is_remote(storage):
        return False
    template = root / "dagster.yaml"
    if not template.is_file():
        return False
    target = dagster_home / "dagster.yaml"
    text = template.read_text().replace("@STORAGE@", storage)
    if target.exists():
        current = target.read_text()
        if MAKEFILE_MARK not in current or current == text:
            return False
        named = instance_storage(current)
        if named and named != storage:
            print(
                f"note: rewrote {target} for the storage root {storage} (it named {named})", file=sys.stderr
            )
    dagster_home.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(".dagster.yaml.tmp")
    tmp.write_text(text)
    tmp.replace(target)
    return True


@contextmanager
def project_defaults(cwd: Path | None = None) -> Iterator[ProjectEnvironment]:
    """`project_environment` on os.environ for the block, restored when it ends."""
    env = environment()
    saved = {k: env.get(k) for k in ("SOCO_STORAGE", "DAGSTER_HOME")}
    try:
        yield project_environment(cwd=cwd, write_yaml=False)
    finally:
        for k, v in saved.items():
            if v is None:
                env.pop(k, None)
            else:
                env[k] = v


def prepare_instance() -> Path:
    """DAGSTER_HOME with a dagster.yaml (from the template when it has none)."""
    home = Path(variable("DAGSTER_HOME", None))
    write_instance_yaml(home, default_storage_root(), find_project_root())
    return home


def project_environment(
    environ: dict | None = None, cwd: Path | None = None, write_yaml: bool = True
) -> ProjectEnvironment:
    """The Makefile's defaults applied to `environ` in place; returns what was chosen."""
    env = environment() if environ is None else environ
    root = find_project_root(cwd)
    storage, how_storage = resolve_storage(env.get("SOCO_STORAGE") or None, root, cwd)
    home_text = env.get("DAGSTER_HOME") or ""
    if home_text:
        home = Path(home_text)
        home = home if home.is_absolute() else (cwd or Path.cwd()).resolve() / home
        how_home = "DAGSTER_HOME"
    else:
        home, how_home = root / "storage" / "dagster", "default <project>/storage/dagster"
    env["SOCO_STORAGE"], env["DAGSTER_HOME"] = storage, str(home)
    if write_yaml and write_instance_yaml(home, storage, root):
        how_home += " (dagster.yaml written from the project's template)"
    return ProjectEnvironment(root, storage, home, {"storage": how_storage, "dagster_home": how_home})


def missing_results_message(env: ProjectEnvironment, path: str) -> str:
    """What to say when no results are at `path`: where it looked, how that was chosen, what to run."""
    return (
        f"no results at {path} (storage root {env.storage}, from {env.how['storage']}; project {env.root}). "
        f"Run `make demo` or `soco run SPEC` in {env.root}, or point SOCO_STORAGE at the storage folder that "
        "holds results.duckdb"
    )
