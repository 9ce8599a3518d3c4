"""benchmarks/bench_zoo.py's simulated zoo: N distinct specs that the project's spec loader and the spec
sensor's folder scan both accept (no timing: the benchmark's figures are measured, not tested)."""

from __future__ import annotations

import importlib.util

import pytest

from soco_pipeline.backbones.spec import load_spec, spec_hash
from soco_pipeline.backbones.spec_files import scan_specs
from soco_pipeline.storage import PROJECT_ROOT

pytestmark = pytest.mark.unit


def _bench_zoo():
    spec = importlib.util.spec_from_file_location("bench_zoo", PROJECT_ROOT / "benchmarks" / "bench_zoo.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_zoo_is_n_distinct_valid_specs_of_every_base(tmp_path):
    names = _bench_zoo().write_zoo(tmp_path, 30)
    assert len(names) == len(set(names)) == 30
    specs = [load_spec(tmp_path / f"{name}.yaml") for name in names]
    assert len({spec_hash(s) for s in specs}) == 30  # each its own feature cache folder
    assert {(s.kind, s.model) for s in specs} == {
        ("timm", "vit_small_patch14_dinov2"),
        ("classical", "sift"),
        ("oracle", "oracle_part"),
        ("oracle", "oracle_concept"),
    }
    assert {s.device for s in specs} == {"cpu"} and len({s.input.value for s in specs}) > 4
    valid, invalid = scan_specs(tmp_path)  # what backbone_specs_sensor reads each tick
    assert invalid == {} and sorted(valid) == sorted(names)


def test_a_smaller_zoo_is_the_start_of_a_larger_one(tmp_path):
    """Growing the zoo adds specs and never changes the ones already evaluated."""
    zoo = _bench_zoo()
    small, large = zoo.zoo_specs(10), zoo.zoo_specs(30)
    assert all(large[name] == doc for name, doc in small.items())
