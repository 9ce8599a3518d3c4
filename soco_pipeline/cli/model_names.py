"""The model names a `soco` command accepts, and the error that lists them when a name is not one of them."""

from __future__ import annotations

import difflib
from pathlib import Path

from soco_pipeline.backbones.spec_files import spec_names
from soco_pipeline.settings import Settings
from soco_pipeline.storage import is_remote
from soco_pipeline.tables import table_for


class UnknownModelError(ValueError):
    """A model name that is neither a spec file nor a materialized partition; the message lists the known."""


def _partitions(tables_root: str, table: str) -> set[str]:
    """The partitions of a partitioned table written so far (local storage; empty for a URL)."""
    folder = Path(table_for(table).path(tables_root))  # the folder of all partitions
    return (
        set() if is_remote(tables_root) or not folder.is_dir() else {p.stem for p in folder.glob("*.parquet")}
    )


def known_backbones(settings: Settings, materialized: bool = True) -> list[str]:
    """Backbone names: the spec files and (with `materialized`) those with stored metrics."""
    names = spec_names(settings.backbones_dir)
    return sorted(names | (_partitions(settings.tables_root, "metrics") if materialized else set()))


def known_lvlms(settings: Settings) -> list[str]:
    """LVLM names: the spec files of the LVLM folder and every LVLM whose answers are stored."""
    return sorted(spec_names(settings.lvlms_dir) | _partitions(settings.tables_root, "lvlm_answers"))


def check_model(name: str, known: list[str], what: str, where: str) -> str:
    """`name` when it is in `known`; else an UnknownModelError naming the known ones (and the nearest)."""
    if name in known:
        return name
    near = difflib.get_close_matches(name, known, n=1)
    hint = f" Did you mean {near[0]!r}?" if near else ""
    listed = ", ".join(known) if known else "none yet"
    raise UnknownModelError(f"unknown {what} {name!r}.{hint} Known {what}s: {listed} ({where}).")


def check_backbone(settings: Settings, name: str, materialized: bool = True) -> str:
    """`name` when it is a known backbone (see `known_backbones`), else the error listing them."""
    where = f"spec files in {settings.backbones_dir}" + (
        " and backbones with stored metrics" if materialized else ""
    )
    return check_model(name, known_backbones(settings, materialized), "backbone", where)


def check_lvlm(settings: Settings, name: str) -> str:
    """`name` when it is a known LVLM (see `known_lvlms`), else the error listing them."""
    where = f"spec files in {settings.lvlms_dir} and LVLMs with stored answers"
    return check_model(name, known_lvlms(settings), "LVLM", where)
