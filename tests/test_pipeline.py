"""The whole pipeline through Dagster on a small embedded data set: outputs, checks, theory, partitions.

The module's fixture is a copy of the shared core (tests/core.py: SOCO's data, pairs and two oracle
backbones on 6 categories × 6 images) with the demo's summary materialized on it (the task families are
left to their own tests, the demo's run loop to tests/test_demo.py); the tests then inspect what it left
behind and what Dagster would do next.
"""

import datetime as dt
import shutil
from pathlib import Path

import dagster as dg
import numpy as np
import pandas as pd
import pytest

from soco_pipeline.cli import soco as cli
from soco_pipeline.cli.demo import SUMMARY
from soco_pipeline.defs.definitions import build_definitions
from soco_pipeline.report.results_db import query
from soco_pipeline.storage import PROJECT_ROOT
from tests.automation_ticks import evaluate
from tests.core import CATEGORIES, DATA_AND_PAIRS, ORACLES, PER_BACKBONE, SCHEMA_CHECKED, materializations
from tests.soco_theory import expected_concept_oracle_soc

# a whole pipeline runs in a module fixture (the first test's setup)
pytestmark = [pytest.mark.pipeline, pytest.mark.timeout(900)]


@pytest.fixture(scope="module")
def run(materialized_core, tmp_path_factory):
    """A copy of the shared core (tests/core.py: data, pairs and both oracles, each materialized once)
    with the summary the demo ends with (leaderboard, results database, correlation, results page)."""
    core = materialized_core.copy_to(tmp_path_factory.mktemp("pipeline"))
    overrides = core.overrides
    with core.instance() as instance:
        defs = build_definitions(**overrides)
        result = dg.materialize(
            list(defs.assets),
            selection=dg.AssetSelection.assets(*SUMMARY),
            instance=instance,
            resources=defs.resources,
        )
        assert result.success
        settings = defs.resources["soco"].settings()
        board = query(
            settings.duckdb_path, "SELECT * FROM leaderboard ORDER BY soc DESC", settings.tables_root
        )
        yield {
            "tmp": core.root,
            "instance": instance,
            "board": board,
            "overrides": overrides,
            "backbones": core.backbones,
            "fixture_runs": {r.run_id for r in instance.get_runs()},
        }


def _tables(run) -> Path:
    return Path(run["overrides"]["storage_root"]) / "tables"


def _count(instance, key, partition=None) -> int:
    return len(materializations(instance, key, partition))


def test_definitions_load_with_groups_and_descriptions():
    defs = build_definitions()
    graph = defs.resolve_asset_graph()
    groups = {graph.get(k).group_name for k in graph.get_all_asset_keys()}
    assert groups == {
        "data",
        "pairs",
        "backbones",
        "lvlm",
        "analysis",
        "results",
        "summary",
        "mmvm",
        "fgbmk",
        "tpips",
    }
    for key in graph.get_all_asset_keys():
        assert graph.get(key).description, f"{key} has no description"
    assert {s.name for s in defs.sensors} >= {"backbone_specs_sensor"}
    assert not list(defs.schedules or [])  # the weekly re-evaluation is an automation condition
    for key in PER_BACKBONE:
        assert "stale after cron" in graph.get(dg.AssetKey(key)).automation_condition.get_label(), key
    assert "observe on cron" in graph.get(dg.AssetKey("evaluation_protocol")).automation_condition.get_label()


def _count_fixture(run, key, partition=None) -> int:
    """Materializations of `key` by the fixture's runs (other tests add their own)."""
    records = materializations(run["instance"], key, partition)
    return sum(r.run_id in run["fixture_runs"] for r in records)


def test_every_asset_and_blocking_check_materialized(run):
    instance = run["instance"]
    for key in DATA_AND_PAIRS + list(SUMMARY):
        assert _count_fixture(run, key) == 1, key
    for b in ORACLES:
        for key in PER_BACKBONE:
            assert _count_fixture(run, key, b) == 1, (key, b)
    keys = [dg.AssetCheckKey(dg.AssetKey(n), "schema") for n in SCHEMA_CHECKED]
    records = instance.event_log_storage.get_latest_asset_check_execution_by_key(keys)
    for key in keys:
        assert records[key].event.dagster_event.event_specific_data.passed, key
    images = pd.read_parquet(_tables(run) / "image_set.parquet")
    assert set(images.category) == set(CATEGORIES)
    assert (images.groupby("category").size() == 6).all()
    rejected = pd.read_parquet(_tables(run) / "rejected_images.parquet")
    assert (
        len(rejected) > 0
        and rejected.reason.isin(
            ["too_small", "crowded", "bad_status", "invalid_pose", "invalid_keypoints"]
        ).all()
    )


