"""The weekly re-evaluation as Dagster automation conditions (shared/automation.py), on toy assets shaped
like the backbones group's: a per-backbone asset reading an unpartitioned table, its spec file (a
partitioned observable source) and the protocol (an observable source observed on the cron).

After each cron tick a partition is requested once if its code version or an upstream data version moved
since it was last handled, and only then; an up-to-date one is not. Evaluated with
`dg.evaluate_automation_conditions` at chosen times (no daemon); the runs' materializations and observations
are reported to the instance as the events a run records, so each test takes seconds."""

from __future__ import annotations

import datetime as dt
import warnings

import dagster as dg
import pytest

from soco_pipeline.defs.shared.automation import observe_on_cron, reevaluate_on_cron
from tests.automation_ticks import evaluate

pytestmark = pytest.mark.pipeline

CRON = "0 3 * * 1"  # Mondays 03:00 UTC
TUESDAY = dt.datetime(2026, 12, 1, 12, 0, tzinfo=dt.UTC)  # the week's tick (Monday) has passed
NEXT_MONDAY = dt.datetime(2026, 12, 7, 3, 30, tzinfo=dt.UTC)
parts = dg.DynamicPartitionsDefinition(name="toy_backbones")


def toy_assets(code_version: str) -> list:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dg.BetaWarning)

        @dg.observable_source_asset(name="evaluation_protocol", automation_condition=observe_on_cron(CRON))
        def protocol() -> dg.DataVersion:
            return dg.DataVersion("p1")

        @dg.observable_source_asset(name="backbone_spec", partitions_def=parts)
        def spec() -> dg.DataVersionsByPartition:
            return dg.DataVersionsByPartition({"a": "s1", "b": "s1"})

    @dg.asset
    def table() -> int:
        return 1

    @dg.asset(
        partitions_def=parts,
        deps=[table, protocol, spec],
        code_version=code_version,
        automation_condition=reevaluate_on_cron(CRON),
    )
    def evaluated() -> int:
        return 1

    return [protocol, spec, table, evaluated]


def observe(instance, asset: str, version: str, partition: str | None = None) -> None:
    instance.report_runless_asset_event(
        dg.AssetObservation(asset, partition=partition, tags={"dagster/data_version": version})
    )


def materialized(instance, asset: str, partition: str | None = None, version: str | None = None) -> None:
    tags = {"dagster/data_version": version} if version else None
    instance.report_runless_asset_event(dg.AssetMaterialization(asset, partition=partition, tags=tags))


class Ticks:
    """Successive evaluations of the automation conditions (one cursor), like the daemon's ticks."""

    def __init__(self, instance):
        self.instance, self.cursor = instance, None

    def __call__(self, assets, when: dt.datetime) -> dict:
        result = evaluate(defs=assets, instance=self.instance, evaluation_time=when, cursor=self.cursor)
        self.cursor = result.cursor
        return {
            "evaluated": result.get_requested_partitions(dg.AssetKey("evaluated")),
            "observe_protocol": result.get_num_requested(dg.AssetKey("evaluation_protocol")),
        }


@pytest.fixture
def world(tmp_path):
    assets = toy_assets("1")
    with dg.instance_for_test(temp_dir=str(tmp_path)) as instance:
        instance.add_dynamic_partitions(parts.name, ["a", "b"])
        observe(instance, "evaluation_protocol", "p1")
        for p in ("a", "b"):
            observe(instance, "backbone_spec", "s1", p)
        materialized(instance, "table", version="t1")
        for p in ("a", "b"):
            materialized(instance, "evaluated", p)
        ticks = Ticks(instance)
        assert ticks(assets, TUESDAY)["evaluated"] == set()  # the daemon's first tick
        yield {"instance": instance, "assets": assets, "ticks": ticks}


def test_nothing_changed_nothing_requested_even_after_the_tick(world):
    ticks, assets = world["ticks"], world["assets"]
    assert ticks(assets, TUESDAY + dt.timedelta(hours=1))["evaluated"] == set()
    assert ticks(assets, NEXT_MONDAY)["evaluated"] == set()


def test_a_changed_spec_waits_for_the_tick_and_re_runs_only_its_partition(world):
    ticks, assets, instance = world["ticks"], world["assets"], world["instance"]
    observe(instance, "backbone_spec", "s2", "a")  # the spec sensor saw backbone a's file change
    assert ticks(assets, TUESDAY + dt.timedelta(hours=1))["evaluated"] == set()  # not before the tick
    assert ticks(assets, NEXT_MONDAY)["evaluated"] == {"a"}
    assert ticks(assets, NEXT_MONDAY + dt.timedelta(minutes=1))["evaluated"] == set()  # once per tick
    materialized(instance, "evaluated", "a")
    assert ticks(assets, NEXT_MONDAY + dt.timedelta(days=7))["evaluated"] == set()  # up to date again


def test_a_new_code_version_re_runs_every_partition_at_the_tick(world):
    ticks, instance = world["ticks"], world["instance"]
    bumped = toy_assets("2")
    assert ticks(bumped, TUESDAY + dt.timedelta(hours=1))["evaluated"] == set()
    assert ticks(bumped, NEXT_MONDAY)["evaluated"] == {"a", "b"}
    for p in ("a", "b"):
        materialized(instance, "evaluated", p)
    assert ticks(bumped, NEXT_MONDAY + dt.timedelta(days=7))["evaluated"] == set()
    assert instance.get_dynamic_partitions(parts.name) == ["a", "b"]


def test_an_edited_protocol_is_observed_at_the_tick_then_every_partition_re_runs(world):
    ticks, assets, instance = world["ticks"], world["assets"], world["instance"]
    tick = ticks(assets, NEXT_MONDAY)
    assert tick == {"evaluated": set(), "observe_protocol": 1}  # the tick asks for an observation of the file
    observe(instance, "evaluation_protocol", "p2")  # the observation run: the file changed
    assert ticks(assets, NEXT_MONDAY + dt.timedelta(minutes=1))["evaluated"] == {"a", "b"}


def test_the_same_table_re_materialized_is_no_change(world):
    ticks, assets, instance = world["ticks"], world["assets"], world["instance"]
    materialized(instance, "table", version="t1")  # the same content again
    assert ticks(assets, NEXT_MONDAY)["evaluated"] == set()
    materialized(instance, "table", version="t2")  # new content
    assert ticks(assets, NEXT_MONDAY + dt.timedelta(days=7))["evaluated"] == {"a", "b"}
