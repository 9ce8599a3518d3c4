"""FG-BMK's linear probe (its modified DINOv2 eval/linear.py) on cached global features (docs/fgbmk.md,
"Linear probe"); deviation, on purpose: heads train on the eval-transform features, not augmented crops."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F

from soco_pipeline.features.global_cache import GlobalFeatures
from soco_pipeline.features.global_extractors import torch_threads
from soco_pipeline.tasks.fgbmk.config import TrainConfig
from soco_pipeline.tasks.fgbmk.metrics import topk_accuracy


def single_thread():
    """Run a block with one torch thread: the heads' matrices are small, and on a busy machine intra-op
    threads spin-wait (measured 60x slower per step with 2 threads under load)."""
    return torch_threads(1)


def scale_lr(lr: float, batch_size: int) -> float:
    """The published scaling: lr x batch_size x world_size / 256 (one process)."""
    return lr * batch_size / 256.0


def head_name(n_blocks: int, avgpool: bool, lr: float) -> str:
    """The published classifier name, e.g. classifier_2_blocks_avgpool_True_lr_0_00500."""
    return f"classifier_{n_blocks}_blocks_avgpool_{avgpool}_lr_{lr:.5f}".replace(".", "_")


def sharded_infinite_order(n: int, seed: int, pass_index: int, perm: torch.Tensor) -> np.ndarray:
    """One pass of DINOv2's ShardedInfiniteSampler (one process, `_shuffle_tensor_slice`): re-seeded with
    seed + (pass << 24), then an inside-out Fisher-Yates drawing torch.randint(0, i + 1) for i = 1..n-1."""
    g = torch.Generator().manual_seed(int(seed) + (int(pass_index) << 24))
    # One randint call per element, as the release draws them: torch's vectorised randint does not give the
    # same numbers, and the shuffle itself is sequential (each step moves an earlier pick).
    draws = [0] + [int(torch.randint(0, i + 1, size=(1,), generator=g).item()) for i in range(1, n)]
    src = perm.numpy()
    out = np.empty(n, dtype=np.int64)
    for i, j in enumerate(draws):
        out[i] = out[j]
        out[j] = src[i]
    return out


def batch_stream(n: int, batch_size: int, seed: int):
    """Row-index batches of FG-BMK's training loader: DINOv2's ShardedInfiniteSampler (shuffle, seed, one
    process) cut into batches of batch_size, drop_last. The first pass shuffles randperm(n, seed) again."""
    g = torch.Generator().manual_seed(int(seed))
    perm = torch.randperm(n, generator=g, dtype=torch.int32 if n <= 2**31 else torch.int64)
    buf = np.empty(0, dtype=np.int64)
    pass_index = 0
    while True:
        while len(buf) < batch_size:
            buf = np.concatenate([buf, sharded_infinite_order(n, seed, pass_index, perm)])
            pass_index += 1
        yield torch.from_numpy(buf[:batch_size].copy())
        buf = buf[batch_size:]


@dataclass
class HeadGrid:
    """The trained heads of one run: input config per head and its nn.Linear."""

    names: list[str]
    configs: list[tuple[int, bool, float]]  # (n_blocks, avgpool, scaled lr)
    heads: list[torch.nn.Linear]

    def inputs(self, feats: GlobalFeatures) -> dict[tuple[int, bool], torch.Tensor]:
        """The probe input of every (n_blocks, avgpool) the grid uses."""
        keys = dict.fromkeys((c[0], c[1]) for c in self.configs)
        return {(n, a): torch.from_numpy(feats.probe_input(n, a)) for n, a in keys}

    def table(self, metrics: Callable[[tuple, torch.nn.Linear], dict]) -> pd.DataFrame:
        """One row per head: name, n_blocks, avgpool, lr and its `metrics(config, head)` (no grad)."""
        with torch.no_grad():
            heads = zip(self.names, self.configs, self.heads, strict=True)
            rows = [
                {"name": n, "n_blocks": c[0], "avgpool": c[1], "lr": c[2], **metrics(c, h)}
                for n, c, h in heads
            ]
        return pd.DataFrame(rows)

    def head(self, name: str) -> tuple[tuple[int, bool, float], torch.nn.Linear]:
        """The config and layer of a named head."""
        i = self.names.index(name)
        return self.configs[i], self.heads[i]


def build_grid(feats: GlobalFeatures, out_dim: int, config: TrainConfig, seed: int) -> HeadGrid:
    """One seeded head per (n_blocks, avgpool, lr), in the published loop order."""
    names, configs, heads = [], [], []
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(seed))
        for n in config.n_last_blocks:
            for avg in config.avgpool:
                dim = feats.probe_input(n, avg).shape[1]
                for lr in config.learning_rates:
                    lin = torch.nn.Linear(dim, out_dim)
                    lin.weight.data.normal_(mean=0.0, std=0.01)
                    lin.bias.data.zero_()
                    s = scale_lr(lr, config.batch_size)
                    names.append(head_name(n, avg, s))
                    configs.append((n, avg, s))
                    heads.append(lin)
    return HeadGrid(names, configs, heads)


def make_optimizer(
    grid: HeadGrid, config: TrainConfig
) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LRScheduler]:
    """One param group per head at its scaled lr; cosine annealing to 0 over max_iter."""
    groups = [
        {"params": list(h.parameters()), "lr": c[2]} for c, h in zip(grid.configs, grid.heads, strict=True)
    ]
    if config.optimizer == "sgd":
        opt: torch.optim.Optimizer = torch.optim.SGD(
            groups, momentum=config.momentum, weight_decay=config.weight_decay
        )
    else:
        opt = torch.optim.Adam(groups, weight_decay=config.weight_decay)
    return opt, torch.optim.lr_scheduler.CosineAnnealingLR(opt, config.max_iter, eta_min=0)


def train_grid(grid: HeadGrid, config: TrainConfig, loss_of: Callable[[int], torch.Tensor]) -> float:
    """`config.max_iter` steps on one torch thread; `loss_of(it)` is all heads' loss. Returns the seconds."""
    opt, sched = make_optimizer(grid, config)
    t0 = time.perf_counter()
    with single_thread():
        for it in range(config.max_iter):
            loss = loss_of(it)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
    return time.perf_counter() - t0


