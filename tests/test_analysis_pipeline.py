"""The analysis assets through Dagster on a copy of the shared core (tests/core.py: the embedded data set
and both oracles): global metrics and the linear probe from the cache (no backbone runs), the correlation
asset, the leaderboard columns; and, on 4 categories of 10 images, the probe recovering SOC from a backbone
whose identity information is linearly mixed."""

import shutil
import zlib
from pathlib import Path

import dagster as dg
import numpy as np
import pandas as pd
import pytest
import torch

from soco_pipeline.analysis.linear_probe import ProbeConfig, probe_metrics
from soco_pipeline.defs.definitions import build_definitions
from soco_pipeline.evaluation.protocol import load_protocol
from soco_pipeline.features import FeatureStore
from soco_pipeline.report.results_db import query
from soco_pipeline.storage import PROJECT_ROOT
from soco_pipeline.taxonomy import load_taxonomy
from tests.core import CATEGORIES, IMAGES_PER_CATEGORY, ORACLES

# the shared core (tests/core.py) may be built in the first test's setup
pytestmark = [pytest.mark.pipeline, pytest.mark.timeout(900)]

PROBE_RUN = {"ops": {"probe_metrics": {"config": {"steps": 20, "lr": 0.01, "targets_per_step": 4}}}}


@pytest.fixture(scope="module")
def run(materialized_core, tmp_path_factory):
    """A copy of the shared core (data, pairs, both oracles' evaluation; tests/core.py): the analysis
    assets materialize on it."""
    core = materialized_core.copy_to(tmp_path_factory.mktemp("analysis"))
    with core.instance() as instance:
        defs = build_definitions(**core.overrides)

        def mat(selection, partition=None, run_config=None):
            result = dg.materialize(
                list(defs.assets),
                selection=selection,
                instance=instance,
                resources=defs.resources,
                partition_key=partition,
                run_config=run_config,
            )
            assert result.success
            return result

        yield {"tmp": core.root, "instance": instance, "defs": defs, "mat": mat, "overrides": core.overrides}


def _tables(run) -> Path:
    return Path(run["overrides"]["storage_root"]) / "tables"


@pytest.fixture(scope="module")
def analysed(run):
    """global_metrics and probe_metrics of both oracles with every backbone forward disabled, then the
    leaderboard and the correlation asset."""
    from soco_pipeline.backbones import base

    for b in (
        ORACLES
    ):  # the shared cache's global output: the one extraction global_metrics reads besides the maps
        run["mat"](dg.AssetSelection.assets("global_feature_manifest"), b)

    def no_backbone(*args, **kwargs):
        raise AssertionError("analysis re-scores from the feature cache: no backbone may run")

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(base.Backbone, "extract", no_backbone)
        for b in ORACLES:
            run["mat"](dg.AssetSelection.assets("global_metrics", "probe_metrics"), b, PROBE_RUN)
    run["mat"](dg.AssetSelection.assets("leaderboard", "correlation", "results_database"))
    return run


def test_global_metrics_of_the_oracles_join_the_leaderboard(analysed):
    g = pd.read_parquet(_tables(analysed) / "global_metrics" / "oracle_part.parquet")
    assert set(g.feature) == {"mean", "global"} and set(g.track) == {
        "category"
    }  # one category per family here
    top1 = g[(g.metric == "knn_top1") & (g.k == 20) & (g.feature == "mean")].value.iloc[0]
    assert 0 <= top1 <= 100 and g[g.headline].metric.isin(["knn_top1", "knn_top5", "retrieval_map"]).all()
    # Part-identity channels are category-specific: mean-pooled oracle maps tell the categories apart
    # (measured: 50 % top-1 at k = 20 on the core's 6 categories of 6 images; 75 % on 4 of 10).
    assert top1 > 2 * 100 / len(CATEGORIES)  # twice chance (17 %)
    board = pd.read_parquet(_tables(analysed) / "leaderboard.parquet").set_index("backbone")
    assert board.loc["oracle_part", "knn_top1"] == pytest.approx(top1)
    assert {"knn_top1", "retrieval_map"} <= set(board.columns)


