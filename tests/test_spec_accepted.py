"""`soco run` of a spec already accepted in its version (its observation recorded by observe_sources) skips the
kind's own check (for timm: importing timm, 3 s of a no-op `soco run`); the cheap checks still run, and a spec
whose version moved, or one never observed, is checked in full (issue 53)."""

from __future__ import annotations

import dagster as dg
import pytest
import yaml

from soco_pipeline.backbones import kinds
from soco_pipeline.backbones.spec_files import spec_data_version
from soco_pipeline.cli.freshness import spec_accepted
from soco_pipeline.cli.run import add_spec
from soco_pipeline.defs.shared.automation import observation
from soco_pipeline.settings import Settings
from soco_pipeline.storage import PROJECT_ROOT

pytestmark = pytest.mark.unit


def test_an_accepted_spec_skips_its_kinds_check_until_its_version_moves(tmp_path, monkeypatch):
    checked = []
    real = kinds.check_spec
    monkeypatch.setattr(kinds, "check_spec", lambda spec: checked.append(spec.name) or real(spec))
    spec = yaml.safe_load((PROJECT_ROOT / "assets" / "backbones" / "vit_small_random.yaml").read_text())
    src = tmp_path / "mine.yaml"
    src.write_text(yaml.safe_dump(spec))
    settings = Settings(backbones_dir=str(tmp_path / "backbones"), storage_root=str(tmp_path / "storage"))
    with dg.instance_for_test() as instance:
        assert not spec_accepted(instance, src)
        add_spec(src, settings, instance=instance)
        assert checked == ["mine"]  # never observed: the full check
        instance.report_runless_asset_event(observation("backbone_spec", spec_data_version(src), "mine"))
        assert spec_accepted(instance, src)
        add_spec(src, settings, instance=instance)
        assert checked == ["mine"]  # the same version: the kind's check is not run again
        src.write_text(yaml.safe_dump({**spec, "reference": "DINOv2-S/14"}))  # metadata: the same version
        add_spec(src, settings, instance=instance, force=True)
        assert checked == ["mine"]
        src.write_text(yaml.safe_dump({**spec, "input": {"nearest_multiple": 28}}))  # the version moved
        assert not spec_accepted(instance, src)
        add_spec(src, settings, instance=instance, force=True)
        assert checked == ["mine", "mine"]
