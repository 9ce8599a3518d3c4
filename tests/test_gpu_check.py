"""benchmarks/gpu_check.py runs end to end on the CPU with tiny settings, so the GPU check cannot rot."""

from __future__ import annotations

import importlib.util
import math

from soco_pipeline.storage import PROJECT_ROOT


def _gpu_check():
    spec = importlib.util.spec_from_file_location("gpu_check", PROJECT_ROOT / "benchmarks" / "gpu_check.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_gpu_check_runs_on_the_cpu_with_tiny_settings(tmp_path, capsys):
    gc = _gpu_check()
    args = gc.parser().parse_args([
        "--device", "cpu", "--vit", "vit_small_patch14_dinov2", "--size", "42", "--batch", "3",
        "--diffusion-size", "32", "--diffusion-batch", "2", "--ensemble", "2", "--n", "6", "--agree", "6",
        "--categories", "car,bus", "--per-category", "3", "--options", "bf16", "channels_last",
        "--data-root", str(tmp_path / "embedded"),
    ])
    out = gc.run(args)
    printed = capsys.readouterr().out
    assert set(out) == {"vit_random", "tiny_diffusion"}
    for name, fig in out.items():
        assert fig["forward"] > 0 and fig["whole"] > 0 and math.isclose(fig["ratio"], fig["whole"] / fig["forward"])
        # The "device" is the CPU here: the same code on the same device gives the same maps and cells.
        assert fig["max_abs"] == 0.0 and fig["cos_min"] > 0.999 and fig["cpu_same_cells"] == 1.0, name
        assert 0.0 <= fig["bf16"]["same_cells"] <= 1.0, fig["bf16"]
    assert 0.0 <= out["tiny_diffusion"]["channels_last"]["same_cells"] <= 1.0
    assert "channels_last" not in out["vit_random"]  # a convolutional-only option
    assert "whole/forward" in printed and "identical argmax cells" in printed and "FAILED" not in printed
