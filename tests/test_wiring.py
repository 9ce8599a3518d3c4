"""The Dagster layer's wiring: group folders load by themselves, every table is published only after its
blocking check, the run's taxonomy and protocol reach the assets that use them."""

import inspect
import textwrap
from pathlib import Path

import dagster as dg
import numpy as np
import pandas as pd
import pytest

from soco_pipeline.defs.definitions import build_definitions, group_folders, load_group_folders
from soco_pipeline.storage import PROJECT_ROOT, write_parquet_atomic
from soco_pipeline.tables import table_for

pytestmark = pytest.mark.pipeline

DEFS = PROJECT_ROOT / "soco_pipeline" / "defs"


def test_every_group_folder_is_loaded_and_every_asset_lives_in_its_groups_folder():
    defs = build_definitions()
    graph = defs.resolve_asset_graph()
    folders = {m.__name__.rsplit(".", 1)[-1] for m in group_folders()}
    assert folders == {p.name for p in DEFS.iterdir() if (p / "__init__.py").exists()} - {"shared"}
    groups = {}
    for key in graph.get_all_asset_keys():
        groups.setdefault(graph.get(key).group_name, set()).add(key.to_user_string())
    assert set(groups) == folders
    for assets_def in defs.assets:
        if isinstance(assets_def, dg.SourceAsset):  # the observable spec files and protocol
            fn, keys = assets_def.observe_fn, [assets_def.key]
        else:
            fn, keys = assets_def.op.compute_fn.decorated_fn, assets_def.keys
        module = inspect.getmodule(inspect.unwrap(fn))
        for key in keys:
            group = graph.get(key).group_name
            folder = f"soco_pipeline.defs.{group}"
            # or a builder of the shared layer that the group's folder calls (e.g. shared/watch.family_history)
            in_folder = module.__name__ == folder or module.__name__.startswith(folder + ".")
            assert in_folder or module.__name__.startswith("soco_pipeline.defs.shared."), (
                key,
                module.__name__,
            )


