"""A new backbone reaches every family's board by itself (issue 34), on the REAL definitions.

The core and one backbone (`dense_sift`) are materialized; an LVLM spec exists whose family partitions
were never materialized (as after `make demo` with SOCO-LVLM only); then a second backbone spec
(`oracle_part`) lands. The automation conditions, evaluated tick by tick with
`dg.evaluate_automation_conditions` (as the daemon's sensor does; tests/automation_ticks.py), request that backbone's partitions in
SOCO and the three families, then refresh every board (and a board materialized alone brings
model_headlines, model_summary, results_database and the results page after it); removing the spec (the
spec sensor's tick) drops its partition and refreshes every board again. Each requested run is reported to the instance as the
materializations it records (no asset body runs: the conditions and the graph are what is under test; the
fan-in IO manager then reads only the partitions that exist, see test_pipeline)."""

from __future__ import annotations

import datetime as dt
import shutil

import dagster as dg
import pytest

from soco_pipeline.defs.definitions import build_definitions
from soco_pipeline.taxonomy import ASSETS_DIR
from tests.automation_ticks import evaluate
from tests.core import DATA_AND_PAIRS

pytestmark = [pytest.mark.pipeline, pytest.mark.timeout(1500)]

BOARDS = {
    "leaderboard",
    "mmvm_leaderboard",
    "fgbmk_leaderboard",
    "fgbmk_findings",
    "tpips_leaderboard",
}
# the first per-backbone table of each family (SOCO, MMVM, FG-BMK, TPIPS)
FAMILY_ROOTS = {"feature_manifest", "mmvm_predictions", "fgbmk_global_features", "tpips_features"}
T0 = dt.datetime(2026, 12, 1, 12, 0, tzinfo=dt.UTC)
LEADERBOARD = dg.AssetKey("leaderboard")


class World:
    """The real definitions over temporary folders, an instance, and the daemon's ticks (one cursor)."""

    def __init__(self, tmp_path, instance, versioned: bool = False):
        self.specs = tmp_path / "backbones"
        self.specs.mkdir()
        (tmp_path / "lvlms").mkdir()
        self.defs = build_definitions(
            storage_root=str(tmp_path / "storage"),
            backbones_dir=str(self.specs),
            lvlms_dir=str(tmp_path / "lvlms"),
        )
        self.instance, self.cursor, self.minute, self.sensor_cursor = instance, None, 0, None
        self.versioned, self.runs = versioned, 0
        self.graph = self.defs.resolve_asset_graph()
        self.keys = list(self.graph.materializable_asset_keys)
        self.partitions = {k: self.graph.get(k).partitions_def for k in self.keys}

    def add_spec(self, name: str) -> None:
        shutil.copy(ASSETS_DIR / "backbones" / f"{name}.yaml", self.specs / f"{name}.yaml")

    def sensor_tick(self) -> dg.SensorResult:
        """One tick of the backbone spec sensor, its partition requests and observations applied."""
        sensor = self.defs.resolve_sensor_def("backbone_specs_sensor")
        ctx = dg.build_sensor_context(
            instance=self.instance,
            definitions=self.defs,
            resources={"soco": self.defs.resources["soco"]},
            cursor=self.sensor_cursor,
        )
        result = sensor(ctx)
        self.sensor_cursor = result.cursor
        for req in result.dynamic_partitions_requests:
            if isinstance(req, dg.AddDynamicPartitionsRequest):
                self.instance.add_dynamic_partitions(req.partitions_def_name, list(req.partition_keys))
            else:
                for key in req.partition_keys:
                    self.instance.delete_dynamic_partition(req.partitions_def_name, key)
        for event in result.asset_events:
            self.instance.report_runless_asset_event(event)
        return result

    def tick(self) -> dict[str, set | None]:
        """One evaluation of every automation condition: {asset: requested partitions (None: unpartitioned)}."""
        self.minute += 1
        r = evaluate(
            defs=self.defs,
            instance=self.instance,
            evaluation_time=T0 + dt.timedelta(minutes=self.minute),
            cursor=self.cursor,
        )
        self.cursor = r.cursor
        return {
            k.to_user_string(): (r.get_requested_partitions(k) if self.partitions[k] else None)
            for k in self.keys
            if r.get_num_requested(k)
        }

    def run(self, requested: dict[str, set | None]) -> None:
        """Record what the requested runs would: one materialization per requested asset partition (with a
        new data version when `versioned`, as our tables record their content hash)."""
        for asset, parts in requested.items():
            for p in sorted(parts) if parts else [None]:
                self.runs += 1
                tags = {"dagster/data_version": f"v{self.runs}"} if self.versioned else None
                self.instance.report_runless_asset_event(
                    dg.AssetMaterialization(asset, partition=p, tags=tags)
                )

    def queue(self, asset: str, partition: str) -> dg.DagsterRun:
        """A run of `asset`'s `partition` that the daemon requested and has not started (queued behind other
        runs): its planned materialization makes the partition in progress until finish()."""
        job = self.defs.resolve_implicit_global_asset_job_def()
        return self.instance.create_run_for_job(
            job, asset_selection=frozenset([dg.AssetKey(asset)]), tags={"dagster/partition": partition}
        )

    def finish(self, run: dg.DagsterRun) -> None:
        """The queued run ends: its partition is materialized (with a new data version when `versioned`)
        and the run leaves the in-progress states."""
        (key,) = run.asset_selection
        self.run({key.to_user_string(): {run.tags["dagster/partition"]}})
        self.instance.report_run_canceled(run)

    def assert_no_board_beside_its_inputs(self, ticks: list[dict[str, set | None]]) -> None:
        """No tick requested a board together with a partition of one of its inputs."""
        for tick in ticks:
            partitions = {a for a, p in tick.items() if p is not None}
            for board in BOARDS & set(tick):
                inputs = {k.to_user_string() for k in self.graph.get(dg.AssetKey(board)).parent_keys}
                assert not partitions & inputs, (board, tick)

    def until_quiet(self, max_ticks: int = 12) -> list[dict[str, set | None]]:
        """Tick and run what was requested until two ticks in a row request nothing (a board waits a tick
        after its per-model tables' update); the requests of every tick that requested something."""
        ticks, quiet = [], 0
        for _ in range(max_ticks):
            req = self.tick()
            quiet = 0 if req else quiet + 1
            if quiet == 2:
                return ticks
            if req:
                ticks.append(req)
                self.run(req)
        raise AssertionError(f"still requesting after {max_ticks} ticks: {ticks[-1]}")


