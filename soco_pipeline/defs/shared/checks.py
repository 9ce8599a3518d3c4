"""Table assets behind blocking checks, published only if they pass, their content hash as data version."""

import functools
import hashlib
import inspect
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import dagster as dg
import pandas as pd
import pandera.pandas as pa
import pyarrow

from soco_pipeline.data.checks import table_problems
from soco_pipeline.defs.shared.automation import MODEL_SPECS, ON_CHANGE, PER_MODEL_TAG, board_condition
from soco_pipeline.defs.shared.executors import IN_RUN_PROCESS
from soco_pipeline.defs.shared.io_manager import ALLOW_MISSING, ALLOW_MISSING_PARTITIONS
from soco_pipeline.settings import Settings
from soco_pipeline.storage import relativize_paths


def columns_of(schema: type[pa.DataFrameModel]) -> dict[str, dg.TableSchemaMetadataValue]:
    """Asset metadata showing a table's columns in the UI (dagster-pandera); a blocking check enforces it."""
    from dagster_pandera import pandera_schema_to_dagster_type

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the function is marked beta
        dagster_type = pandera_schema_to_dagster_type(schema)
    return {"dagster/column_schema": dagster_type.metadata["schema"]}


def check_result(asset: str, problems: Iterable[str]) -> dg.AssetCheckResult:
    """The `schema` check of an asset: passed iff there are no problems; the first 20 go to the metadata."""
    problems = list(problems)
    return dg.AssetCheckResult(
        asset_key=asset,
        check_name="schema",
        passed=not problems,
        metadata={
            "problems": dg.MetadataValue.md("\n".join(f"- {p}" for p in problems[:20]) or "none"),
            "n_problems": len(problems),
        },
    )


def schema_problems(df: pd.DataFrame, schema: type[pa.DataFrameModel]) -> list[str]:
    """Every failing pandera check of `df`, one line each (at most 20)."""
    try:
        schema.validate(df, lazy=True)
    except pa.errors.SchemaErrors as e:
        fc = e.failure_cases
        return [f"{r.check} on {r.column}: {r.failure_case!r}" for r in fc.head(20).itertuples()]
    return []


def publish_checked(
    outputs: Iterable[dg.Output], checks: Iterable[dg.AssetCheckResult]
) -> Iterator[dg.Output | dg.AssetCheckResult]:
    """Yield the outputs only if every blocking check passed; else record the checks and fail the step."""
    outputs, checks = list(outputs), list(checks)
    failed = [c for c in checks if not c.passed]
    if not failed:
        yield from outputs
        yield from checks
        return
    yield from checks
    reasons = []
    for c in failed:
        asset = c.asset_key.to_user_string() if c.asset_key else "?"
        problems = c.metadata.get("problems")
        text = getattr(problems, "value", problems) or "no details"
        n = getattr(c.metadata.get("n_problems"), "value", "?")
        reasons.append(f"{asset}: check {c.check_name!r} failed ({n} problems):\n{text}")
    names = ", ".join(dict.fromkeys(c.asset_key.to_user_string() for c in checks if c.asset_key))
    raise dg.Failure(
        description=f"blocking check failed, so {names} was not published (the previous table stays):\n"
        + "\n".join(reasons),
        metadata={"not_published": names},
    )


@dataclass
class TableResult:
    """What a table asset's body returns: the table, its metadata, and what its blocking check needs."""

    value: pd.DataFrame | pyarrow.Table
    metadata: dict[str, Any] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)  # problems the body found itself
    related: dict[str, pd.DataFrame] = field(default_factory=dict)  # tables the cross-table rules compare to


def content_version(table: pd.DataFrame | pyarrow.Table, storage_root: str | None = None) -> dg.DataVersion:
    """A table's data version: a hash of its Arrow bytes, paths under `storage_root` stored relative to it."""
    t = table if isinstance(table, pyarrow.Table) else pyarrow.Table.from_pandas(table, preserve_index=False)
    if storage_root is not None:
        t = relativize_paths(t, storage_root)[0]
    t = t.replace_schema_metadata(None).combine_chunks()
    sink = pyarrow.BufferOutputStream()
    with pyarrow.ipc.new_stream(sink, t.schema) as writer:
        writer.write_table(t)
    return dg.DataVersion(hashlib.sha256(sink.getvalue().to_pybytes()).hexdigest()[:16])


@dataclass(frozen=True)
class TableSpec:
    """How one output table is checked: its pandera schema (validated unless `validate=False`)."""

    schema: type[pa.DataFrameModel] | None = None
    validate: bool = True
    check: bool | None = None  # default: a check iff a schema is validated

    @property
    def checked(self) -> bool:
        """Whether the table has a blocking `schema` check."""
        return (self.schema is not None and self.validate) if self.check is None else self.check

    def check_result(self, asset: str, result: TableResult) -> dg.AssetCheckResult:
        """The table's `schema` check: schema, cross-table rules and the body's own problems."""
        problems = [*(schema_problems(result.value, self.schema) if self.schema and self.validate else [])]
        if self.schema is not None and self.validate:
            problems += table_problems(asset, result.value, **result.related)
        return check_result(asset, [*problems, *result.problems])


def table_out(schema: Any, description: str, **kwargs: Any) -> tuple[TableSpec, dg.AssetOut]:
    """One output of `table_multi_asset`: `schema`'s check and columns; `kwargs` go to `dg.AssetOut`."""
    return TableSpec(schema), dg.AssetOut(description=description, metadata=columns_of(schema), **kwargs)