def test_probe_keeps_the_oracle_scores(analysed):
    for b in ORACLES:
        p = pd.read_parquet(_tables(analysed) / "probe_metrics" / f"{b}.parquet")
        p = p[(p.alpha - 0.1).abs() < 1e-9].pivot_table(index="metric", columns="method", values="value")
        for metric in ("cc", "soc"):
            assert abs(p.loc[metric, "probe"] - p.loc[metric, "zero_shot"]) <= 5, (b, metric, p)
    part = pd.read_parquet(_tables(analysed) / "probe_metrics" / "oracle_part.parquet")
    at = part[((part.alpha - 0.1).abs() < 1e-9) & (part.method == "probe")].set_index("metric").value
    assert at["soc"] >= 95 and at["cc"] >= 95
    assert (part.n_train_images + part.n_test_images == len(CATEGORIES) * IMAGES_PER_CATEGORY).all()


def test_correlation_asset_writes_table_figures_view_and_metadata(analysed):
    storage = Path(analysed["overrides"]["storage_root"])
    table = pd.read_parquet(storage / "tables" / "correlation.parquet")
    h = table[(table.subset == "all") & table.headline & (table.statistic == "pearson")].pivot_table(
        index="task", columns="benchmark", values="estimate"
    )
    assert (h["soc"] > h["knn"]).all() and len(h) == 7
    for ext in ("png", "svg"):
        assert (storage / "figures" / f"correlation_all.{ext}").stat().st_size > 10_000
    rec = analysed["instance"].fetch_materializations(dg.AssetKey("correlation"), limit=1).records[0]
    meta = rec.asset_materialization.metadata
    assert meta["figure_all"].value.startswith("![correlation all](data:image/png;base64,")
    assert "SOC > knn" in meta["table_all"].value
    n = query(
        storage / "results.duckdb", "select count(*) as n from correlation where statistic = 'delta_pearson'"
    )
    assert int(n.n.iloc[0]) > 0
    g = query(storage / "results.duckdb", "select count(distinct backbone) as n from global_metrics")
    assert int(g.n.iloc[0]) == 2


PROBE_CATEGORIES = ["car", "bus", "chair", "dog"]


@pytest.fixture(scope="module")
def probe_data(tmp_path_factory):
    """The data, pair tables and part-oracle feature maps of 4 categories of 10 images: all the probe tests
    read. The shared core's 6 images a category are too few to train the probe on the mixed identity
    (measured on the core: probe SOC 69.1 vs zero-shot 63.4)."""
    tmp = tmp_path_factory.mktemp("probe")
    backbones = tmp / "backbones"
    backbones.mkdir()
    shutil.copy(PROJECT_ROOT / "assets" / "backbones" / "oracle_part.yaml", backbones)
    overrides = dict(
        storage_root=str(tmp / "storage"),
        backbones_dir=str(backbones),
        categories=PROBE_CATEGORIES,
        images_per_category=10,
    )
    (tmp / "dagster_home").mkdir()
    with dg.instance_for_test(temp_dir=str(tmp / "dagster_home")) as instance:
        instance.add_dynamic_partitions("backbones", ["oracle_part"])
        defs = build_definitions(**overrides)
        steps = [(dg.AssetSelection.groups("data", "pairs"), None)]
        steps += [(dg.AssetSelection.assets("feature_manifest"), "oracle_part")]
        for selection, partition in steps:
            assert dg.materialize(
                list(defs.assets),
                selection=selection,
                instance=instance,
                resources=defs.resources,
                partition_key=partition,
            ).success
    return {"overrides": overrides}


