"""SOCO_DEMO_FAMILIES: which task families `make demo` runs after SOCO (soco_pipeline/cli/demo.py)."""

import pytest

from soco_pipeline.cli.demo import DemoSettingError, demo_families

pytestmark = pytest.mark.unit

AVAILABLE = ["fgbmk", "lvlm", "mmvm", "tpips"]


def test_unset_or_empty_runs_every_family(monkeypatch):
    monkeypatch.delenv("SOCO_DEMO_FAMILIES", raising=False)
    assert demo_families(AVAILABLE) == AVAILABLE
    monkeypatch.setenv("SOCO_DEMO_FAMILIES", " ")
    assert demo_families(AVAILABLE) == AVAILABLE


def test_none_runs_soco_alone(monkeypatch):
    monkeypatch.setenv("SOCO_DEMO_FAMILIES", "none")
    assert demo_families(AVAILABLE) == []


def test_a_list_keeps_the_demos_order(monkeypatch):
    monkeypatch.setenv("SOCO_DEMO_FAMILIES", "tpips, mmvm")
    assert demo_families(AVAILABLE) == ["mmvm", "tpips"]


def test_an_unknown_family_names_itself_and_the_families_there_are(monkeypatch):
    monkeypatch.setenv("SOCO_DEMO_FAMILIES", "mmvm,fgbkm")
    with pytest.raises(DemoSettingError, match="names fgbkm, .*list of fgbmk, lvlm, mmvm, tpips, or `none`"):
        demo_families(AVAILABLE)
