"""The embedded default data set: generate it once per (size, categories, images, seed), then reuse it."""

from __future__ import annotations

import json

from soco_pipeline import storage


def ensure_dataset(
    root: str,
    size: str = "demo",
    seed: int = 0,
    categories: list[str] | None = None,
    images_per_category: int | None = None,
) -> dict:
    """The manifest of the generated data set at `root`, generated if absent or different (the generator
    writes manifest.json last, so an interrupted generation has none and is generated again)."""
    from soco_pipeline.synth import generate_dataset
    from soco_pipeline.synth.generate import GENERATOR_VERSION

    path = storage.join(root, "manifest.json")
    if storage.exists(path):
        try:
            manifest = json.loads(storage.read_bytes(path))
        except ValueError:
            manifest = {}
        same = (
            manifest.get("generator_version") == GENERATOR_VERSION
            and manifest.get("seed") == seed
            and manifest.get("size") == size
            and (categories is None or list(manifest.get("categories", [])) == list(categories))
            and (
                images_per_category is None
                or all(c["kept"] == images_per_category for c in manifest["counts"]["by_category"].values())
            )
        )
        if same:
            return manifest
    return generate_dataset(
        root, size=size, seed=seed, categories=categories, images_per_category=images_per_category
    )