def test_a_new_family_folder_joins_with_no_edit_elsewhere(tmp_path, monkeypatch):
    """A throwaway defs package with one new folder: its module-level asset, check and sensor load."""
    pkg = tmp_path / "toy_defs"
    (pkg / "toyfamily").mkdir(parents=True)
    (pkg / "shared").mkdir()
    for init in (pkg / "__init__.py", pkg / "toyfamily" / "__init__.py", pkg / "shared" / "__init__.py"):
        init.write_text("")
    (pkg / "toyfamily" / "assets.py").write_text(
        textwrap.dedent('''
        import dagster as dg

        @dg.asset(group_name="toyfamily", code_version="1")
        def toy_items() -> int:
            """Items of a toy family."""
            return 1

        @dg.asset_check(asset=toy_items)
        def toy_items_positive(toy_items: int) -> dg.AssetCheckResult:
            return dg.AssetCheckResult(passed=toy_items > 0)
    ''')
    )
    (pkg / "toyfamily" / "sensors.py").write_text(
        textwrap.dedent("""
        import dagster as dg

        @dg.sensor(asset_selection=dg.AssetSelection.assets("toy_items"))
        def toy_sensor(context):
            return dg.SkipReason("nothing")
    """)
    )
    (pkg / "shared" / "helpers.py").write_text(
        "import dagster as dg\n\n@dg.asset\ndef not_a_group_asset():\n    return 1\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    import importlib

    toy = importlib.import_module("toy_defs")
    defs = load_group_folders(toy)
    keys = {k.to_user_string() for k in defs.resolve_asset_graph().get_all_asset_keys()}
    assert keys == {"toy_items"}  # shared/ holds helpers, never definitions
    assert {s.name for s in defs.sensors} == {"toy_sensor"}
    assert (
        dg.AssetCheckKey(dg.AssetKey("toy_items"), "toy_items_positive")
        in defs.resolve_asset_graph().asset_check_keys
    )


def _protocol(tmp_path, **changes) -> str:
    text = (PROJECT_ROOT / "assets" / "protocol.yaml").read_text()
    for old, new in changes.items():
        assert old in text, old
        text = text.replace(old, new)
    path = tmp_path / "protocol.yaml"
    path.write_text(text)
    return str(path)


def _metrics(backbone: str) -> pd.DataFrame:
    """A metrics table of one backbone whose values tell the alphas apart (value = 100 * alpha + offset)."""
    rows = []
    for metric, offset in (
        ("cc", 5.0),
        ("soc", 3.0),
        ("soc_geo", 2.0),
        ("cross_soc", 1.0),
        ("cross_cc", 4.0),
    ):
        for alpha in (0.05, 0.1, 0.15):
            rows.append((metric, alpha, "official", "all", "all", 100 * alpha + offset, 10))
    rows += [
        ("four_choice", np.nan, "official", "all", "all", 40.0, 10),
        ("four_choice_circular", np.nan, "official", "all", "all", 20.0, 10),
    ]
    df = pd.DataFrame(rows, columns=["metric", "alpha", "reduction", "scope", "group", "value", "n"])
    return df.assign(backbone=backbone)


def test_headline_alpha_of_the_protocol_sets_the_leaderboard(tmp_path):
    tables = tmp_path / "storage" / "tables"
    backbones = tmp_path / "backbones"
    backbones.mkdir()
    (backbones / "toy.yaml").write_text("kind: classical\n")
    write_parquet_atomic(_metrics("toy"), table_for("metrics").path(str(tables), "toy"))
    boards = {}
    (tmp_path / "dagster").mkdir()
    with dg.instance_for_test(temp_dir=str(tmp_path / "dagster")) as instance:
        instance.add_dynamic_partitions("backbones", ["toy"])
        for alpha in ("0.1", "0.15"):
            protocol = _protocol(tmp_path, **{"headline_alpha: 0.1": f"headline_alpha: {alpha}"})
            defs = build_definitions(
                storage_root=str(tmp_path / "storage"), backbones_dir=str(backbones), protocol_path=protocol
            )
            assert dg.materialize(
                list(defs.assets), selection=["leaderboard"], instance=instance, resources=defs.resources
            ).success
            boards[alpha] = pd.read_parquet(tables / "leaderboard.parquet").set_index("backbone").loc["toy"]
    assert boards["0.1"]["soc"] == pytest.approx(13.0) and boards["0.15"]["soc"] == pytest.approx(18.0)
    assert boards["0.15"]["cc"] == pytest.approx(20.0) and boards["0.15"]["four_choice"] == 40.0


def test_an_lvlm_table_failing_its_blocking_check_is_not_written(tmp_path):
    """lvlm_items whose questions come out empty (a desc template that is only the description, and empty
    descriptions): the check fails, the previous table stays byte for byte, and the step says why."""
    from tests.lvlm_helpers import small_tables

    storage = tmp_path / "storage"
    tables = small_tables(tmp_path / "data")
    tables["descriptions"] = tables["descriptions"].assign(description="")
    for name in ("image_set", "keypoints", "image_pairs", "four_choice", "descriptions"):
        write_parquet_atomic(tables[name], table_for(name).path(str(storage / "tables")))
    protocol = (PROJECT_ROOT / "assets" / "lvlm_protocol.yaml").read_text()
    start = protocol.index("  desc: >-")
    protocol = protocol[:start] + '  desc: "{description}"\n'
    (tmp_path / "lvlm_protocol.yaml").write_text(protocol)
    previous = Path(table_for("lvlm_items").path(str(storage / "tables")))
    write_parquet_atomic(pd.DataFrame({"setting": ["vis"]}), str(previous))
    before = previous.read_bytes()

    (tmp_path / "dagster").mkdir()
    with dg.instance_for_test(temp_dir=str(tmp_path / "dagster")) as instance:
        defs = build_definitions(
            storage_root=str(storage), lvlm_protocol_path=str(tmp_path / "lvlm_protocol.yaml")
        )
        result = dg.materialize(
            list(defs.assets),
            selection=["lvlm_items"],
            instance=instance,
            resources=defs.resources,
            raise_on_error=False,
        )
        assert not result.success
        failure = next(e for e in result.all_events if e.event_type_value == "STEP_FAILURE")
        message = failure.step_failure_data.error.message
        assert "lvlm_items was not published" in message and "check 'schema' failed" in message
        assert "str_length" in message and "question" in message  # the check's own reason
        key = dg.AssetCheckKey(dg.AssetKey("lvlm_items"), "schema")
        assert (
            instance.event_log_storage.get_latest_asset_check_execution_by_key([key])[key].status.value
            == "FAILED"
        )
        assert instance.fetch_materializations(dg.AssetKey("lvlm_items"), limit=1).records == []
    assert previous.read_bytes() == before


def test_a_release_with_its_own_names_materializes_global_metrics(tmp_path):
    """Every name of the release is new to assets/taxonomy.yaml: global_metrics takes the family of each
    category from the run's taxonomy (the release's), not from the YAML."""
    import shutil

    from soco_pipeline.data.soco_export import export_soco_release
    from soco_pipeline.taxonomy import load_taxonomy
    from tests.fixtures_data import canonical_tables, release_renaming, rename_release

    tax = load_taxonomy()
    images, keypoints, pairs, corr = canonical_tables(str(tmp_path / "data"), tax, per_category=4)
    export_soco_release(images, keypoints, pairs, corr, str(tmp_path / "plain"), tax)
    mapping = release_renaming(tax)
    rename_release(str(tmp_path / "plain"), str(tmp_path / "renamed"), mapping)
    backbones = tmp_path / "backbones"
    backbones.mkdir()
    shutil.copy(PROJECT_ROOT / "assets" / "backbones" / "dense_sift.yaml", backbones)
    (tmp_path / "dagster").mkdir()
    with dg.instance_for_test(temp_dir=str(tmp_path / "dagster")) as instance:
        instance.add_dynamic_partitions("backbones", ["dense_sift"])
        defs = build_definitions(
            storage_root=str(tmp_path / "storage"),
            source="soco_release",
            soco_release_root=str(tmp_path / "renamed"),
            backbones_dir=str(backbones),
            device="cpu",
        )
        assert dg.materialize(
            list(defs.assets),
            selection=dg.AssetSelection.groups("data", "pairs"),
            instance=instance,
            resources=defs.resources,
        ).success
        run_config = {"ops": {"global_metrics": {"config": {"train_fraction": 0.5}}}}
        assert dg.materialize(
            list(defs.assets),
            selection=["feature_manifest", "global_feature_manifest", "global_metrics"],
            instance=instance,
            resources=defs.resources,
            partition_key="dense_sift",
            run_config=run_config,
        ).success
    g = pd.read_parquet(tmp_path / "storage" / "tables" / "global_metrics" / "dense_sift.parquet")
    assert len(g) > 0 and set(g.metric) >= {"knn_top1", "retrieval_map"}
    assert not set(g.columns) & {"category"} or not set(g.category.dropna()) & set(tax.categories)


def test_every_soco_variable_is_in_the_settings_table():
    """docs/settings.md lists every SOCO_* variable the package reads, and every settings field's variable."""
    import re

    from soco_pipeline.settings import ENVIRONMENT

    docs = (PROJECT_ROOT / "docs" / "settings.md").read_text()
    listed = set(re.findall(r"^\| `(SOCO_[A-Z_]+)`", docs, flags=re.M))
    read = set()
    for path in (PROJECT_ROOT / "soco_pipeline").rglob("*.py"):
        read |= set(re.findall(r"SOCO_[A-Z][A-Z_]*[A-Z]", path.read_text()))
    assert read == listed, (read - listed, listed - read)
    assert {var for var, _ in ENVIRONMENT.values()} <= listed


def test_the_settings_resource_is_the_settings_object(monkeypatch, tmp_path):
    """One object: the resource adds no field to Settings, and both read the same SOCO_* variables."""
    from soco_pipeline.defs.shared.resources import SocoSettings
    from soco_pipeline.settings import Settings

    assert issubclass(SocoSettings, Settings) and set(SocoSettings.model_fields) == set(Settings.model_fields)
    monkeypatch.setenv("SOCO_STORAGE", str(tmp_path / "s"))
    monkeypatch.setenv("SOCO_SEED", "7")
    monkeypatch.setenv("SOCO_CATEGORIES", "car,bus")
    soco = build_definitions().resources["soco"]
    assert isinstance(soco, Settings) and soco.settings() is soco
    assert (soco.seed, soco.categories, soco.tables_root) == (7, ["car", "bus"], f"{tmp_path / 's'}/tables")
    assert Settings().embedded_root == soco.embedded_root
    monkeypatch.setenv("SOCO_SEED", "seven")
    with pytest.raises(ValueError, match="SOCO_SEED='seven' is not an integer"):
        Settings()


def test_socos_watch_is_built_from_its_declaration_by_the_registry_builder(monkeypatch):
    """SOCO's regression watch comes from tasks/core.py's SOCO spec through the builder of every family's
    (definitions.watch_pairs -> shared/watch.family_history, regression_sensor_on), under the names it keeps:
    `model_history` in the backbones group behind `results_record`, and `regression_sensor`; defs/backbones
    holds no declaration of it and no "soco". A watch planted in the registry gets both with no other edit."""
    import ast

    from soco_pipeline.defs import definitions
    from soco_pipeline.defs.shared.family import declared_families
    from soco_pipeline.tasks import FamilySpec
    from soco_pipeline.tasks.core import SOCO, all_specs
    from soco_pipeline.trust.family_watch import ArchivedBy, FamilyWatch

    families = declared_families(group_folders())
    pairs = definitions.watch_pairs(families)
    assert (SOCO.watch, None) in pairs
    assert {w.history for w, _ in pairs} == {
        "model_history",
        *(f"{f.name}_history" for f in families if f.spec.watch),
    }
    defs = build_definitions()
    graph = defs.resolve_asset_graph()
    node = graph.get(dg.AssetKey("model_history"))
    assert node.group_name == "backbones" and node.parent_keys == {dg.AssetKey("results_record")}
    history = defs.resolve_assets_def("model_history")
    assert inspect.getmodule(inspect.unwrap(history.op.compute_fn.decorated_fn)).__name__.endswith(
        "shared.watch"
    )
    sensor = next(s for s in defs.sensors if s.name == "regression_sensor")
    assert sensor.asset_key == dg.AssetKey("model_history")
    folder = PROJECT_ROOT / "soco_pipeline" / "defs" / "backbones"
    literals = [
        (p.name, n.lineno)
        for p in folder.glob("*.py")
        for n in ast.walk(ast.parse(p.read_text()))
        if isinstance(n, ast.Constant) and n.value in (SOCO.name, "model_history", "regression_sensor")
    ]
    assert literals == []

    archived = ArchivedBy("results_record", "planted_history", "planted_regression_sensor", "backbones", "1")
    watch = FamilyWatch(
        "planted", "a planted headline", "soc", (), (), reduction="official", archived=archived
    )
    planted = FamilySpec("planted", "Planted", SOCO.load_config, watch=watch)
    monkeypatch.setattr("soco_pipeline.tasks.core.all_specs", lambda: {**all_specs(), "planted": planted})
    over = definitions.over_families(families)
    (asset,) = [a for a in over.assets if dg.AssetKey("planted_history") in a.keys]
    assert asset.group_names_by_key[dg.AssetKey("planted_history")] == "backbones"
    assert {s.name: s.asset_key.to_user_string() for s in over.sensors}["planted_regression_sensor"] == (
        "planted_history"
    )