@pytest.fixture
def world(tmp_path):
    (tmp_path / "dagster").mkdir()
    with dg.instance_for_test(temp_dir=str(tmp_path / "dagster")) as instance:
        w = World(tmp_path, instance)
        w.add_spec("dense_sift")
        w.sensor_tick()  # the partition of the first backbone
        instance.add_dynamic_partitions("lvlms", ["some_lvlm"])  # SOCO-LVLM's model, no family ever asked it
        for key in w.keys:  # the core and the first backbone materialized; the LVLM in SOCO-LVLM only
            part = w.partitions[key]
            if part is None:
                instance.report_runless_asset_event(dg.AssetMaterialization(key))
            elif part.name == "backbones":
                instance.report_runless_asset_event(dg.AssetMaterialization(key, partition="dense_sift"))
            elif key.to_user_string() in ("lvlm_answers", "lvlm_metrics"):
                instance.report_runless_asset_event(dg.AssetMaterialization(key, partition="some_lvlm"))
        assert w.tick() == {}  # the daemon's first tick: everything is up to date
        yield w


def test_a_new_backbone_reaches_every_family_board_and_its_removal_leaves_them(world):
    world.add_spec("oracle_part")
    assert world.sensor_tick().run_requests == []  # a new spec: a partition, no run of its own
    ticks = world.until_quiet()
    first = ticks[0]
    for root in FAMILY_ROOTS:
        assert first.get(root) == {"oracle_part"}, f"{root} not requested for the new backbone: {first}"
    assert not BOARDS & set(first)  # a board waits for the partitions in progress
    world.assert_no_board_beside_its_inputs(ticks)  # that board's run would not see them
    refreshed = set().union(*ticks[1:])
    assert BOARDS <= refreshed, f"boards not refreshed: {BOARDS - refreshed}"
    assert "results_database" in refreshed
    per_model = {a: p for t in ticks for a, p in t.items() if p is not None}
    assert all(p == {"oracle_part"} for p in per_model.values()), per_model  # only the new partition ran
    assert not any(a.startswith(("mmvm_answers", "fgbmk_answers", "tpips_lvlm")) for a in per_model)
    # a family board materialized alone (by hand): the summary, the SQL views and the results page follow it
    world.run({"mmvm_leaderboard": None})
    follow = set().union(*world.until_quiet())
    assert {"model_headlines", "model_summary", "results_database", "results_report"} <= follow, follow
    assert "leaderboard" not in follow, follow

    (world.specs / "oracle_part.yaml").unlink()
    world.sensor_tick()
    assert world.instance.get_dynamic_partitions("backbones") == ["dense_sift"]
    ticks = world.until_quiet()
    assert ticks and BOARDS <= set(ticks[0]), ticks  # every board drops the removed backbone's rows
    assert all(p is None for t in ticks for p in t.values())  # and no per-model table runs


