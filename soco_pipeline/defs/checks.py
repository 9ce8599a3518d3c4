"""Blocking asset checks built on the pandera schemas and the tables' cross-table rules."""


import dagster as dg
import pandas as pd
import pandera.pandas as pa

from soco_pipeline.checks import table_problems


def schema_check(
    df: pd.DataFrame, schema: type[pa.DataFrameModel], asset: str, **related: pd.DataFrame
) -> dg.AssetCheckResult:
    """Validate `df` against its schema and cross-table rules; failing rows go to the metadata."""
    problems: list[str] = []
    try:
        schema.validate(df, lazy=True)
    except pa.errors.SchemaErrors as e:
        fc = e.failure_cases
        problems.extend(f"{r.check} on {r.column}: {r.failure_case!r}" for r in fc.head(20).itertuples())
    problems.extend(table_problems(asset, df, **related))
    return dg.AssetCheckResult(
        asset_key=asset,
        check_name="schema",
        passed=not problems,
        metadata={"problems": dg.MetadataValue.md("\n".join(f"- {p}" for p in problems[:20]) or "none")},
    )
