"""The task families beside SOCO, one plain-Python domain core per `tasks/<name>/` declaring `SPEC`, and
their registry `family_specs()` (which registers their tables, so the CLI reads them without Dagster)."""

from __future__ import annotations

import dataclasses
import functools
import importlib
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from soco_pipeline.tables import register_table

if TYPE_CHECKING:
    from soco_pipeline.trust.family_records import FamilyTables
    from soco_pipeline.trust.family_watch import FamilyWatch
    from soco_pipeline.trust.headline import Headline

SAME_ROWS = "two specs that differ only in `input` get identical rows here"


@dataclass(frozen=True)
class FamilySpec:
    """A task family as the domain knows it; the optional fields feed its record, watch and board."""

    name: str
    title: str
    load_config: Callable[[str, Any], Any]
    headline: Headline | None = None
    record: FamilyTables | None = None
    parts: Callable[[str, str, dict, int], dict[str, Any]] | None = None
    watch: FamilyWatch | None = None
    workbook: str = ""
    input_note: Callable[[Any], str] | None = None
    columns: tuple[str, ...] = ()
    findings: tuple[str, tuple[str, ...]] | None = None
    simulated_note: str = ""
    record_name: str = ""
    rebuild: str = ""

    def __post_init__(self) -> None:
        h = self.headline
        if h is not None and not (h.family and h.board):  # the name, `<name>_leaderboard` unless it names one
            filled = dataclasses.replace(
                h, family=h.family or self.name, board=h.board or f"{self.name}_leaderboard"
            )
            object.__setattr__(self, "headline", filled)  # a frozen dataclass: set once, here

    @property
    def headline_value(self) -> str | None:  # the board column of its headline (the first value column)
        return self.headline.values[0] if self.headline is not None else None

    def config(self, settings: Any) -> Any:
        """The family's typed config, read from `settings.family_config_path(name)` with its loader."""
        return self.load_config(settings.family_config_path(self.name), settings)

    def register_tables(self) -> None:
        """Register the tables the record and the watch read (samples once, results per model) in tables.py."""
        rec, watch = self.record, self.watch
        for name in rec.samples if rec is not None else ():
            register_table(name)
        per_model = (*rec.backbone, *rec.lvlm) if rec is not None else ()
        for name in dict.fromkeys((*per_model, *(watch.per_model if watch is not None else ()))):
            register_table(name, partitioned=True)


@functools.cache
def family_specs() -> dict[str, FamilySpec]:
    """Every family declared in `soco_pipeline/tasks/<name>/` (its `SPEC`), by name; their tables registered."""
    found = {}
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        spec = (
            getattr(importlib.import_module(f"{__name__}.{info.name}"), "SPEC", None) if info.ispkg else None
        )
        if isinstance(spec, FamilySpec):
            if spec.name != info.name:
                raise ValueError(f"soco_pipeline/tasks/{info.name}/ declares a family named {spec.name!r}")
            spec.register_tables()
            found[spec.name] = spec
    return found


def family_input_notes(settings: Any) -> dict[str, str]:
    """{family: its input note} of the families with their own input policy (none when a config fails)."""
    notes = {}
    for name, spec in family_specs().items():
        if spec.input_note is not None:
            try:
                notes[name] = spec.input_note(spec.config(settings))
            except (ImportError, OSError, ValueError):
                continue
    return notes
