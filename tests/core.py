"""One materialized core per test run: the embedded data set, its pairs and the two oracles' evaluation,
materialized once through Dagster into a storage root and an instance of their own.

tests/conftest.py's session fixture `materialized_core` builds it on first use, once per test run: on xdist
workers the first to ask builds it in the run's shared temporary folder and the others wait for it (a
file lock) and reuse it. A test that only reads it opens `core.instance()` and reads `core.tables`; a
test that materializes anything works on `core.copy_to(folder)` (a copy of the folders is far cheaper
than a rebuild), so tests stay order-independent and each passes alone.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import dagster as dg
from filelock import FileLock

from soco_pipeline.storage import PROJECT_ROOT

CATEGORIES = ["car", "bus", "tractor", "chair", "dog", "horse"]
IMAGES_PER_CATEGORY = 6
ORACLES = ["oracle_part", "oracle_concept"]
PER_BACKBONE = ["feature_manifest", "predictions", "four_choice_predictions", "metrics"]
# the data and pair tables, in the order a run of them materializes: what a launch of the data stage names
DATA_AND_PAIRS = [
    "embedded_dataset",
    "taxonomy",
    "source_images",
    "raw_keypoints",
    "image_set",
    "rejected_images",
    "keypoints",
    "descriptions",
    "image_pairs",
    "correspondences",
    "four_choice",
]
# the data and pair tables with a blocking `schema` check: all of DATA_AND_PAIRS but the inputs as read
SCHEMA_CHECKED = [
    a for a in DATA_AND_PAIRS if a not in ("embedded_dataset", "source_images", "raw_keypoints")
]


def materializations(
    instance: dg.DagsterInstance, key: str, partition: str | None = None, limit: int = 100
) -> list:
    """The materialization records of asset `key` (of one partition when `partition` is given), newest
    first, at most `limit`."""
    f = dg.AssetRecordsFilter(asset_key=dg.AssetKey(key), asset_partitions=[partition] if partition else None)
    return instance.fetch_materializations(f, limit=limit).records


@dataclass(frozen=True)
class Core:
    """A materialized core: `root` holds storage/, dagster_home/ and backbones/ (the oracles' specs)."""

    root: Path

    @property
    def storage(self) -> Path:
        return self.root / "storage"

    @property
    def tables(self) -> Path:
        return self.storage / "tables"

    @property
    def backbones(self) -> Path:
        return self.root / "backbones"

    @property
    def overrides(self) -> dict:
        """build_definitions' settings for this copy (its own storage root and backbones folder)."""
        return dict(
            storage_root=str(self.storage),
            backbones_dir=str(self.backbones),
            categories=list(CATEGORIES),
            images_per_category=IMAGES_PER_CATEGORY,
        )

    @contextmanager
    def instance(self) -> Iterator[dg.DagsterInstance]:
        """The Dagster instance (sqlite in dagster_home/) that holds this copy's materializations."""
        with dg.instance_for_test(temp_dir=str(self.root / "dagster_home")) as instance:
            yield instance

    def copy_to(self, folder: Path) -> Core:
        """A copy in `folder` (which must not exist yet or be empty) for a test that materializes."""
        folder = Path(folder)
        if folder.exists():
            folder.rmdir()
        shutil.copytree(self.root, folder, symlinks=True)
        return Core(folder)


def build_core(root: Path) -> Core:
    """Materialize the data and pairs groups and both oracles' per-backbone assets into `root`."""
    from soco_pipeline.defs.definitions import build_definitions

    core = Core(Path(root))
    core.backbones.mkdir(parents=True)
    for b in ORACLES:
        shutil.copy(PROJECT_ROOT / "assets" / "backbones" / f"{b}.yaml", core.backbones)
    (core.root / "dagster_home").mkdir()
    with core.instance() as instance:
        instance.add_dynamic_partitions("backbones", ORACLES)
        defs = build_definitions(**core.overrides)
        selections = [(dg.AssetSelection.groups("data", "pairs"), None)]
        selections += [(dg.AssetSelection.assets(*PER_BACKBONE), b) for b in ORACLES]
        for selection, partition in selections:
            result = dg.materialize(
                list(defs.assets),
                selection=selection,
                instance=instance,
                resources=defs.resources,
                partition_key=partition,
            )
            if not result.success:
                raise RuntimeError(f"the shared test core failed to materialize {selection} [{partition}]")
    return core


def shared_core(folder: Path) -> Core:
    """The core in `folder`/core: built by the first process that asks for it, reused by the others (they
    wait on `folder`/core.lock while it is built). A build that failed half-way is started again."""
    root = Path(folder) / "core"
    built = root / "built"
    with FileLock(str(Path(folder) / "core.lock")):
        if not built.exists():
            shutil.rmtree(root, ignore_errors=True)
            build_core(root)
            built.touch()
    return Core(root)