def best_head(scores: np.ndarray) -> int:
    """The published pick: the first head whose score is strictly above every earlier one, starting from 0
    (a head must beat 0; when none does, the release names no head: we keep the first, index 0)."""
    s = np.nan_to_num(np.asarray(scores, dtype=np.float64), nan=-1.0)
    return int(s.argmax()) if s.max() > 0 else 0


@dataclass
class ProbeResult:
    """The grid's scores on the evaluation split, the best head and its scores."""

    heads: pd.DataFrame  # name, n_blocks, avgpool, lr, top1, top5
    best: str
    top1: float
    top5: float
    num_classes: int
    iterations: int
    seconds: float
    grid: HeadGrid = field(repr=False)
    eval_logits: torch.Tensor = field(repr=False)


def train_probe(
    train: GlobalFeatures,
    train_labels,
    evaluation: GlobalFeatures,
    eval_labels,
    config: TrainConfig,
    seed: int = 0,
    num_classes: int | None = None,
) -> ProbeResult:
    """Train the head grid on (train, labels) and score every head on the evaluation split."""
    y = torch.as_tensor(np.asarray(train_labels), dtype=torch.long)
    y_eval = torch.as_tensor(np.asarray(eval_labels), dtype=torch.long)
    if len(y) != len(train) or len(y_eval) != len(evaluation):
        raise ValueError("train_probe: one label per feature row is needed, in both splits")
    # FG-BMK's Dataset counts classes as the largest train label + 1.
    k = int(num_classes if num_classes is not None else int(y.max()) + 1)
    grid = build_grid(train, k, config, seed)
    x_train = grid.inputs(train)
    stream = batch_stream(len(y), config.batch_size, seed)
    idx_of = [(c[0], c[1]) for c in grid.configs]

    def loss_of(_it: int) -> torch.Tensor:
        rows = next(stream)
        batch = {key: x[rows] for key, x in x_train.items()}
        return sum(F.cross_entropy(h(batch[key]), y[rows]) for h, key in zip(grid.heads, idx_of, strict=True))

    seconds = train_grid(grid, config, loss_of)
    x_eval = grid.inputs(evaluation)
    logits = []

    def metrics(c: tuple, h: torch.nn.Linear) -> dict:
        logits.append(h(x_eval[(c[0], c[1])]))
        return {"top1": topk_accuracy(logits[-1], y_eval, 1), "top5": topk_accuracy(logits[-1], y_eval, 5)}

    table = grid.table(metrics)
    best = best_head(table.top1.to_numpy())
    b = table.iloc[best]
    return ProbeResult(
        table, b["name"], float(b.top1), float(b.top5), k, config.max_iter, seconds, grid, logits[best]
    )
