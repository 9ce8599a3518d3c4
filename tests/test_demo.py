"""The demo's run loop: task families found in the Definitions, and one bad spec stops only its partition."""

from __future__ import annotations

import shutil

import dagster as dg
import pytest
import yaml

from soco_pipeline.cli.demo import (
    PER_BACKBONE,
    SUMMARY,
    Runner,
    demo_job,
    families,
    one_build_per_run,
    run_demo,
    run_families,
)
from soco_pipeline.defs.definitions import build_definitions
from soco_pipeline.storage import PROJECT_ROOT
from tests.core import DATA_AND_PAIRS, SCHEMA_CHECKED, materializations
from tests.dagster_server import write_instance_yaml
from tests.toy_family import toy_definitions

pytestmark = pytest.mark.pipeline


def test_families_are_the_groups_with_a_leaderboard_asset(tmp_path):
    found = families(toy_definitions(str(tmp_path)))
    assert [f.name for f in found] == ["askers", "toy"]  # `loose` has no loose_leaderboard
    toy = found[1]
    assert toy.once == [dg.AssetKey("toy_items")] and toy.per_backbone == [dg.AssetKey("toy_scores")]
    assert toy.per_lvlm == [] and toy.leaderboard == dg.AssetKey("toy_leaderboard")
    assert found[0].per_lvlm == [dg.AssetKey("askers_answers")]
    # In the project the LVLM group follows the convention (and so does every task family); SOCO's own
    # groups are run by name.
    found = {f.name: f for f in families(build_definitions())}
    assert "lvlm" in found and not set(found) & {"data", "pairs", "features", "evaluation", "analysis"}
    # a summary over partitioned assets runs with the leaderboard, not before the partitions
    assert found["fgbmk"].after == [dg.AssetKey("fgbmk_findings")]
    assert dg.AssetKey("fgbmk_items") in found["fgbmk"].once


def test_the_demo_runs_a_family_per_backbone_then_prints_its_leaderboard(tmp_path):
    home, storage = tmp_path / "home", tmp_path / "storage"
    write_instance_yaml(home, storage)
    defs = toy_definitions(str(storage))
    lines: list[str] = []
    with dg.DagsterInstance.from_config(str(home)) as instance:
        instance.add_dynamic_partitions("backbones", ["ab", "abcd"])
        runner = Runner(
            defs, instance, {"storage": str(storage)}, ("tests.toy_family", "toy_job"), lines.append
        )
        boards = run_families(defs, runner, backbones=["ab", "abcd"], lvlms=[])
        assert runner.failed == {}
        runs = instance.get_runs()
    assert list(boards) == ["toy"]
    board_lines = [line for line in boards["toy"].splitlines() if line.startswith("| ab")]
    assert [line.split("|")[1].strip() for line in board_lines] == ["abcd", "ab"]  # 24.0 before 12.0
    assert "askers: no backbone or LVLM spec" in " ".join(lines)
    assert sorted((r.job_name, r.tags.get("dagster/partition")) for r in runs) == [
        ("demo_toy", None),
        ("demo_toy_backbone", "ab"),
        ("demo_toy_backbone", "abcd"),
        ("demo_toy_leaderboard", None),
    ]


def test_a_second_pass_on_the_same_storage_is_all_cached_and_the_boards_unchanged(tmp_path):
    """Issue 53: with `skip_fresh` (as `make demo` runs), a second pass over a materialized storage with nothing
    changed launches no run: every stage is fresh by Dagster's stale status (code versions and the data version
    of each input as when it was made), reported cached, and the boards are byte-identical."""
    home, storage = tmp_path / "home", tmp_path / "storage"
    write_instance_yaml(home, storage)
    defs = toy_definitions(str(storage))
    location = ("tests.toy_family", "toy_job")

    def tables() -> dict[str, bytes]:
        return {str(p.relative_to(storage)): p.read_bytes() for p in sorted(storage.rglob("*.parquet"))}

    with dg.DagsterInstance.from_config(str(home)) as instance:
        instance.add_dynamic_partitions("backbones", ["ab", "abcd"])
        lines: list[str] = []
        runner = Runner(defs, instance, {"storage": str(storage)}, location, lines.append, skip_fresh=True)
        first = run_families(defs, runner, backbones=["ab", "abcd"], lvlms=[])
        assert runner.cached == [] and len(instance.get_runs()) == 4
        stored = tables()
        again = Runner(defs, instance, {"storage": str(storage)}, location, lines.append, skip_fresh=True)
        second = run_families(defs, again, backbones=["ab", "abcd"], lvlms=[])
        assert again.failed == {} and len(instance.get_runs()) == 4  # no run launched
        assert again.cached == ["toy", "toy / backbone ab", "toy / backbone abcd", "toy leaderboard"]
        assert second == first and tables() == stored
        # a new partition: only its own stage and the board run (the board is stale: a new input partition)
        instance.add_dynamic_partitions("backbones", ["abc"])
        third = Runner(defs, instance, {"storage": str(storage)}, location, lines.append, skip_fresh=True)
        run_families(defs, third, backbones=["ab", "abc", "abcd"], lvlms=[])
        assert third.cached == ["toy", "toy / backbone ab", "toy / backbone abcd"]
        assert sorted(r.tags.get("dagster/partition") or r.job_name for r in instance.get_runs()[:2]) == [
            "abc",
            "demo_toy_leaderboard",
        ]
    assert "toy / backbone ab: cached, skipped" in lines


