"""The family contract, its Dagster half: a task family is a `Family` declaration plus its assets."""

from __future__ import annotations

import dataclasses
import functools
import importlib
import inspect
import pkgutil
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import dagster as dg
import pandas as pd

from soco_pipeline.defs.shared.automation import EAGER, ON_CHANGE, PER_MODEL_TAG
from soco_pipeline.defs.shared.checks import (
    TableResult,
    TableSpec,
    fan_in_table,
    partition_table,
    table_asset,
    table_multi_asset,
    table_out,
)
from soco_pipeline.defs.shared.executors import GPU_STEP_TAGS
from soco_pipeline.defs.shared.partitions import backbones_partitions
from soco_pipeline.defs.shared.resources import SocoSettings
from soco_pipeline.defs.shared.specs import spec_for
from soco_pipeline.tables import register_table
from soco_pipeline.tasks import FamilySpec
from soco_pipeline.trust.headline import Headline

NotApplicableRows = Callable[[str, str, Mapping[str, Any]], pd.DataFrame]


@dataclass(frozen=True)
class Family:
    """A task family's declaration: name (= group, table prefix), code version, config, needs, headline."""

    name: str
    code_version: str
    load_config: Callable[[str, SocoSettings], Any]
    needs: frozenset[str] = field(default_factory=frozenset)
    headline: Headline | None = None
    reads: Callable[[Any, Any], Mapping[str, Any]] | None = None  # (spec, config) -> the spec fields read
    boards: list[str] = field(default_factory=list, compare=False, repr=False)
    spec: FamilySpec | None = field(default=None, compare=False, repr=False)

    @classmethod
    def of(
        cls,
        spec: FamilySpec,
        code_version: str,
        needs: frozenset[str] = frozenset(),
        reads: Callable[[Any, Any], Mapping[str, Any]] | None = None,
    ) -> Family:
        """The Dagster half of a domain `FamilySpec` (its name, config loader, headline and tables)."""
        spec.register_tables()
        return cls(spec.name, code_version, spec.load_config, needs, spec.headline, reads, spec=spec)

    def __post_init__(self) -> None:
        h = self.headline
        if h is not None:
            if h.family not in ("", self.name):
                raise ValueError(f"family {self.name!r}: its headline names another family, {h.family!r}")
            filled = dataclasses.replace(h, family=self.name, board=h.board or f"{self.name}_leaderboard")
            object.__setattr__(self, "headline", filled)  # a frozen dataclass: set once, here

    def config(self, soco: SocoSettings) -> Any:
        """The family's typed config, read from `soco.family_config_path(name)`."""
        return self.load_config(soco.family_config_path(self.name), soco)

    def not_applicable(self, spec) -> str:
        """Why a backbone spec cannot be scored by this family ("" when its kind offers every need)."""
        from soco_pipeline.backbones.kinds import CAPABILITIES, capabilities, missing_capabilities

        missing = missing_capabilities(spec.kind, self.needs)
        if not missing:
            return ""
        offered = "; ".join(f"{c} ({CAPABILITIES[c]})" for c in sorted(capabilities(spec.kind)))
        return (
            f"not applicable: {self.name} needs {', '.join(missing)}, which a {spec.kind!r} backbone does not "
            f"offer; it offers {offered}"
        )

    def spec_reads(self, spec, config: Any) -> Mapping[str, Any]:
        """The spec fields this family reads: `reads`, else the computation and the name."""
        from soco_pipeline.backbones.reads import computation

        return (
            self.reads(spec, config) if self.reads is not None else {**computation(spec), "name": spec.name}
        )

    def reads_version(self, context: dg.AssetExecutionContext, soco: SocoSettings, spec) -> str:
        """The reads version of this step's tables (shared/reuse.py), the computing libraries included."""
        from soco_pipeline.defs.shared.reuse import step_reads_version
        from soco_pipeline.trust.family_records import config_hash

        config = self.config(soco)
        return step_reads_version(
            context,
            self.spec_reads(spec, config),
            family=self.name,
            code=self.code_version,
            config=config_hash(config),
        )

    def reused(
        self, context: dg.AssetExecutionContext, soco: SocoSettings, version: str
    ) -> dict[str, TableResult] | None:
        """This step's tables from a stored partition of the same reads version; None when none."""
        from soco_pipeline.defs.shared.reuse import reused_tables

        return reused_tables(context, soco.tables_root, soco.features_root, version)

    def table(
        self,
        partitions_def: dg.PartitionsDefinition | None = None,
        *,
        kinds: Iterable[str] = ("pandas",),
        not_applicable: NotApplicableRows | None = None,
        **kwargs: Any,
    ) -> Callable[[Callable[..., TableResult]], dg.AssetsDefinition]:
        """Decorator of a table of the family, eager by default, per model when `partitions_def` is given."""
        kwargs = dict(group_name=self.name, code_version=self.code_version, kinds=set(kinds), **kwargs)
        kwargs.setdefault("automation_condition", EAGER)
        blocking_check_required(kwargs)

        def decorate(fn: Callable[..., TableResult]) -> dg.AssetsDefinition:
            self.register(kwargs.get("name", fn.__name__), partitioned=partitions_def is not None)
            body = self.backbone_body(fn, not_applicable) if _per_backbone(partitions_def) else fn
            if partitions_def is None:
                return table_asset(**kwargs)(body)
            return partition_table(partitions_def, **kwargs)(body)

        return decorate

    def features_table(self, schema: Any, *extra_columns: str):
        """Decorator of the family's feature-cache table per backbone (gpu pool); no rows where not applicable."""

        def no_rows(model: str, reason: str, inputs: Mapping[str, Any]) -> pd.DataFrame:
            from soco_pipeline.features.layout import MANIFEST_COLUMNS

            return pd.DataFrame(columns=[*MANIFEST_COLUMNS, *extra_columns])

        kwargs = dict(schema=schema, kinds=("pytorch",), pool="gpu", op_tags=GPU_STEP_TAGS)
        return self.table(backbones_partitions, not_applicable=no_rows, **kwargs)

    def tables(
        self,
        outs: dict[str, tuple[TableSpec, dg.AssetOut]],
        partitions_def: dg.PartitionsDefinition | None = None,
        not_applicable: Mapping[str, NotApplicableRows] | None = None,
        **kwargs: Any,
    ):
        """Decorator of several tables of the family from one body; `not_applicable` is {table: rows}."""
        for name, (spec, _) in outs.items():
            if not spec.checked:
                raise TypeError(f"table {name!r}: every family table has a blocking check; give it a schema")
            self.register(name, partitioned=partitions_def is not None)
        if not_applicable is not None and set(not_applicable) != set(outs):
            raise ValueError(f"not_applicable must name the rows of every table: {sorted(outs)}")
        if partitions_def is not None:
            kwargs.update(partitions_def=partitions_def, can_subset=True)
        decorate = table_multi_asset(outs=outs, group_name=self.name, **kwargs)
        if not _per_backbone(partitions_def):
            return decorate
        return lambda fn: decorate(self.backbone_body(fn, not_applicable, multi=True))

    def partition_out(
        self,
        partitions_def: dg.PartitionsDefinition,
        schema: Any,
        description: str,
        kinds: Iterable[str] = ("pandas",),
    ) -> tuple[TableSpec, dg.AssetOut]:
        """One per-model output of `tables(..., partitions_def=...)`, as `partition_table` makes a table."""
        per_model = isinstance(partitions_def, dg.DynamicPartitionsDefinition)
        return table_out(
            schema,
            description,
            code_version=self.code_version,
            kinds=set(kinds),
            automation_condition=ON_CHANGE,
            tags={PER_MODEL_TAG: partitions_def.name} if per_model else None,
            is_required=False,  # a subsettable multi-asset: a run that selects one table yields only it
        )

    def register(self, asset: str, partitioned: bool = False) -> None:
        """Put a table of the family in the table registry (tables.py)."""
        if not asset.startswith(f"{self.name}_"):
            raise ValueError(f"table {asset!r} of family {self.name!r} must be named {self.name}_<what>")
        register_table(asset, partitioned=partitioned)

    def board(self, *, partitioned: Iterable[str], optional: Iterable[str] = (), **kwargs: Any):
        """Decorator of a board of the family over every partition of `partitioned` (`fan_in_table`)."""
        kwargs.setdefault("kinds", {"pandas"})
        blocking_check_required(kwargs)
        partitioned = list(partitioned)
        fan_in = fan_in_table(
            group_name=self.name,
            code_version=self.code_version,
            partitioned=partitioned,
            optional=list(optional),
            **kwargs,
        )

        def decorate(fn: Callable[..., TableResult]) -> dg.AssetsDefinition:
            name = kwargs.get("name", fn.__name__)
            self.register(name)
            if name not in self.boards:
                self.boards.append(name)
            return fan_in(stating_reuse(fn, list(partitioned)))

        return decorate

    def backbone_body(
        self,
        fn: Callable[..., Any],
        rows: NotApplicableRows | Mapping[str, NotApplicableRows] | None,
        multi: bool = False,
    ) -> Callable:
        """`fn` for a backbone partition: the not-applicable `rows`, else reused tables, else `fn`'s."""
        sig = inspect.signature(fn)
        takes_spec, takes_soco = "spec" in sig.parameters, "soco" in sig.parameters
        params = [p for name, p in sig.parameters.items() if name != "spec"]
        if not takes_soco:
            soco = inspect.Parameter("soco", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=SocoSettings)
            params.insert(1, soco)

        @functools.wraps(fn)
        def body(context: dg.AssetExecutionContext, **kwargs: Any) -> Any:
            # Dagster passes the context first, every resource and input by name
            soco = kwargs["soco"] if takes_soco else kwargs.pop("soco")
            spec = spec_for(soco, context.partition_key)
            reason = self.not_applicable(spec) if rows is not None else ""
            if reason:
                inputs = {k: v for k, v in kwargs.items() if k != "soco"}
                meta = {"not_applicable": reason}
                if isinstance(rows, Mapping):
                    return {
                        n: TableResult(r(context.partition_key, reason, inputs), meta)
                        for n, r in rows.items()
                    }
                return TableResult(rows(context.partition_key, reason, inputs), meta)
            version = self.reads_version(context, soco, spec)
            reused = self.reused(context, soco, version)
            if reused is not None:
                return reused if multi else next(iter(reused.values()))
            result = fn(context, **({"spec": spec} if takes_spec else {}), **kwargs)
            for table in result.values() if multi else [result]:
                table.metadata["reads_version"] = version
            return result

        body.__signature__ = sig.replace(parameters=params)  # type: ignore[attr-defined]
        annotations = {k: v for k, v in fn.__annotations__.items() if k != "spec"}
        body.__annotations__ = {**annotations, "soco": SocoSettings}
        del body.__wrapped__  # Dagster must see the new signature, not fn's
        return body