def test_a_changed_spec_re_runs_its_partition_in_every_started_family(tmp_path):
    """The spec sensor's run for a changed spec holds that backbone's per-model tables of SOCO and of every
    family whose data exist (TPIPS was never started here, so it stays unstarted), and nothing on request
    only (probe_metrics)."""
    (tmp_path / "dagster").mkdir()
    with dg.instance_for_test(temp_dir=str(tmp_path / "dagster")) as instance:
        w = World(tmp_path, instance)
        w.add_spec("dense_sift")
        w.sensor_tick()
        for key in w.keys:
            if w.partitions[key] is None and not key.to_user_string().startswith("tpips_"):
                instance.report_runless_asset_event(dg.AssetMaterialization(key))
        spec = w.specs / "dense_sift.yaml"
        spec.write_text(spec.read_text().replace("descriptor_size: 8", "descriptor_size: 12"))
        (request,) = w.sensor_tick().run_requests
    assert request.partition_key == "dense_sift"
    selected = {k.to_user_string() for k in request.asset_selection}
    assert {"feature_manifest", "metrics", "mmvm_predictions", "mmvm_backbone_metrics"} <= selected
    assert {
        "fgbmk_global_features",
        "fgbmk_metrics",
        "fgbmk_probe_predictions",
        "fgbmk_robustness",
    } <= selected
    assert "global_metrics" in selected
    assert not {"tpips_features", "probe_metrics", "mmvm_answers", "lvlm_answers"} & selected
    assert not BOARDS & selected  # the boards follow the updates (board_condition)


def test_the_first_backbone_on_fresh_data_runs_each_board_once_after_its_tables(tmp_path):
    """On a deployment with only the data tables, a first backbone's per-model tables and the items they
    wait for arrive over several ticks; each board runs once, after them, never beside a partition it reads
    (under the daemon the leaderboard was requested beside `metrics` and failed: no metrics yet)."""
    (tmp_path / "dagster").mkdir()
    with dg.instance_for_test(temp_dir=str(tmp_path / "dagster")) as instance:
        w = World(tmp_path, instance, versioned=True)
        assert w.tick() == {}  # the daemon's ticks before the spec and the launch: nothing to run
        w.add_spec("oracle_part")
        w.sensor_tick()
        assert w.tick() == {}
        # the data run as the daemon saw it: the tables the features read were written first, and a tick
        # requested the features while the pair tables were still being written
        first = dg.AssetSelection.assets("feature_manifest").upstream().resolve(w.graph)
        first = {k.to_user_string() for k in first}
        w.run({name: None for name in DATA_AND_PAIRS if name in first})
        ticks = [w.tick()]
        assert "feature_manifest" in ticks[0] and "metrics" not in ticks[0], ticks
        w.run(ticks[0])
        w.run({name: None for name in DATA_AND_PAIRS if name not in first})
        ticks += w.until_quiet()
    w.assert_no_board_beside_its_inputs(ticks)
    runs = [i for i, t in enumerate(ticks) if "leaderboard" in t]
    assert len(runs) == 1, ticks
    assert max(i for i, t in enumerate(ticks) if "metrics" in t) < runs[0], ticks


def test_a_board_waits_while_its_per_model_inputs_own_inputs_are_queued(tmp_path):
    """Under load the daemon split a first backbone's chain into small runs: `global_metrics` was done while
    `predictions` and `four_choice_predictions` sat queued in runs of their own and `metrics` was not
    requested yet. The leaderboard, whose direct inputs were neither in progress nor just updated, was
    requested and failed ("no metrics materialized yet"). A board also waits while an input of one of its
    per-model inputs is in progress or was just updated."""
    (tmp_path / "dagster").mkdir()
    with dg.instance_for_test(temp_dir=str(tmp_path / "dagster")) as instance:
        w = World(tmp_path, instance, versioned=True)
        assert w.tick() == {}  # the daemon ticks from the start: the leaderboard is missing
        w.add_spec("oracle_part")
        w.sensor_tick()
        # the data, the items and the other boards are there; the backbone's features and global metrics done
        w.run({k.to_user_string(): None for k in w.keys if w.partitions[k] is None and k != LEADERBOARD})
        w.run({a: {"oracle_part"} for a in ["feature_manifest", "global_feature_manifest", "global_metrics"]})
        queued = [w.queue(a, "oracle_part") for a in ["predictions", "four_choice_predictions"]]
        waiting = [w.tick() for _ in range(3)]  # the ticks while those runs wait in the queue
        assert not any("leaderboard" in t or "metrics" in t for t in waiting), waiting
        for run in queued:
            w.finish(run)
        ticks = w.until_quiet()
    w.assert_no_board_beside_its_inputs(ticks)
    first = [i for i, t in enumerate(ticks) if "leaderboard" in t]
    assert first and max(i for i, t in enumerate(ticks) if "metrics" in t) < first[0], ticks