def test_part_oracle_scores_near_100_everywhere(run):
    row = run["board"].set_index("backbone").loc["oracle_part"]
    for level in ["cc", "soc", "soc_geo", "cross_soc"]:
        assert row[level] >= 98, (level, row[level])


def test_concept_oracle_matches_its_theoretical_soc(run):
    tables = _tables(run)
    corr = pd.read_parquet(tables / "correspondences.parquet")
    pairs = pd.read_parquet(tables / "image_pairs.parquet")
    keypoints = pd.read_parquet(tables / "keypoints.parquet")
    images = pd.read_parquet(tables / "image_set.parquet")
    expected = expected_concept_oracle_soc(corr, pairs, keypoints, images, alpha=0.1)
    expected_geo = expected_concept_oracle_soc(corr, pairs, keypoints, images, alpha=0.1, geo=True)
    row = run["board"].set_index("backbone").loc["oracle_concept"]
    assert row["cc"] >= 98
    # SOC is what a uniform pick among the k visible same-concept targets scores (ties broken by the
    # oracle's seeded noise), far below CC.
    assert abs(row["soc"] - expected) < 6, (row["soc"], expected)
    assert abs(row["soc_geo"] - expected_geo) < 6, (row["soc_geo"], expected_geo)
    assert row["cc"] - row["soc"] > 20


def test_results_database_and_cli(run, monkeypatch, capsys):
    monkeypatch.setenv("SOCO_STORAGE", run["overrides"]["storage_root"])
    assert cli.main(["sql", "select backbone, soc from leaderboard order by backbone"]) == 0
    out = capsys.readouterr().out
    assert "oracle_part" in out and "oracle_concept" in out
    sql = "select count(*) as n from predictions p join pairs using (pair_id) where p.mode = 'free'"
    assert cli.main(["sql", sql, "--format", "csv"]) == 0
    assert int(capsys.readouterr().out.split()[-1]) > 0
    assert (
        cli.main(
            ["sql", "select count(*) filter (where not evaluated) as n from eval_pairs", "--format", "csv"]
        )
        == 0
    )
    assert capsys.readouterr().out.split()[-1] == "0"
    assert cli.main(["sql", "select * from no_such_table"]) == 2
    assert "available tables" in capsys.readouterr().err
    assert cli.main(["sql", "selec 1"]) == 2
    assert "SQL error" in capsys.readouterr().err
    monkeypatch.setenv("SOCO_STORAGE", str(run["tmp"] / "nothing_here"))
    assert cli.main(["leaderboard"]) == 2
    assert "make demo" in capsys.readouterr().err


def test_rescoring_with_another_alpha_runs_no_backbone(run, tmp_path, monkeypatch):
    from soco_pipeline.backbones import base

    def no_forward(*args, **kwargs):
        raise AssertionError("re-scoring must not run a backbone")

    monkeypatch.setattr(base.Backbone, "extract", no_forward)
    text = (PROJECT_ROOT / "assets" / "protocol.yaml").read_text()
    assert "alphas: [0.05, 0.1, 0.15]" in text
    protocol = tmp_path / "protocol.yaml"
    protocol.write_text(text.replace("alphas: [0.05, 0.1, 0.15]", "alphas: [0.05, 0.1, 0.15, 0.2]"))
    defs = build_definitions(**run["overrides"], protocol_path=str(protocol))
    result = dg.materialize(
        list(defs.assets),
        selection=dg.AssetSelection.assets("metrics"),
        instance=run["instance"],
        resources=defs.resources,
        partition_key="oracle_part",
    )
    assert result.success
    metrics = pd.read_parquet(_tables(run) / "metrics" / "oracle_part.parquet")
    assert np.isclose(metrics.alpha.dropna().unique(), 0.2).any()
    # Back to the default protocol for the other tests.
    defs = build_definitions(**run["overrides"])
    assert dg.materialize(
        list(defs.assets),
        selection=dg.AssetSelection.assets("metrics"),
        instance=run["instance"],
        resources=defs.resources,
        partition_key="oracle_part",
    ).success


