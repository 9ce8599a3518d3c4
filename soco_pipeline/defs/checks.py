"""Blocking asset checks built on the pandera schemas and the tables' cross-table rules."""

from collections.abc import Iterable, Iterator

import dagster as dg
import pandas as pd
import pandera.pandas as pa

from soco_pipeline.data.checks import table_problems


def columns_of(schema: type[pa.DataFrameModel]) -> dict[str, dg.TableSchemaMetadataValue]:
    """Asset metadata that shows a table's columns (names, types, constraints) in the UI, built by
    dagster-pandera from our pandera schema. The schema itself is enforced by the blocking `schema` check,
    which also carries the cross-table rules and the reasons of a failure."""
    import warnings

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


def schema_check(
    df: pd.DataFrame,
    schema: type[pa.DataFrameModel],
    asset: str,
    extra: Iterable[str] = (),
    **related: pd.DataFrame,
) -> dg.AssetCheckResult:
    """Validate `df` against its schema, its cross-table rules and any `extra` problems found by the caller."""
    return check_result(asset, [*schema_problems(df, schema), *table_problems(asset, df, **related), *extra])


def publish_checked(
    outputs: Iterable[dg.Output], checks: Iterable[dg.AssetCheckResult]
) -> Iterator[dg.Output | dg.AssetCheckResult]:
    """Yield the outputs (the IO manager then writes them) only if every blocking check passed.

    The checks run on the in-memory tables before anything is written. On a failure the check results
    are recorded, nothing is published (the previous tables stay, so the SQL views remain consistent)
    and the step fails with the checks' own problems in its message.
    """
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