def publish_tables(
    results: dict[str, TableResult],
    specs: dict[str, TableSpec],
    single: bool,
    storage_root: str | None = None,
):
    """Check every table, then publish them all (outputs with content data versions) or none."""
    outputs, checks = [], []
    for name, result in results.items():
        if not isinstance(result, TableResult):
            raise TypeError(f"table asset {name!r} must return a TableResult, got {type(result).__name__}")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", dg.BetaWarning)  # Output's data_version: beta in Dagster 1.13
            outputs.append(
                dg.Output(
                    result.value,
                    **({} if single else {"output_name": name}),
                    metadata=result.metadata,
                    data_version=content_version(result.value, storage_root),
                )
            )
        if specs[name].checked:
            checks.append(specs[name].check_result(name, result))
        elif result.problems:
            raise TypeError(f"table asset {name!r} found problems but declares no check: give it check=True")
    yield from publish_checked(outputs, checks)


def _publishing(fn: Callable, specs: dict[str, TableSpec], single: bool) -> Callable:
    """`fn` wrapped to publish what it returns; Dagster sees fn's parameters, not its return annotation."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        returned = fn(*args, **kwargs)
        results = {next(iter(specs)): returned} if single else returned
        context = next((a for a in args if isinstance(a, dg.AssetExecutionContext)), None)
        if not single and context is not None:  # a subsettable multi-asset: only the tables the run selected
            results = {
                k: v for k, v in results.items() if k in context.op_execution_context.selected_output_names
            }
        settings = [v for v in (*args, *kwargs.values()) if isinstance(v, Settings)]
        yield from publish_tables(results, specs, single, settings[0].storage_root if settings else None)

    wrapper.__signature__ = inspect.signature(fn).replace(return_annotation=inspect.Signature.empty)
    wrapper.__annotations__ = {k: v for k, v in fn.__annotations__.items() if k != "return"}
    return wrapper


def table_asset(
    *,
    schema: type[pa.DataFrameModel] | None = None,
    validate: bool = True,
    check: bool | None = None,
    metadata: dict[str, Any] | None = None,
    **asset_kwargs: Any,
) -> Callable[[Callable[..., TableResult]], dg.AssetsDefinition]:
    """Decorator: a table asset whose body returns a TableResult, behind a blocking `schema` check."""
    spec = TableSpec(schema, validate, check)

    def decorate(fn: Callable[..., TableResult]) -> dg.AssetsDefinition:
        name = asset_kwargs.get("name", fn.__name__)
        kwargs = dict(asset_kwargs)
        if spec.checked:
            kwargs["check_specs"] = [dg.AssetCheckSpec("schema", asset=name, blocking=True)]
        meta = {**(columns_of(schema) if schema is not None else {}), **(metadata or {})}
        return dg.asset(metadata=meta or None, **kwargs)(_publishing(fn, {name: spec}, single=True))

    return decorate


def partition_table(
    partitions_def: dg.PartitionsDefinition, **kwargs: Any
) -> Callable[[Callable[..., TableResult]], dg.AssetsDefinition]:
    """Decorator: a per-partition table, ON_CHANGE by default, tagged PER_MODEL_TAG for spec changes."""
    kwargs.setdefault("automation_condition", ON_CHANGE)
    per_model = isinstance(partitions_def, dg.DynamicPartitionsDefinition)
    if per_model:  # what a changed spec re-runs (automation.py)
        kwargs["tags"] = {**kwargs.get("tags", {}), PER_MODEL_TAG: partitions_def.name}
    return table_asset(partitions_def=partitions_def, **kwargs)


def fan_in_table(
    *, partitioned: Sequence[str] = (), optional: Sequence[str] = (), **kwargs: Any
) -> Callable[[Callable[..., TableResult]], dg.AssetsDefinition]:
    """Decorator: a board over every partition of `partitioned` ({partition: table}), on `board_condition`."""
    ins = {
        **{name: dg.AssetIn(metadata=ALLOW_MISSING_PARTITIONS) for name in partitioned},
        **{name: dg.AssetIn(metadata=ALLOW_MISSING) for name in optional},
        **kwargs.pop("ins", {}),
    }
    kwargs.setdefault("automation_condition", board_condition(partitioned, optional))
    kwargs["op_tags"] = {**kwargs.get("op_tags", {}), **IN_RUN_PROCESS}  # a board's run needs no forkserver
    kwargs["deps"] = [*kwargs.get("deps", []), dg.AssetKey(MODEL_SPECS)]
    return table_asset(ins=ins, **kwargs)


def partition_rows(tables: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """A fan-in input's partitions ({partition: table}) as one table; empty when none is materialized yet."""
    return pd.concat(tables.values(), ignore_index=True) if tables else pd.DataFrame()


def table_multi_asset(
    *, outs: dict[str, tuple[TableSpec, dg.AssetOut]], **asset_kwargs: Any
) -> Callable[[Callable[..., dict[str, TableResult]]], dg.AssetsDefinition]:
    """Decorator: several tables from one body (a {name: TableResult} dict), published all or none."""
    specs = {name: spec for name, (spec, _) in outs.items()}

    def decorate(fn: Callable[..., dict[str, TableResult]]) -> dg.AssetsDefinition:
        check_specs = [
            dg.AssetCheckSpec("schema", asset=n, blocking=True) for n, s in specs.items() if s.checked
        ]
        dagster_outs = {name: out for name, (_, out) in outs.items()}  # columns_of(schema) in their metadata
        return dg.multi_asset(outs=dagster_outs, check_specs=check_specs, **asset_kwargs)(
            _publishing(fn, specs, single=False)
        )

    return decorate


def observable_source(**kwargs: Any) -> Callable[[Callable], dg.SourceAsset]:
    """`dg.observable_source_asset(**kwargs)` without its beta warning (a spec file, the protocol)."""

    def decorate(fn: Callable) -> dg.SourceAsset:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", dg.BetaWarning)
            return dg.observable_source_asset(**kwargs)(fn)

    return decorate
