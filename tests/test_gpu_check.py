"""benchmarks/gpu_check.py runs end to end on the CPU with tiny settings, so the GPU check cannot rot."""

from __future__ import annotations

import importlib.util
import math

import numpy as np
import pandas as pd
import pytest

from soco_pipeline.storage import PROJECT_ROOT

pytestmark = pytest.mark.pipeline


def _gpu_check():
    spec = importlib.util.spec_from_file_location("gpu_check", PROJECT_ROOT / "benchmarks" / "gpu_check.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.timeout(900)  # the whole benchmark end to end: ~2 minutes idle, much longer on a loaded machine
def test_gpu_check_runs_on_the_cpu_with_tiny_settings(tmp_path, capsys):
    gc = _gpu_check()
    args = gc.parser().parse_args(
        [
            "--device",
            "cpu",
            "--vit",
            "vit_small_patch14_dinov2",
            "--size",
            "42",
            "--batch",
            "3",
            "--diffusion-size",
            "32",
            "--diffusion-batch",
            "2",
            "--ensemble",
            "2",
            "--n",
            "6",
            "--agree",
            "6",
            "--categories",
            "car,bus",
            "--per-category",
            "3",
            "--options",
            "bf16",
            "channels_last",
            "--data-root",
            str(tmp_path / "embedded"),
        ]
    )
    out = gc.run(args)
    printed = capsys.readouterr().out
    assert set(out) == {"vit_random", "tiny_diffusion"}
    for name, fig in out.items():
        assert (
            fig["forward"] > 0
            and fig["whole"] > 0
            and math.isclose(fig["ratio"], fig["whole"] / fig["forward"])
        )
        # Whole and forward-only throughput are measured over the same images, for every option too.
        assert fig["n_forward"] == fig["n_whole"] == 6, name
        assert fig["bf16"]["n_forward"] == fig["bf16"]["n_whole"] == 6, name
    assert out["tiny_diffusion"]["channels_last"]["n_whole"] == 6
    assert "channels_last" not in out["vit_random"]  # a convolutional-only option
    assert "whole/forward" in printed and "identical argmax cells" in printed and "FAILED" not in printed


def test_agreement_figures_measure_a_known_difference(tmp_path, monkeypatch):
    """The figures the check prints: same_cells counts the queries whose predicted point moved, and
    map_agreement finds the largest change and the cosine of a cell turned to its opposite."""
    gc = _gpu_check()
    index = pd.MultiIndex.from_tuples([(f"p{i}", "kp") for i in range(4)], names=["pair_id", "src_keypoint"])
    a = pd.DataFrame({"pred_x": [1.0, 2.0, 3.0, 4.0], "pred_y": [0.0, 0.0, 0.0, 0.0]}, index=index)
    b = a.assign(pred_y=[0.0, 0.0, 5.0, 0.0])
    assert gc.same_cells(a, b) == 0.75 and gc.same_cells(a, a) == 1.0

    from soco_pipeline.backbones import parse_spec
    from soco_pipeline.features import FeatureStore, extract_features

    rng = np.random.default_rng(0)
    uri = tmp_path / "car_0000.png"
    from PIL import Image

    Image.fromarray(rng.integers(0, 256, size=(32, 32, 3), dtype=np.uint8)).save(uri)
    images = pd.DataFrame(
        [{"image_id": "car_0000", "uri": str(uri), "width": 32, "height": 32, "category": "car"}]
    )
    spec = parse_spec(
        {
            "kind": "classical",
            "model": "sift",
            "input": {"nearest_multiple": 32},
            "normalisation": "raw",
            "device": "cpu",
        },
        "sift",
    )
    m_a = extract_features(spec, images, str(tmp_path / "a"))
    extract_features(spec, images, str(tmp_path / "b"))
    path = tmp_path / "b" / m_a.path.iloc[0]
    arr = np.load(path)
    cell = np.flatnonzero(np.linalg.norm(arr.astype(np.float32), axis=0).ravel() > 0.5)[0]
    arr.reshape(arr.shape[0], -1)[:, cell] *= -1  # one cell's descriptor turned to its opposite
    np.save(path, arr)
    monkeypatch.setattr(FeatureStore, "verify_reads", False)  # the edited map no longer matches its checksum
    fig = gc.map_agreement(
        gc.Tables(images, None, None, None), str(tmp_path / "a"), spec, str(tmp_path / "b"), spec
    )
    assert fig["cos_min"] < -0.99 and fig["max_abs"] > 0.1
