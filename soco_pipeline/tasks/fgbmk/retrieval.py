"""FG-BMK's open-set retrieval (its eval_retrieval.py) on cached global features: triplet-trained projections
on even class ids, test queries against a seeded train gallery, recall@1 and RetrievalMAP (docs/fgbmk.md)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F

from soco_pipeline.features.global_cache import GlobalFeatures
from soco_pipeline.tasks.fgbmk.config import RetrievalConfig
from soco_pipeline.tasks.fgbmk.linear_probe import HeadGrid, batch_stream, best_head, build_grid, train_grid
from soco_pipeline.tasks.fgbmk.metrics import macro_recall_at_1, retrieval_map

NO_NEIGHBOUR = -1e4


def as_label_lists(labels) -> list[list[int]]:
    """Labels as lists (an int per row, or a list of ints for multi-label rows)."""
    return [[int(v)] if np.ndim(v) == 0 else [int(x) for x in v] for v in labels]


def multi_hot(labels: list[list[int]], num_classes: int) -> torch.Tensor:
    """(N, C) float one-/multi-hot targets."""
    out = torch.zeros(len(labels), num_classes)
    rows = torch.tensor([i for i, lab in enumerate(labels) for _ in lab], dtype=torch.long)
    cols = torch.tensor([c for lab in labels for c in lab], dtype=torch.long)
    out[rows, cols] = 1.0
    return out


@dataclass(frozen=True)
class TripletSampler:
    """Triplet rows from the even-class train images (published: has_known=True, has_unknown=False)."""

    rows: np.ndarray  # train rows kept (at least one even label)
    labels: list[list[int]]  # their even labels
    negative: str
    seed: int

    @classmethod
    def from_labels(cls, labels, negative: str = "uniform", seed: int = 0) -> TripletSampler:
        """Keep each row's even labels; drop rows with none."""
        lists = as_label_lists(labels)
        even = [[c for c in lab if c % 2 == 0] for lab in lists]
        rows = np.array([i for i, lab in enumerate(even) if lab], dtype=np.int64)
        if len(rows) == 0:
            raise ValueError(
                "retrieval: no train image has an even class id; the projection has nothing to learn"
            )
        return cls(rows, [even[i] for i in rows], negative, seed)

    def triplets(self, batch_size: int, iterations: int) -> np.ndarray:
        """(iterations, batch_size, 3) train-row indices (anchor, positive, negative), seeded."""
        rng = np.random.default_rng([int(self.seed), 0x7219])
        n = len(self.rows)
        single = np.array([len(lab) == 1 for lab in self.labels])
        first = np.array([lab[0] for lab in self.labels])
        # Single-label rows: members of each class contiguous in `by_class`; a positive is a uniform draw among
        # the anchor's class mates other than itself (itself when alone).
        by_class = np.argsort(first, kind="stable")
        starts = np.searchsorted(first[by_class], first)
        counts = np.bincount(first, minlength=int(first.max()) + 1)[first]
        rank = np.empty(n, dtype=np.int64)
        rank[by_class] = np.arange(n) - np.searchsorted(first[by_class], first[by_class])
        stream = batch_stream(n, batch_size, self.seed)
        anchors = (
            np.stack([next(stream).numpy() for _ in range(iterations)])
            if iterations
            else np.empty((0, batch_size), dtype=np.int64)
        )
        r = np.floor(rng.random(anchors.shape) * np.maximum(counts[anchors] - 1, 1)).astype(np.int64)
        r = np.where(counts[anchors] > 1, r + (r >= rank[anchors]), rank[anchors])
        pos = by_class[starts[anchors] + r]
        for it, b in zip(*np.nonzero(~single[anchors]), strict=True):  # multi-label anchors: any class shared
            a = anchors[it, b]
            pool = [j for j in range(n) if j != a and set(self.labels[j]) & set(self.labels[a])] or [a]
            pos[it, b] = pool[int(rng.integers(len(pool)))]
        neg = rng.integers(0, n, size=anchors.shape)
        if self.negative == "other_class":
            for _ in range(100):
                same = (first[neg] == first[anchors]) & single[neg] & single[anchors]
                if not same.any():
                    break
                neg[same] = rng.integers(0, n, size=int(same.sum()))
        return self.rows[np.stack([anchors, pos, neg], axis=-1)]