def test_adding_a_backbone_materializes_only_its_partition(run):
    instance, backbones = run["instance"], run["backbones"]
    shutil.copy(PROJECT_ROOT / "assets" / "backbones" / "dense_sift.yaml", backbones)
    defs = build_definitions(**run["overrides"])
    before = {(k, b): _count(instance, k, b) for k in PER_BACKBONE for b in ORACLES}
    before_data = {k: _count(instance, k) for k in DATA_AND_PAIRS}

    # The automation daemon's tick before the new spec lands: nothing to do.
    tick = evaluate(defs=defs, instance=instance)
    assert tick.total_requested == 0
    # The sensor adds exactly the new partition; a second tick adds nothing.
    sensor = defs.resolve_sensor_def("backbone_specs_sensor")
    resources = {"soco": defs.resources["soco"]}
    result = sensor(dg.build_sensor_context(instance=instance, definitions=defs, resources=resources))
    assert [r.partition_keys for r in result.dynamic_partitions_requests] == [["dense_sift"]]
    instance.add_dynamic_partitions("backbones", ["dense_sift"])
    again = sensor(
        dg.build_sensor_context(
            instance=instance, definitions=defs, cursor=result.cursor, resources=resources
        )
    )
    assert not again.dynamic_partitions_requests and not again.run_requests

    # The eager automation condition requests the new partition's assets only (and the summaries).
    evaluation = evaluate(defs=defs, instance=instance, cursor=tick.cursor)
    for key in DATA_AND_PAIRS:
        assert evaluation.get_num_requested(dg.AssetKey(key)) == 0, key
    assert evaluation.get_requested_partitions(dg.AssetKey("feature_manifest")) == {"dense_sift"}
    dg.materialize(
        list(defs.assets),
        selection=dg.AssetSelection.assets(*PER_BACKBONE),
        instance=instance,
        resources=defs.resources,
        partition_key="dense_sift",
    )
    assert _count(instance, "metrics", "dense_sift") == 1
    assert before == {(k, b): _count(instance, k, b) for k in PER_BACKBONE for b in ORACLES}
    assert before_data == {k: _count(instance, k) for k in DATA_AND_PAIRS}


WEEK = dt.timedelta(days=7)  # a weekly cron (SOCO_REEVALUATE_CRON) ticks at least once in any such span


def _ticks(defs, instance):
    """Successive evaluations of the automation conditions (the daemon's ticks) at chosen times."""
    state = {"cursor": None}

    def tick(when: dt.datetime):
        result = evaluate(defs=defs, instance=instance, evaluation_time=when, cursor=state["cursor"])
        state["cursor"] = result.cursor
        return result

    return tick


def _requested(result, keys=PER_BACKBONE) -> set[tuple[str, str]]:
    return {(k, p) for k in keys for p in result.get_requested_partitions(dg.AssetKey(k)) if p in ORACLES}


def test_weekly_reevaluation_skips_the_unchanged_and_reruns_a_changed_spec(run):
    """After the weekly tick, only a backbone whose spec's computation changed (the sensor observed it) is due;
    a comment alone changes nothing."""
    instance = run["instance"]
    defs = build_definitions(**run["overrides"])
    tick, now = _ticks(defs, instance), dt.datetime.now(dt.UTC)
    tick(now)
    assert _requested(tick(now + WEEK)) == set()  # evaluated after their last input change: up to date
    sensor = defs.resolve_sensor_def("backbone_specs_sensor")
    resources = {"soco": defs.resources["soco"]}

    def sensor_tick(cursor):
        result = sensor(
            dg.build_sensor_context(instance=instance, definitions=defs, cursor=cursor, resources=resources)
        )
        for event in result.asset_events:  # what the daemon records: the observations of changed specs
            instance.report_runless_asset_event(event)
        return result

    base = changed = sensor_tick(None)
    spec = run["backbones"] / "oracle_concept.yaml"
    saved = spec.read_text()
    spec.write_text(saved + "\n# touched\n")  # a comment changes no computation: nothing is due (issue 53)
    try:
        changed = sensor_tick(base.cursor)
        assert [r.partition_key for r in changed.run_requests] == []
        spec.write_text(saved.replace("noise: 0.05", "noise: 0.06"))  # a knob the oracle computes with
        changed = sensor_tick(changed.cursor)
        assert [r.partition_key for r in changed.run_requests] == ["oracle_concept"]
        due = tick(now + 2 * WEEK)
    finally:
        spec.write_text(saved)  # the other tests see the spec the demo ran
        sensor_tick(changed.cursor)  # and its observed version
    assert _requested(due, ["feature_manifest"]) == {("feature_manifest", "oracle_concept")}


