"""`observe_sources` (cli/freshness.py), what `soco run` and `make demo` do before their freshness checks: it
observes a known backbone spec's data version only when the version moved and the spec is valid, and it checks a
spec against the world (checked_spec: a timm model built on the meta device) only for a moved version."""

from __future__ import annotations

import shutil

import dagster as dg
import pytest
import yaml

from soco_pipeline.backbones import spec_files
from soco_pipeline.cli.freshness import BACKBONES, LVLMS, observe_sources
from soco_pipeline.defs.shared.automation import DATA_VERSION_TAG
from soco_pipeline.defs.shared.resources import SocoSettings
from soco_pipeline.storage import PROJECT_ROOT

pytestmark = pytest.mark.unit  # an ephemeral instance, no run


def observed(instance: dg.DagsterInstance, name: str) -> list[str]:
    """The data versions observed for backbone_spec partition `name`, newest first."""
    records = instance.fetch_observations(
        dg.AssetRecordsFilter(asset_key=dg.AssetKey("backbone_spec"), asset_partitions=[name]), limit=100
    ).records
    return [r.event_log_entry.asset_observation.tags[DATA_VERSION_TAG] for r in records]


def test_a_spec_is_observed_when_its_version_moves_and_checked_only_then(tmp_path, monkeypatch):
    folder = tmp_path / "backbones"
    folder.mkdir()
    for name in ("oracle_part", "vit_small_random"):
        shutil.copy(PROJECT_ROOT / "assets/backbones" / f"{name}.yaml", folder / f"{name}.yaml")
    soco = SocoSettings(backbones_dir=str(folder), lvlms_dir=str(tmp_path / "lvlms"))
    with dg.DagsterInstance.ephemeral() as instance:
        instance.add_dynamic_partitions(BACKBONES, ["oracle_part", "vit_small_random", "gone"])
        instance.add_dynamic_partitions(LVLMS, [])
        observe_sources(instance, soco)
        first = {n: observed(instance, n) for n in ("oracle_part", "vit_small_random", "gone")}
        assert [len(v) for v in first.values()] == [1, 1, 0]  # a known partition without its file: nothing

        checked = []
        real = spec_files.spec_problem
        monkeypatch.setattr(spec_files, "spec_problem", lambda path: checked.append(path.stem) or real(path))
        observe_sources(instance, soco)  # nothing moved: nothing observed, nothing checked
        assert {n: observed(instance, n) for n in first} == first and checked == []

        doc = yaml.safe_load((folder / "vit_small_random.yaml").read_text())
        (folder / "vit_small_random.yaml").write_text(yaml.safe_dump({**doc, "seed": 7}))
        (folder / "oracle_part.yaml").write_text(
            (folder / "oracle_part.yaml").read_text() + "# a comment moves no version\n"
        )
        observe_sources(instance, soco)
        assert checked == ["vit_small_random"]
        assert (
            len(observed(instance, "vit_small_random")) == 2
            and observed(instance, "oracle_part") == first["oracle_part"]
        )

        (folder / "vit_small_random.yaml").write_text(
            yaml.safe_dump({**doc, "model": "no_such_vit", "seed": 8})
        )
        observe_sources(instance, soco)  # moved but invalid: not observed (its sensor reports why)
        assert checked[-1] == "vit_small_random" and len(observed(instance, "vit_small_random")) == 2