def test_what_dagster_does_not_version_is_in_the_settings_fingerprint(tmp_path):
    """A stage made under other settings is not fresh (cli/freshness.Freshness compares the runs' `soco/settings` tag):
    the fingerprint moves with the data set's settings and with a family config file's contents, and only
    with what changed."""
    from soco_pipeline.cli.freshness import settings_fingerprint

    config = tmp_path / "mmvm.yaml"
    config.write_bytes((PROJECT_ROOT / "assets" / "mmvm.yaml").read_bytes())
    base = dict(storage_root=str(tmp_path / "storage"), mmvm_config_path=str(config))
    first = settings_fingerprint(build_definitions(**base))
    assert settings_fingerprint(build_definitions(**base)) == first
    assert settings_fingerprint(build_definitions(**base, categories=["car", "dog"])) != first
    config.write_text(config.read_text() + "\n# an edit\n")
    assert settings_fingerprint(build_definitions(**base)) != first


@pytest.mark.timeout(900)
def test_a_bad_spec_stops_only_its_own_partition(tmp_path, monkeypatch):
    """A timm `resnet18` spec dropped into the folder (it fails when the model is built, or earlier once
    specs are validated alike everywhere) fails alone: the other backbone and the leaderboard still run,
    and the demo materialized each of the data, the good backbone's chain and the summary once.
    SOCO only (SOCO_DEMO_FAMILIES=none): the families would extract resnet18's features three more times."""
    monkeypatch.setenv("SOCO_DEMO_FAMILIES", "none")
    backbones = tmp_path / "backbones"
    backbones.mkdir()
    shutil.copy(PROJECT_ROOT / "assets" / "backbones" / "oracle_part.yaml", backbones)
    spec = yaml.safe_load((PROJECT_ROOT / "assets" / "backbones" / "vit_small_random.yaml").read_text())
    (backbones / "resnet_dropped.yaml").write_text(
        yaml.safe_dump({**spec, "model": "resnet18", "device": "cpu"})
    )
    home = tmp_path / "home"
    write_instance_yaml(home, tmp_path / "storage")
    overrides = dict(
        storage_root=str(tmp_path / "storage"),
        backbones_dir=str(backbones),
        categories=["car", "dog"],
        images_per_category=4,
    )
    with dg.DagsterInstance.from_config(str(home)) as instance:
        result = run_demo(instance=instance, **overrides)
        # the good partition's chain, the data and the summary: each materialized once, blocking checks passed
        counts = {
            (key, partition): len(materializations(instance, key, partition))
            for key, partition in [(k, None) for k in [*DATA_AND_PAIRS, *SUMMARY]]
            + [(k, "oracle_part") for k in PER_BACKBONE]
        }
        keys = [dg.AssetCheckKey(dg.AssetKey(n), "schema") for n in SCHEMA_CHECKED]
        checks = instance.event_log_storage.get_latest_asset_check_execution_by_key(keys)
        assert all(checks[k].event.dagster_event.event_specific_data.passed for k in keys)
    assert counts == dict.fromkeys(counts, 1), counts
    assert list(result.failed) == ["backbone resnet_dropped"], result.failed
    assert (
        "resnet18" in result.failed["backbone resnet_dropped"]
        or "dynamic_img_size" in result.failed["backbone resnet_dropped"]
    )
    assert result.board is not None and list(result.board.backbone) == ["oracle_part"]


def test_a_run_builds_its_job_once_and_nothing_is_kept_after_it(tmp_path):
    """Dagster loads a run's job from its pointer several times while launching it; `one_build_per_run` makes
    that one build of the definitions, and outside a run every call builds anew (an edited config is seen)."""
    overrides = {"storage_root": str(tmp_path)}
    keys = ["embedded_dataset"]
    with one_build_per_run():
        first = demo_job("demo_data_and_pairs", keys, overrides)
        assert demo_job("demo_data_and_pairs", keys, overrides) is first
        assert demo_job("demo_data_and_pairs", keys, {"storage_root": str(tmp_path / "other")}) is not first
    assert demo_job("demo_data_and_pairs", keys, overrides) is not first
    assert first.name == "demo_data_and_pairs"
