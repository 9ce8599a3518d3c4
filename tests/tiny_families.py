"""Tiny task-family configs for the tests that run the whole demo, the UI's automation or a crash.

Those tests check the machinery (runs, partitions, recovery, boards), not a family's figures, so the
families run at the smallest size their configs accept: a few MMVM cases, six FG-BMK subclasses, a dozen
TPIPS triplets. Each file is the shipped config (assets/<family>.yaml) with these sections updated, checked
by the family's own loader when written. The families' own tests keep their own configs.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from soco_pipeline.settings import ENVIRONMENT
from soco_pipeline.storage import PROJECT_ROOT

TINY: dict[str, dict] = {
    "mmvm": {
        "cases": {"train": 2, "test": 4},
        "frame": {"width": 160, "height": 120},
        "candidates": {"total": [4, 5], "counts": [4]},
        "cue_sets": [[1], [2], [3], [4]],
    },
    "fgbmk": {
        "embedded": {
            "images_per_subclass": {"train": 2, "test": 1},
            "workers": 1,
            "image_size": 64,
            "subclasses": ["zebra", "horse", "donkey", "cat", "taxi", "car"],
        },
        "linear_probe": {"learning_rates": [0.01, 0.05], "epochs": 1, "epoch_length": 5, "batch_size": 8},
        "retrieval": {
            "learning_rates": [0.05],
            "epochs": 1,
            "epoch_length": 5,
            "batch_size": 8,
            "embed_dim": 8,
        },
        "robustness": {"epsilons": [2], "pgd_steps": 1, "noise_sigmas": [8], "max_images": 4},
        "questions": {"images_per_subclass": 1},
    },
    "tpips": {
        "image_size": 48,
        "triplets": {"n": 12},
        "afc": {"n": 8},
        "features": {"input_size": 48},
        "learned": {"epochs": 5},
    },
}


def _merged(shipped: dict, updates: dict) -> dict:
    """`shipped` with `updates` merged in, one level of sections deep (a section's other keys are kept)."""
    out = dict(shipped)
    for key, value in updates.items():
        base = out.get(key)
        out[key] = {**base, **value} if isinstance(base, dict) and isinstance(value, dict) else value
    return out


def _check(family: str, path: Path) -> None:
    if family == "mmvm":
        from soco_pipeline.tasks.mmvm.config import load_config
    elif family == "fgbmk":
        from soco_pipeline.tasks.fgbmk.config import load_config
    else:
        from soco_pipeline.tasks.tpips.config import load_config
    load_config(path)


def write_tiny_family_configs(folder: Path) -> dict[str, str]:
    """Write each family's tiny config into `folder`; returns the settings overrides that select them
    (`{"mmvm_config_path": ..., ...}`, for build_definitions / run_demo)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    overrides = {}
    for family, updates in TINY.items():
        shipped = yaml.safe_load((PROJECT_ROOT / "assets" / f"{family}.yaml").read_text())
        path = folder / f"{family}.yaml"
        path.write_text(yaml.safe_dump(_merged(shipped, updates), sort_keys=False))
        _check(family, path)
        overrides[f"{family}_config_path"] = str(path)
    return overrides


def tiny_family_env(folder: Path) -> dict[str, str]:
    """The same as environment variables (SOCO_MMVM_CONFIG, ...), for a child process or `dagster dev`."""
    return {ENVIRONMENT[field][0]: path for field, path in write_tiny_family_configs(folder).items()}
