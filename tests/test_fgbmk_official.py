"""FG-BMK parity with its released code (SEU-VIPGroup/FG-BMK at 7765a10a277972c262d5a7d09862bafc0d0550a1).

tests/fixtures/fgbmk_official/ holds a small seeded feature set (features.npz: 12 classes, 180 train and 60
test rows of three 8-dim parts: previous-block class token, last-block class token, patch mean) and what the
release's own pieces gave on it (expected.json): eval_linear.py's setup_linear_classifiers / Adam (and, for
comparison, its commented-out SGD line) / CosineAnnealingLR, DINOv2's ShardedInfiniteSampler (seed 0) for the
batches, torchmetrics' MulticlassAccuracy for top-1 / top-5 and the best-head pick; eval_retrieval.py's
projections (SGD momentum 0.9) on given triplets, its LinearPostprocessor (pairwise_distance, top-10
neighbours, softmax), Recall and RetrievalMAP (dinov2/eval/metrics.py) over a gallery of the first 100 of
randperm(180, seed 0), with multi-label rows. Heads are initialised after torch.manual_seed(0) in both.
The official code was run outside this repository (torchmetrics 1.9.0, torch 2.14); none of it is here.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from soco_pipeline.features.global_cache import GlobalFeatures
from soco_pipeline.tasks.fgbmk.config import RetrievalConfig, TrainConfig
from soco_pipeline.tasks.fgbmk.linear_probe import batch_stream, train_probe
from soco_pipeline.tasks.fgbmk.metrics import retrieval_map, topk_accuracy
from soco_pipeline.tasks.fgbmk.retrieval import gallery_order, train_retrieval

pytestmark = pytest.mark.unit

FIXTURES = Path(__file__).parent / "fixtures" / "fgbmk_official"
EXPECTED = json.loads((FIXTURES / "expected.json").read_text())
COMMIT = "7765a10a277972c262d5a7d09862bafc0d0550a1"


def _feats(x: np.ndarray, prefix: str) -> GlobalFeatures:
    ids = np.array([f"{prefix}{i}" for i in range(len(x))], dtype=object)
    return GlobalFeatures(ids, x[:, 0].copy(), x[:, 1].copy(), x[:, 2].copy())


@pytest.fixture(scope="module")
def data():
    z = np.load(FIXTURES / "features.npz")
    return _feats(z["train"], "tr"), z["train_labels"], _feats(z["test"], "te"), z["test_labels"]


def _probe_config(optimizer: str) -> TrainConfig:
    return TrainConfig(
        learning_rates=tuple(EXPECTED["lrs"]),
        n_last_blocks=(1, 2),
        avgpool=(False, True),
        batch_size=EXPECTED["batch_size"],
        optimizer=optimizer,
        epochs=1,
        epoch_length=EXPECTED["max_iter"],
    )


def test_fixture_names_the_official_commit():
    assert EXPECTED["commit"] == COMMIT


def test_batches_follow_the_sharded_infinite_sampler():
    stream = batch_stream(180, 32, seed=0)
    got = [next(stream).tolist() for _ in range(3)]
    assert got == EXPECTED["probe_adam"]["batches_first3"]


@pytest.mark.parametrize("optimizer", ["adam", "sgd"])
def test_probe_grid_equals_the_release(data, optimizer):
    """Every head's top-1 / top-5, its trained weights and the chosen head, for Adam (the release) and its
    commented-out SGD line."""
    train, y_train, test, y_test = data
    want = EXPECTED[f"probe_{optimizer}"]
    res = train_probe(train, y_train, test, y_test, _probe_config(optimizer), seed=0, num_classes=12)
    assert list(res.heads.name) == list(want["heads"])
    for row, head in zip(res.heads.itertuples(index=False), res.grid.heads, strict=True):
        exp = want["heads"][row.name]
        assert row.top1 == pytest.approx(exp["top1"], abs=1e-4), row.name
        assert row.top5 == pytest.approx(exp["top5"], abs=1e-4), row.name
        assert float(head.weight.detach().double().sum()) == pytest.approx(
            exp["weight_sum"], rel=1e-5, abs=1e-6
        )
        assert float(head.weight.detach().double().abs().sum()) == pytest.approx(exp["weight_abs"], rel=1e-5)
    assert res.best == want["best"]


def test_adam_and_sgd_differ_on_the_fixture():
    """The optimizer matters: the two runs of the release disagree on most heads."""
    adam, sgd = EXPECTED["probe_adam"]["heads"], EXPECTED["probe_sgd"]["heads"]
    differ = sum(adam[k]["top1"] != sgd[k]["top1"] for k in adam)
    assert differ >= 12


def test_retrieval_grid_equals_the_release(data):
    """Projections trained with SGD (momentum 0.9) on the release's triplets; recall@1 and RetrievalMAP of
    every head over the capped, shuffled gallery with multi-hot targets; the chosen head."""
    train, _, test, _ = data
    want = EXPECTED["retrieval"]
    cfg = RetrievalConfig(
        learning_rates=tuple(EXPECTED["lrs"]),
        n_last_blocks=(1, 2),
        avgpool=(False, True),
        batch_size=want["batch_size"],
        epochs=1,
        epoch_length=want["max_iter"],
        embed_dim=want["embed_dim"],
        top_k=10,
        gallery_cap=want["gallery_cap"],
    )
    assert cfg.optimizer == "sgd"
    assert gallery_order(len(train), 0)[: want["gallery_cap"]].tolist() == want["gallery_rows"]
    triplets = np.asarray(want["triplets"]).transpose(0, 2, 1)  # (iteration, batch, anchor/pos/neg)
    res = train_retrieval(
        train, want["train_labels"], test, want["test_labels"], cfg, seed=0, num_classes=12, triplets=triplets
    )
    assert res.gallery_size == want["gallery_cap"]
    for row, head in zip(res.heads.itertuples(index=False), res.grid.heads, strict=True):
        exp = want["heads"][row.name]
        assert row.recall_at_1 == pytest.approx(exp["recall_at_1"], abs=1e-4), row.name
        assert row.map == pytest.approx(exp["map"], abs=1e-4), row.name
        assert float(head.weight.detach().double().sum()) == pytest.approx(
            exp["weight_sum"], rel=1e-5, abs=1e-6
        )
    assert res.best == want["best"]


def test_top1_on_tied_logits_is_argmax_as_torchmetrics():
    t = EXPECTED["ties_top1"]
    logits, labels = torch.tensor(t["logits"]), torch.tensor(t["labels"])
    assert topk_accuracy(logits, labels, 1) == t["top1"] == 75.0  # topk(1) would give 25.0
    assert topk_accuracy(logits, labels, 5) == t["top5"]


def test_retrieval_map_orders_ties_as_torch_argsort():
    t = EXPECTED["ties_map"]
    scores, targets = torch.zeros(3, t["n_classes"]), torch.zeros(3, t["n_classes"])
    for q, c, v in t["nonzero"]:
        scores[q, c] = v
    for q, c in t["targets"]:
        targets[q, c] = 1
    assert retrieval_map(scores, targets) == pytest.approx(t["map"], abs=1e-5)
    assert t["map"] != pytest.approx(t["stable_map"], abs=0.1)  # a stable sort gives another figure