class MixedStore:
    """A scripted test double of a feature store: the part oracle's maps with the identity channels
    weakened, extra per-cell noise, and everything mixed by a seeded random rotation. The identity
    information is all there, linearly; cosine similarity just does not see it."""

    def __init__(self, store: FeatureStore, identity_weight=0.08, noise=0.35, extra=32, pool=2, seed=0):
        self.store, self.noise, self.extra, self.pool, self.seed = store, noise, extra, pool, seed
        n_parts = len(load_taxonomy().keypoints)
        c = store.meta(store.image_ids[0])["channels"]
        self.scale = np.ones(c, np.float32)
        self.scale[:n_parts] = identity_weight
        q, _ = np.linalg.qr(np.random.default_rng(seed).normal(size=(c + extra, c + extra)))
        self.mix = q.astype(np.float32)
        self.cache = {}

    def get(self, image_id):
        if image_id not in self.cache:
            self.cache[image_id] = self._make(image_id)
        return self.cache[image_id]

    def _make(self, image_id):
        arr, meta = self.store.get(image_id)
        c, h, w = arr.shape
        p = self.pool  # a coarser grid (p x p cells averaged) keeps the test fast
        h, w = h // p, w // p
        arr = arr[:, : h * p, : w * p].reshape(c, h, p, w, p).mean(axis=(2, 4))
        meta = {**meta, "grid_h": h, "grid_w": w, "stride": meta["stride"] * p}
        rng = np.random.default_rng([self.seed, zlib.crc32(image_id.encode())])
        x = np.concatenate(
            [
                arr.reshape(c, -1) * self.scale[:, None],
                rng.normal(0, self.noise / np.sqrt(self.extra), (self.extra, h * w)).astype(np.float32),
            ]
        )
        y = self.mix @ x
        y /= np.linalg.norm(y, axis=0, keepdims=True)
        return y.reshape(-1, h, w), {**meta, "channels": c + self.extra}


def _probe(data, store, steps, backbone="mixed"):
    t = _tables(data)
    tables = {
        n: pd.read_parquet(t / f"{n}.parquet")
        for n in ("image_pairs", "correspondences", "keypoints", "image_set")
    }
    return probe_metrics(
        store,
        tables["image_pairs"],
        tables["correspondences"],
        tables["keypoints"],
        tables["image_set"],
        load_taxonomy(),
        load_protocol(),
        backbone,
        ProbeConfig(seed=0, steps=steps, lr=0.01, targets_per_step=8),
    )


def _part_store(data) -> FeatureStore:
    manifest = pd.read_parquet(_tables(data) / "feature_manifest" / "oracle_part.parquet")
    return FeatureStore.from_manifest(str(Path(data["overrides"]["storage_root"]) / "features"), manifest)


def test_probe_recovers_soc_from_linearly_mixed_identity(probe_data):
    # one thread: beside other xdist workers two OpenMP threads contend (with two CPU hogs beside it: 27 s
    # with 2 threads, 18 s with 1)
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        out = _probe(probe_data, MixedStore(_part_store(probe_data)), steps=100)
    finally:
        torch.set_num_threads(before)  # the worker's later tests keep their own thread count
    p = out[(out.alpha - 0.1).abs() < 1e-9].pivot_table(index="metric", columns="method", values="value")
    zero, probe = p.loc["soc", "zero_shot"], p.loc["soc", "probe"]
    # Measured (seed 0): zero-shot SOC 58.9, probe 84.6; Cross-SOC 59.4 -> 97.2; CC 97.9 -> 94.8.
    assert zero < 70, p  # the zero-shot scorer misses much of the identity
    assert probe > zero + 15 and probe > 78, p
    assert p.loc["cross_soc", "probe"] > p.loc["cross_soc", "zero_shot"] + 15, p
    assert p.loc["cc", "probe"] >= p.loc["cc", "zero_shot"] - 6, p
    assert np.isfinite(out.final_loss).all()


def test_probe_is_deterministic(probe_data):
    mixed = MixedStore(_part_store(probe_data))
    pd.testing.assert_frame_equal(_probe(probe_data, mixed, steps=3), _probe(probe_data, mixed, steps=3))
