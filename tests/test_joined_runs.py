"""Stages joined into one run (soco_pipeline/cli/joined_runs.py, as `soco run` runs a model's rows of every
family): one run launched, and each stage its own status, seconds and failure reason."""

from __future__ import annotations

import dagster as dg
import pytest

from soco_pipeline.cli.demo import Runner, Stage
from soco_pipeline.cli.joined_runs import joined, run_joined
from tests.dagster_server import write_instance_yaml
from tests.toy_family import toy_definitions

pytestmark = pytest.mark.pipeline

LOCATION = ("tests.toy_family", "toy_job")


def _stages(backbone: str) -> list[Stage]:
    return [
        Stage(f"toy / backbone {backbone}", "demo_toy_backbone", [dg.AssetKey("toy_scores")], backbone),
        Stage(f"loose / backbone {backbone}", "demo_loose_backbone", [dg.AssetKey("loose_scores")], backbone),
    ]


@pytest.fixture
def world(tmp_path):
    home, storage = tmp_path / "home", tmp_path / "storage"
    write_instance_yaml(home, storage)
    defs = toy_definitions(str(storage))
    with dg.DagsterInstance.from_config(str(home)) as instance:
        instance.add_dynamic_partitions("backbones", ["ab", "bad"])
        lines: list[str] = []
        runner = Runner(defs, instance, {"storage": str(storage)}, LOCATION, lines.append)
        assert runner.run(Stage("toy", "demo_toy", [dg.AssetKey("toy_items")]))
        yield defs, instance, runner, lines


def test_joined_stages_run_in_one_run_and_each_keeps_its_label(world):
    defs, instance, runner, lines = world
    before = len(instance.get_runs())
    results = run_joined(runner, defs, _stages("ab"), "demo_model")
    assert [ok for ok, _ in results] == [True, True] and runner.failed == {}
    assert all(seconds > 0 for _, seconds in results)
    (run,) = instance.get_runs()[: len(instance.get_runs()) - before]
    assert (run.job_name, run.tags["dagster/partition"]) == ("demo_model", "ab")
    assert lines[-3:-1] == ["toy / backbone ab ...", "loose / backbone ab ..."]
    for key in ("toy_scores", "loose_scores"):
        assert instance.get_latest_materialization_event(dg.AssetKey(key)).run_id == run.run_id


def test_a_failed_step_fails_only_its_own_stage_with_its_error(world):
    defs, instance, runner, lines = world
    results = run_joined(runner, defs, _stages("bad"), "demo_model")
    assert [ok for ok, _ in results] == [True, False]
    assert runner.failed == {
        "loose / backbone bad": "step loose_scores: ValueError: loose_scores cannot score the backbone 'bad'"
    }
    record = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=dg.AssetKey("toy_scores"), asset_partitions=["bad"]), limit=1
    ).records
    assert record  # the other stage's rows are materialized


def test_one_stage_runs_in_its_own_job_and_joined_merges_ops_and_tags():
    stages = _stages("ab")
    stages[0].ops, stages[1].tags = {"toy_scores": {"config": {}}}, {"soco/limit": "none"}
    together = joined(stages, "demo_model")
    assert together.keys == [dg.AssetKey("toy_scores"), dg.AssetKey("loose_scores")]
    assert (together.partition, together.ops, together.tags) == (
        "ab",
        {"toy_scores": {"config": {}}},
        {"soco/limit": "none"},
    )