def test_an_unchanged_data_table_rematerialized_requests_no_backbone(run):
    """Tables carry their content hash as Dagster data version: the same image set materialized again
    is the same version, so neither the change condition nor the weekly re-evaluation re-runs a backbone."""
    instance = run["instance"]
    defs = build_definitions(**run["overrides"])
    tick, now = _ticks(defs, instance), dt.datetime.now(dt.UTC)

    def materialize_and_tick(when):
        assert dg.materialize(
            list(defs.assets),
            selection=dg.AssetSelection.assets("image_set", "rejected_images"),
            instance=instance,
            resources=defs.resources,
        ).success
        return tick(when)

    materialize_and_tick(now)
    after = materialize_and_tick(now + dt.timedelta(minutes=1))  # the same table again
    latest = instance.fetch_materializations(dg.AssetKey("image_set"), limit=2).records
    versions = [r.asset_materialization.tags["dagster/data_version"] for r in latest]
    assert len(versions) == 2 and versions[0] == versions[1]
    for key in PER_BACKBONE + ["global_feature_manifest", "global_metrics"]:
        assert after.get_num_requested(dg.AssetKey(key)) == 0, key
    assert _requested(tick(now + WEEK)) == set()


def test_a_changed_protocol_makes_the_weekly_tick_re_evaluate_the_backbones(run, tmp_path):
    """The protocol is an observable source (data version: its version hash) observed on the weekly cron: a
    protocol that differs from the one of the backbones' last runs makes their evaluation (not their
    features) due."""
    text = (PROJECT_ROOT / "assets" / "protocol.yaml").read_text()
    protocol = tmp_path / "protocol.yaml"
    protocol.write_text(text.replace("threshold: strict", "threshold: inclusive"))
    instance = run["instance"]
    defs = build_definitions(**run["overrides"], protocol_path=str(protocol))
    tick, now = _ticks(defs, instance), dt.datetime.now(dt.UTC)
    tick(now)
    weekly = tick(now + WEEK)
    assert weekly.get_num_requested(dg.AssetKey("evaluation_protocol")) == 1  # the tick observes the file
    assert _requested(weekly) == set()

    def observe_protocol(definitions):  # the observation run the daemon launches
        job = definitions.resolve_implicit_global_asset_job_def()
        assert job.execute_in_process(
            instance=instance, asset_selection=[dg.AssetKey("evaluation_protocol")]
        ).success

    try:
        observe_protocol(defs)
        due = tick(now + WEEK + dt.timedelta(minutes=1))
    finally:
        observe_protocol(build_definitions(**run["overrides"]))  # the other tests see the demo's protocol
    for key in ["predictions", "four_choice_predictions", "metrics"]:
        assert {p for k, p in _requested(due) if k == key} == set(ORACLES), key
    assert _requested(due, ["feature_manifest"]) == set()