def pairwise_similarity(query: torch.Tensor, gallery: torch.Tensor, chunk: int = 2**24) -> torch.Tensor:
    """(M, N) minus F.pairwise_distance of every query and gallery row (the release's call, eps included),
    computed in query chunks of at most `chunk` elements of the (m, N, D) difference."""
    if not len(query):
        return torch.empty(0, gallery.shape[0])
    rows = max(1, chunk // max(1, gallery.shape[0] * gallery.shape[1]))  # queries per chunk
    return torch.cat([-F.pairwise_distance(q.unsqueeze(1), gallery.unsqueeze(0)) for q in query.split(rows)])


def class_scores(
    query: torch.Tensor, gallery: torch.Tensor, gallery_targets: torch.Tensor, top_k: int
) -> torch.Tensor:
    """Softmaxed class scores of each query from its top-k gallery neighbours (nearest wins per class)."""
    sim = pairwise_similarity(query, gallery)
    k = min(top_k, gallery.shape[0])
    values, idx = sim.topk(k, dim=1)
    logits = torch.full((query.shape[0], gallery_targets.shape[1]), NO_NEIGHBOUR)
    for i in range(k - 1, -1, -1):  # farthest first, so the nearest neighbour holding a class writes last
        logits = torch.where(
            gallery_targets[idx[:, i]] > 0.999, values[:, i : i + 1].expand_as(logits), logits
        )
    return logits.softmax(-1)


def gallery_order(n: int, seed: int) -> torch.Tensor:
    """The release's gallery order: torch.DistributedSampler(shuffle=True, seed) on one process, i.e.
    randperm(n) of a generator seeded with seed + epoch 0; evaluate_retrieval keeps the first 20,000."""
    return torch.randperm(n, generator=torch.Generator().manual_seed(int(seed)))


@dataclass
class RetrievalResult:
    """The grid's scores on the queries, the best head and its scores."""

    heads: pd.DataFrame  # name, n_blocks, avgpool, lr, recall_at_1, map
    best: str
    recall_at_1: float
    map: float
    gallery_size: int
    iterations: int
    seconds: float
    grid: HeadGrid = field(repr=False)
    triplets: np.ndarray = field(repr=False)


def train_retrieval(
    train: GlobalFeatures,
    train_labels,
    test: GlobalFeatures,
    test_labels,
    config: RetrievalConfig,
    seed: int = 0,
    num_classes: int | None = None,
    triplets: np.ndarray | None = None,
) -> RetrievalResult:
    """Train the projection grid on even-class triplets and score every head on test queries vs the gallery
    (`triplets`: (iterations, batch, 3) train rows replacing the sampler's)."""
    train_lists, test_lists = as_label_lists(train_labels), as_label_lists(test_labels)
    k = int(
        num_classes
        if num_classes is not None
        else max(c for lab in train_lists + test_lists for c in lab) + 1
    )
    if triplets is None:
        sampler = TripletSampler.from_labels(train_lists, config.negative, seed)
        triplets = sampler.triplets(config.batch_size, config.max_iter)
    grid = build_grid(train, config.embed_dim, config, seed)
    x_train = grid.inputs(train)
    keys = [(c[0], c[1]) for c in grid.configs]

    def loss_of(it: int) -> torch.Tensor:
        flat = torch.from_numpy(triplets[it].T.reshape(-1))  # anchors, then positives, then negatives
        batch = {key: x[flat] for key, x in x_train.items()}
        return sum(
            F.triplet_margin_loss(*h(batch[key]).chunk(3), margin=config.margin)
            for h, key in zip(grid.heads, keys, strict=True)
        )

    seconds = train_grid(grid, config, loss_of)
    gallery_rows = gallery_order(len(train), seed)[: config.gallery_cap]
    gallery_targets = multi_hot([train_lists[i] for i in gallery_rows.tolist()], k)
    targets = multi_hot(test_lists, k)
    x_test = grid.inputs(test)

    def metrics(c: tuple, h: torch.nn.Linear) -> dict:
        key = (c[0], c[1])
        scores = class_scores(h(x_test[key]), h(x_train[key][gallery_rows]), gallery_targets, config.top_k)
        return {"recall_at_1": macro_recall_at_1(scores, targets), "map": retrieval_map(scores, targets)}

    table = grid.table(metrics)
    best = best_head(table.recall_at_1.to_numpy())
    b = table.iloc[best]
    return RetrievalResult(
        table,
        b["name"],
        float(b.recall_at_1),
        float(b["map"]),
        len(gallery_rows),
        config.max_iter,
        seconds,
        grid,
        triplets,
    )
