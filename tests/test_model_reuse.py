"""Each per-model table is cached by what it reads (issue 53): a spec copied from another with only `input`
changed runs SOCO and MMVM again (they read the input) and reuses FG-BMK's and TPIPS's rows (they extract at
their own input size); so does a copy with only `layer` changed (FG-BMK reads the last blocks, TPIPS the
config's layers), and both reuse SOCO's global features (its matching runs again): the same rows, relabelled, stated as reused on the step line, in the tables'
materialization records and on the boards. A `reference:`-only edit runs no model step. A tiny random ViT-S
on a tiny embedded set (simulated data), through `soco run` in this process."""

import contextlib
import io
import json
import os
import subprocess

import dagster as dg
import pandas as pd
import pytest
import yaml

from soco_pipeline.backbones.spec_files import spec_data_version
from soco_pipeline.cli import soco as cli
from soco_pipeline.storage import read_parquet
from soco_pipeline.tables import table_for
from tests.dagster_server import VENV_BIN, write_instance_yaml
from tests.tiny_families import tiny_family_env

pytestmark = [pytest.mark.pipeline, pytest.mark.timeout(1500)]

VIT = {
    "kind": "timm",
    "model": "vit_small_patch14_dinov2",
    "weights": "none",
    "layer": -1,
    "input": {"nearest_multiple": 28},
    "normalisation": "imagenet",
    "batch_size": 4,
    "device": "cpu",
    "seed": 0,
}
# the per-backbone tables of the families that extract at their own input size
OWN_INPUT = {
    "fgbmk": ["fgbmk_global_features", "fgbmk_metrics", "fgbmk_probe_predictions", "fgbmk_robustness"],
    "tpips": [
        "tpips_features",
        "tpips_baseline_scores",
        "tpips_baseline_outcomes",
        "tpips_learned",
        "tpips_learned_outcomes",
    ],
}
FAMILIES = "soco,mmvm,fgbmk,tpips"