def test_official_release_layout_round_trips_through_the_pipeline(run, monkeypatch):
    """Export our tables in the SOCO release layout, import it as the source, score the same backbone."""
    release = run["tmp"] / "release"
    monkeypatch.setenv("SOCO_STORAGE", run["overrides"]["storage_root"])
    assert cli.main(["export-release", str(release)]) == 0
    assert cli.main(["export-release", str(release)]) == 2  # refuses to overwrite without --force
    assert (release / "PairAnnotations" / "intra").is_dir()

    overrides = {
        **run["overrides"],
        "storage_root": str(run["tmp"] / "from_release"),
        "source": "soco_release",
        "soco_release_root": str(release),
    }
    # The oracle reads the generator's ground truth by image id: point it at the embedded data set.
    shutil.copytree(
        Path(run["overrides"]["storage_root"]) / "embedded", Path(overrides["storage_root"]) / "embedded"
    )
    # An instance of its own: this import's materializations must not become the module run's latest.
    (run["tmp"] / "dagster_release_round_trip").mkdir()
    with dg.instance_for_test(temp_dir=str(run["tmp"] / "dagster_release_round_trip")) as instance:
        instance.add_dynamic_partitions("backbones", ["oracle_part"])
        defs = build_definitions(**overrides)
        assert dg.materialize(
            list(defs.assets),
            selection=dg.AssetSelection.groups("data", "pairs"),
            instance=instance,
            resources=defs.resources,
        ).success
        assert dg.materialize(
            list(defs.assets),
            selection=dg.AssetSelection.assets(*PER_BACKBONE),
            instance=instance,
            resources=defs.resources,
            partition_key="oracle_part",
        ).success

    ours, theirs = _tables(run), Path(overrides["storage_root"]) / "tables"
    pairs = pd.read_parquet(ours / "image_pairs.parquet")
    evaluated = set(pairs.pair_id[pairs.evaluated])
    cols = ["pair_id", "level", "kind", "src_keypoint", "trg_keypoint", "concept", "geo", "n_candidates"]

    def canonical(df):
        df = df[cols].astype({c: str for c in cols[:6]})
        return df.sort_values(cols[:5]).reset_index(drop=True)

    a = pd.read_parquet(ours / "correspondences.parquet")
    b = pd.read_parquet(theirs / "correspondences.parquet")
    pd.testing.assert_frame_equal(canonical(a[a.pair_id.isin(evaluated)]), canonical(b))
    m_ours = pd.read_parquet(ours / "metrics" / "oracle_part.parquet")
    m_theirs = pd.read_parquet(theirs / "metrics" / "oracle_part.parquet")
    key = ["metric", "alpha", "reduction", "scope", "group"]
    joined = m_ours.merge(m_theirs, on=key, suffixes=("_ours", "_release"))
    assert len(joined) == len(m_ours)
    assert np.allclose(joined.value_ours, joined.value_release)


def test_deleted_spec_leaves_the_boards_its_tables_stay(run):
    """Issue 34: a removed spec loses its partition (the sensor), so its row leaves the leaderboard; its
    per-backbone tables stay on disk (re-adding the spec brings the row back without a rerun)."""
    instance, spec = run["instance"], run["backbones"] / "oracle_concept.yaml"
    defs = build_definitions(**run["overrides"])
    sensor = defs.resolve_sensor_def("backbone_specs_sensor")
    resources = {"soco": defs.resources["soco"]}
    seen = sensor(dg.build_sensor_context(instance=instance, definitions=defs, resources=resources))
    saved = spec.read_text()

    def refresh_boards() -> None:
        assert dg.materialize(
            list(defs.assets),
            selection=dg.AssetSelection.assets("leaderboard", "results_database"),
            instance=instance,
            resources=defs.resources,
        ).success

    spec.unlink()
    try:
        ctx = dg.build_sensor_context(
            instance=instance, definitions=defs, resources=resources, cursor=seen.cursor
        )
        result = sensor(ctx)
        assert not result.run_requests
        (delete,) = result.dynamic_partitions_requests
        assert list(delete.partition_keys) == ["oracle_concept"]
        instance.delete_dynamic_partition("backbones", "oracle_concept")
        assert {e.asset_key.to_user_string() for e in result.asset_events} == {"model_specs"}
        refresh_boards()
        board = pd.read_parquet(_tables(run) / "leaderboard.parquet").set_index("backbone")
        assert "oracle_concept" not in board.index
        assert board.loc["oracle_part", "spec_present"]
        assert (_tables(run) / "metrics" / "oracle_concept.parquet").exists()
    finally:
        spec.write_text(saved)
        if "oracle_concept" not in instance.get_dynamic_partitions("backbones"):
            instance.add_dynamic_partitions("backbones", ["oracle_concept"])
        # the module's other tests read the fixture's boards, in any order: put its row back
        refresh_boards()


