"""A throwaway task family for tests/test_demo.py: group `toy` with an unpartitioned asset, a
`backbones`-partitioned one and `toy_leaderboard`; plus group `loose` without a leaderboard (not a family)
and group `askers` whose only partitioned assets are per LVLM. `toy_job` is the demo's job factory for it."""

# No `from __future__ import annotations`: Dagster reads the context annotations at definition time.

import dagster as dg
import pandas as pd

from soco_pipeline.defs.shared.partitions import backbones_partitions

lvlms = dg.DynamicPartitionsDefinition(name="lvlms")


@dg.asset(group_name="toy")
def toy_items() -> pd.DataFrame:
    """Three items every backbone scores."""
    return pd.DataFrame({"item": ["a", "b", "c"], "weight": [1.0, 2.0, 3.0]})


@dg.asset(group_name="toy", partitions_def=backbones_partitions)
def toy_scores(context: dg.AssetExecutionContext, toy_items: pd.DataFrame) -> pd.DataFrame:
    """One backbone's score: the weight sum times the length of its name (deterministic)."""
    name = context.partition_key
    return pd.DataFrame({"backbone": [name], "score": [float(toy_items.weight.sum() * len(name))]})


@dg.asset(group_name="toy")
def toy_leaderboard(toy_scores: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """Every backbone's score, best first (its partitions arrive as a dict through the IO manager)."""
    return pd.concat(list(toy_scores.values())).sort_values("score", ascending=False).reset_index(drop=True)


@dg.asset(group_name="loose")
def loose_table() -> pd.DataFrame:
    """In a group without a `<group>_leaderboard`: never run by the demo."""
    raise AssertionError("the demo must not run a group without a leaderboard")


@dg.asset(group_name="loose", partitions_def=backbones_partitions)
def loose_scores(context: dg.AssetExecutionContext) -> pd.DataFrame:
    """A second per-backbone table (tests/test_joined_runs.py): fails for the backbone `bad`."""
    if context.partition_key == "bad":
        raise ValueError("loose_scores cannot score the backbone 'bad'")
    return pd.DataFrame({"backbone": [context.partition_key]})


@dg.asset(group_name="askers", partitions_def=lvlms)
def askers_answers(context: dg.AssetExecutionContext) -> pd.DataFrame:
    """Per LVLM: with no LVLM spec the family is skipped."""
    raise AssertionError("no LVLM partition exists")


@dg.asset(group_name="askers", deps=[askers_answers])
def askers_leaderboard() -> pd.DataFrame:
    """Never reached without an LVLM spec."""
    raise AssertionError("the family has nothing to rank")


def toy_definitions(storage: str) -> dg.Definitions:
    """The toy groups with a filesystem IO manager under `storage`."""
    return dg.Definitions(
        assets=[
            toy_items,
            toy_scores,
            toy_leaderboard,
            loose_table,
            loose_scores,
            askers_answers,
            askers_leaderboard,
        ],
        resources={"io_manager": dg.FilesystemIOManager(base_dir=storage)},
    )


def toy_job(name: str, keys: list[str], overrides: dict | None = None) -> dg.JobDefinition:
    """The demo's job factory (soco_pipeline.cli.demo.demo_job) for the toy definitions."""
    job = dg.define_asset_job(name, selection=dg.AssetSelection.assets(*keys))
    return dg.Definitions.merge(
        toy_definitions(overrides["storage"]), dg.Definitions(jobs=[job])
    ).resolve_job_def(name)