def stating_reuse(fn: Callable[..., TableResult], partitioned: list[str]) -> Callable[..., TableResult]:
    """A board's body that also names, in its metadata (`reused`), each model whose rows were reused."""

    @functools.wraps(fn)
    def board(context: dg.AssetExecutionContext, *args: Any, **kwargs: Any) -> TableResult:
        from soco_pipeline.defs.shared.reuse import reuse_note

        result = fn(context, *args, **kwargs)
        note = reuse_note(context.instance, partitioned)
        if note:
            result.metadata["reused"] = dg.MetadataValue.md(note)
        return result

    return board


def declared_families(folders: Iterable[ModuleType]) -> list[Family]:
    """Every `Family` declared in the group folders `folders`, by name; two of one name are a ValueError."""
    found: dict[str, Family] = {}
    for folder in folders:
        names = [m.name for m in pkgutil.walk_packages(folder.__path__, f"{folder.__name__}.")]
        for module in (folder, *map(importlib.import_module, names)):
            for value in vars(module).values():
                if isinstance(value, Family) and found.setdefault(value.name, value) is not value:
                    raise ValueError(
                        f"two Family declarations named {value.name!r} (one in {module.__name__})"
                    )
    return [found[name] for name in sorted(found)]


def blocking_check_required(kwargs: Mapping[str, Any]) -> None:
    """TypeError unless a family table has a blocking check: a validated `schema` or `check=True`."""
    validated = kwargs.get("schema") is not None and kwargs.get("validate", True)
    if not (validated or kwargs.get("check")):
        name = kwargs.get("name", "a table")
        raise TypeError(f"{name} of a task family has no blocking check: give it schema=... or check=True")


def _per_backbone(partitions_def: dg.PartitionsDefinition | None) -> bool:
    return isinstance(partitions_def, dg.DynamicPartitionsDefinition) and partitions_def.name == "backbones"