def test_cli_add_backbone_validates_then_copies(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("SOCO_BACKBONES_DIR", str(tmp_path))
    preset = PROJECT_ROOT / "assets" / "backbone_presets" / "dinov2_vitb14.yaml"
    # Its hf: weights are not in this machine's cache: refused unless asked (tests/test_add_backbone.py).
    assert cli.main(["add-backbone", str(preset), "--skip-weights-check"]) == 0
    assert (tmp_path / "dinov2_vitb14.yaml").read_text() == preset.read_text()
    assert cli.main(["add-backbone", str(preset), "--skip-weights-check"]) == 2  # exists: needs --force
    assert "--force" in capsys.readouterr().err
    bad = tmp_path / "broken.yaml"
    spec = (PROJECT_ROOT / "assets" / "backbones" / "vit_small_random.yaml").read_text()
    assert "batch_size: 4" in spec
    bad.write_text(spec.replace("batch_size: 4", "batch_size: -3"))
    dest = tmp_path / "added"
    dest.mkdir()
    monkeypatch.setenv("SOCO_BACKBONES_DIR", str(dest))
    assert cli.main(["add-backbone", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "batch_size" in err and "broken.yaml" in err
    assert not list(dest.iterdir())


def _import_release(run, release: Path, name: str, backbones: Path) -> Path:
    """Import a release as the source of a fresh storage root and score every spec in `backbones`;
    asserts every blocking asset check passed. Returns the tables folder."""
    # Every category of the release (a selection by the embedded names would drop the renamed ones).
    overrides = {
        **{k: v for k, v in run["overrides"].items() if k != "categories"},
        "storage_root": str(run["tmp"] / name),
        "source": "soco_release",
        "soco_release_root": str(release),
        "backbones_dir": str(backbones),
    }
    specs = sorted(p.stem for p in backbones.glob("*.yaml"))
    (run["tmp"] / f"dagster_{name}").mkdir()
    with dg.instance_for_test(temp_dir=str(run["tmp"] / f"dagster_{name}")) as instance:
        instance.add_dynamic_partitions("backbones", specs)
        defs = build_definitions(**overrides)
        assert dg.materialize(
            list(defs.assets),
            selection=dg.AssetSelection.groups("data", "pairs"),
            instance=instance,
            resources=defs.resources,
        ).success
        for b in specs:
            assert dg.materialize(
                list(defs.assets),
                selection=dg.AssetSelection.assets(*PER_BACKBONE),
                instance=instance,
                resources=defs.resources,
                partition_key=b,
            ).success
        keys = [dg.AssetCheckKey(dg.AssetKey(n), "schema") for n in SCHEMA_CHECKED]
        records = instance.event_log_storage.get_latest_asset_check_execution_by_key(keys)
        for key in keys:
            assert records[key].event.dagster_event.event_specific_data.passed, key
    return Path(overrides["storage_root"]) / "tables"


def test_a_release_with_its_own_names_scores_the_same(run, monkeypatch):
    """Rename every category, keypoint, concept and node of an exported release (none is known to
    assets/taxonomy.yaml): it imports with its own taxonomy, passes every check, builds the same four-choice
    items and scores the same numbers, metric by metric, category by category, alpha by alpha."""
    from soco_pipeline.report.results_db import query, refresh_views
    from soco_pipeline.taxonomy import load_taxonomy
    from tests.fixtures_data import release_renaming, rename_release

    plain, renamed = run["tmp"] / "release_plain", run["tmp"] / "release_renamed"
    monkeypatch.setenv("SOCO_STORAGE", run["overrides"]["storage_root"])
    assert cli.main(["export-release", str(plain)]) == 0
    tax = load_taxonomy()
    mapping = release_renaming(tax)
    rename_release(str(plain), str(renamed), mapping)
    assert not {p.name for p in (renamed / "Images").iterdir()} & set(tax.categories)
    backbones = run["tmp"] / "backbones_release"
    backbones.mkdir()
    shutil.copy(PROJECT_ROOT / "assets" / "backbones" / "dense_sift.yaml", backbones)
    ours = _import_release(run, plain, "from_plain", backbones)
    theirs = _import_release(run, renamed, "from_renamed", backbones)
    inverse = {v: k for k, v in mapping.items()}

    # The run's taxonomy is a table with the release's names, queryable in SQL.
    db = str(theirs.parent / "results.duckdb")  # beside its tables, as the pipeline keeps it
    refresh_views(db, str(theirs))
    cats = query(db, "select category, supercategory, count(*) as n from taxonomy group by all order by 1")
    assert sorted(inverse[c] for c in cats.category) == sorted(CATEGORIES)
    assert (cats.supercategory.to_numpy() == [tax.supercategory(inverse[c]) for c in cats.category]).all()

    options = ["src_keypoint", "option_a", "option_b", "option_c", "option_d"]
    a = pd.read_parquet(ours / "four_choice.parquet")
    b = pd.read_parquet(theirs / "four_choice.parquet")
    assert len(a) > 0
    pd.testing.assert_frame_equal(b.assign(**{c: b[c].map(inverse) for c in options}), a)
    assert len(pd.read_parquet(theirs / "descriptions.parquet")) == len(
        pd.read_parquet(ours / "descriptions.parquet")
    )

    m_ours = pd.read_parquet(ours / "metrics" / "dense_sift.parquet")
    m_theirs = pd.read_parquet(theirs / "metrics" / "dense_sift.parquet")
    m_theirs["group"] = m_theirs["group"].map(lambda g: inverse.get(g, g))
    key = ["metric", "alpha", "reduction", "scope", "group"]
    joined = m_ours.merge(m_theirs, on=key, suffixes=("_ours", "_renamed"), how="outer", indicator=True)
    assert (joined["_merge"] == "both").all() and len(joined) == len(m_ours) == len(m_theirs)
    assert set(m_ours.metric) >= {"cc", "soc", "soc_geo", "cross_soc", "cross_cc", "four_choice"}
    assert set(m_ours.group[m_ours.scope == "category"]) == set(CATEGORIES)
    np.testing.assert_array_equal(joined.n_ours, joined.n_renamed)
    np.testing.assert_allclose(joined.value_ours, joined.value_renamed, rtol=0, atol=1e-9)


def test_export_results_writes_the_official_scorers_shape(run, monkeypatch, capsys):
    import json

    monkeypatch.setenv("SOCO_STORAGE", run["overrides"]["storage_root"])
    out = run["tmp"] / "results" / "oracle_part.json"
    assert cli.main(["export-results", "oracle_part", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert {"dataset", "model", "created_at", "settings", "metrics"} <= set(doc) and doc[
        "model"
    ] == "oracle_part"
    assert doc["settings"]["threshold"] == 0.1 and doc["settings"]["reduction"] == "pair_then_category"
    board = run["board"].set_index("backbone").loc["oracle_part"]
    pairs = pd.read_parquet(_tables(run) / "image_pairs.parquet")
    pairs = pairs[pairs.evaluated]
    metrics = pd.read_parquet(_tables(run) / "metrics" / "oracle_part.parquet")
    for level, (semantic, concept) in {"intra": ("soc", "cc"), "cross": ("cross_soc", "cross_cc")}.items():
        res = doc["metrics"][level]
        assert set(res["overall"]) == {"pairs", "categories", "semantic_pck", "concept_pck"}
        assert res["overall"]["semantic_pck"] == pytest.approx(board[semantic])
        assert res["overall"]["concept_pck"] == pytest.approx(board[concept])
        assert res["overall"]["pairs"] == (pairs.level == level).sum() > 0
        cats = res["per_category"]
        assert sum(c["pairs"] for c in cats.values()) == res["overall"]["pairs"]
        for name, c in cats.items():
            assert set(c) == {
                "pairs",
                "semantic_pck",
                "concept_pck",
                "semantic_keypoints",
                "concept_keypoints",
            }
            row = metrics[
                (metrics.metric == semantic)
                & (metrics.scope == "category")
                & (metrics.group == name)
                & (metrics.reduction == "official")
                & np.isclose(metrics.alpha, 0.1)
            ]
            assert (
                c["semantic_pck"] == pytest.approx(row.value.iloc[0])
                and c["semantic_keypoints"] == row.n.iloc[0]
            )
        # The official overall value is the unweighted mean over the categories.
        values = [c["concept_pck"] for c in cats.values() if c["concept_pck"] is not None]
        assert res["overall"]["concept_pck"] == pytest.approx(np.mean(values))
    assert "cross" in capsys.readouterr().out
    assert cli.main(["export-results", "no_such_backbone", str(out)]) == 2
    err = capsys.readouterr().err
    assert "unknown backbone 'no_such_backbone'" in err and "Known backbones: " in err