def _soco_run(*args: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = cli.main(["run", *args])
    assert code == 0, out.getvalue()[-3000:]
    return out.getvalue()


def _runs(home) -> list[tuple[str, str | None]]:
    with dg.DagsterInstance.from_config(str(home)) as instance:
        return [(r.job_name, r.tags.get("dagster/partition")) for r in instance.get_runs()]


def _latest_meta(home, asset: str, partition: str) -> dict:
    with dg.DagsterInstance.from_config(str(home)) as instance:
        records = instance.fetch_materializations(
            dg.AssetRecordsFilter(asset_key=dg.AssetKey(asset), asset_partitions=[partition]), limit=1
        ).records
        meta = records[0].event_log_entry.asset_materialization.metadata
        return {k: getattr(v, "value", v) for k, v in meta.items()}


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """A tiny embedded set, our instance, `soco run vit_a.yaml` on every family; then the environment."""
    tmp = tmp_path_factory.mktemp("reuse")
    home, storage, specs = tmp / "home", tmp / "storage", tmp / "backbones"
    specs.mkdir()
    write_instance_yaml(home, storage)
    with pytest.MonkeyPatch.context() as mp:
        for var, value in {
            "DAGSTER_HOME": str(home),
            "SOCO_STORAGE": str(storage),
            "SOCO_BACKBONES_DIR": str(specs),
            "SOCO_LVLMS_DIR": str(tmp / "lvlms"),
            "SOCO_CATEGORIES": "car,dog",
            "SOCO_IMAGES_PER_CATEGORY": "4",
            **tiny_family_env(tmp / "families"),
        }.items():
            mp.setenv(var, value)
        (tmp / "vit_a.yaml").write_text(yaml.safe_dump(VIT))
        out = _soco_run(str(tmp / "vit_a.yaml"), "--families", FAMILIES)
        yield {"home": home, "tmp": tmp, "specs": specs, "tables": storage / "tables", "out": out}


def _step_line(out: str, step: str) -> str:
    """The lines `soco run` printed for one step (its start, its end or cached state, a reuse)."""
    return "\n".join(line for line in out.splitlines() if step in line and line.startswith("["))


# copies of vit_a that change only what SOCO and MMVM read: the input size, the block of the dense maps
COPIES = {"vit_b": {"input": {"nearest_multiple": 42}}, "vit_c": {"layer": -2}}


@pytest.fixture(scope="module")
def copy_runs(world):
    """`soco run` of each copy in COPIES, once, on first use (tests run in any order): {copy: (stdout, the
    partitions of the runs it made)}."""
    done: dict[str, tuple[str, set]] = {}

    def run(copy: str) -> tuple[str, set]:
        if copy not in done:
            (world["tmp"] / f"{copy}.yaml").write_text(yaml.safe_dump({**VIT, **COPIES[copy]}))
            before = len(_runs(world["home"]))
            out = _soco_run(str(world["tmp"] / f"{copy}.yaml"), "--families", FAMILIES)
            runs = _runs(world["home"])
            done[copy] = (out, {p for _, p in runs[: len(runs) - before] if p})
        return done[copy]

    return run


@pytest.mark.parametrize("copy", sorted(COPIES))
def test_a_copy_changing_only_what_soco_and_mmvm_read_reuses_fgbmk_and_tpips_rows(world, copy_runs, copy):
    home = world["home"]
    out, new = copy_runs(copy)
    for family, tables in OWN_INPUT.items():
        assert "rows reused from vit_a" in _step_line(out, f"{family} / backbone {copy}"), out
        for table in tables:
            meta = _latest_meta(home, table, copy)
            assert meta["reused_from"] == "vit_a", (table, meta)
            assert meta["reads_version"] == _latest_meta(home, table, "vit_a")["reads_version"]
            a = read_parquet(table_for(table).path(str(world["tables"]), "vit_a"))
            b = read_parquet(table_for(table).path(str(world["tables"]), copy))
            col = "backbone" if "backbone" in a.columns else "model"
            assert set(b[col]) == {copy} and len(b) == len(a) > 0
            pd.testing.assert_frame_equal(a.drop(columns=col), b.drop(columns=col))
    for family, table in (("mmvm", "mmvm_predictions"),):  # MMVM reads the input and the layer: run again
        assert "reused" not in _step_line(out, f"{family} / backbone {copy}")
        assert "reused_from" not in _latest_meta(home, table, copy)
    # SOCO matches again; its global features read neither the input nor the layer of a ViT: reused
    soco_line = " ".join(_step_line(out, f"soco / backbone {copy}").split())
    assert soco_line.endswith(": rows reused from vit_a (global_feature_manifest)"), out
    meta = _latest_meta(home, "global_feature_manifest", copy)
    assert meta["reused_from"] == "vit_a"
    for table in ("predictions", "metrics", "global_metrics"):
        assert "reused_from" not in _latest_meta(home, table, copy), table
    assert new == {copy}
    with dg.DagsterInstance.from_config(str(home)) as instance:
        for board in ("fgbmk_leaderboard", "tpips_leaderboard"):
            entry = instance.get_latest_materialization_event(dg.AssetKey(board))
            note = entry.asset_materialization.metadata["reused"].value
            assert f"**{copy}**: reused from **vit_a**" in note, note


def test_the_results_record_states_the_reuse(copy_runs, tmp_path):
    """`soco export-results vit_b OUT --format record --family fgbmk|tpips` names the model whose rows vit_b's
    tables reused (the input-only copy above, run here first if this test comes first)."""
    copy_runs("vit_b")
    for family in ("fgbmk", "tpips"):
        out = tmp_path / f"{family}.json"
        with contextlib.redirect_stdout(io.StringIO()):
            assert (
                cli.main(["export-results", "vit_b", str(out), "--format", "record", "--family", family]) == 0
            )
        record = json.loads(out.read_text())
        assert record["reused_from"] and set(record["reused_from"].values()) == {"vit_a"}, record.get(
            "reused_from"
        )


def test_a_reference_only_edit_keeps_the_data_version_and_runs_no_model_step(world):
    home, spec = world["home"], world["specs"] / "vit_a.yaml"
    version = spec_data_version(spec)
    edited = world["tmp"] / "edited" / "vit_a.yaml"
    edited.parent.mkdir()
    edited.write_text(
        "# a comment, a description and a reference change no computation\n"
        + yaml.safe_dump({**VIT, "reference": "DINOv2-S/14", "description": "the same random ViT"})
    )
    before = len(_runs(home))
    out = _soco_run(str(edited), "--families", FAMILIES, "--force")
    assert spec.read_text() == edited.read_text() and spec_data_version(spec) == version
    new = _runs(home)[: len(_runs(home)) - before]
    assert not [p for _, p in new if p], new  # no model step
    for family in ("soco", "mmvm", "fgbmk", "tpips"):
        assert _step_line(out, f"{family} / backbone vit_a").endswith(": cached, skipped"), out
    assert {job for job, _ in new} <= {"demo_summary"}, new  # the summary reads `reference:`


def test_feature_rows_are_reused_only_while_their_cache_files_are_there(world):
    """A stored feature table serves a copy only if the cache files it lists are still there (a deleted cache
    folder is extracted again; tests/test_slurm.py does that through a Slurm job): global features (`folder`)
    and TPIPS's feature manifest (`path`, `cls_path`)."""
    from soco_pipeline.features.intact import cached_rows_intact

    features = str(world["tables"].parent / "features")
    for name in ("global_feature_manifest", "fgbmk_global_features", "tpips_features"):
        table = read_parquet(table_for(name).path(str(world["tables"]), "vit_a"))
        assert len(table) and cached_rows_intact(table, features), name
        column = "folder" if "folder" in table.columns else "path"
        gone = table.assign(**{column: table[column].str.replace("vit_a/", "vit_gone/", regex=False)})
        assert not cached_rows_intact(gone, features), name


def test_the_console_script_names_the_reused_tables(world):
    """`soco run` of a layer copy through the console script in a fresh process, as a user runs it: the SOCO
    step line names the one table it reused, FG-BMK's and TPIPS's lines say their rows were reused."""
    spec = world["tmp"] / "vit_d.yaml"
    spec.write_text(yaml.safe_dump({**VIT, "layer": -3}))
    command = [str(VENV_BIN / "soco"), "run", str(spec), "--families", FAMILIES]
    done = subprocess.run(command, env=dict(os.environ), capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    soco_line = " ".join(_step_line(done.stdout, "soco / backbone vit_d").split())
    assert soco_line.endswith(": rows reused from vit_a (global_feature_manifest)"), done.stdout
    for family in ("fgbmk", "tpips"):
        assert "rows reused from vit_a" in _step_line(done.stdout, f"{family} / backbone vit_d"), done.stdout
