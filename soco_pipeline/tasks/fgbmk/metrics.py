"""FG-BMK's metrics, vectorised: micro top-k accuracy, macro recall@k (its torchmetrics-based `Recall`),
`RetrievalMAP` (its dinov2/eval/metrics.py class). All in 0-100."""

from __future__ import annotations

import numpy as np
import torch


def topk_accuracy(logits: torch.Tensor | np.ndarray, labels, k: int = 1) -> float:
    """Micro top-k accuracy (torchmetrics MulticlassAccuracy, average='micro'), 0-100, k capped at the class
    count; top-1 takes the first of tied maxima (torch.argmax), k > 1 torch.topk."""
    logits = torch.as_tensor(logits)
    labels = torch.as_tensor(np.asarray(labels), dtype=torch.long)
    if len(labels) == 0:
        return float("nan")
    k = min(k, logits.shape[1])
    top = logits.argmax(1, keepdim=True) if k == 1 else logits.topk(k, dim=1).indices
    return float((top == labels[:, None]).any(1).float().mean()) * 100.0


def macro_recall_at_1(scores: torch.Tensor, targets: torch.Tensor) -> float:
    """FG-BMK's recall@1, 0-100: per class tp / (tp + fn) of each query's best class, averaged over the
    classes with any tp, fp or fn (torchmetrics' macro rule)."""
    pred = torch.nn.functional.one_hot(scores.argmax(1), scores.shape[1]).bool()
    target = targets > 0.5
    tp = (pred & target).sum(0).double()
    fn = (~pred & target).sum(0).double()
    fp = (pred & ~target).sum(0).double()
    used = (tp + fp + fn) > 0
    recall = torch.where(tp + fn > 0, tp / (tp + fn).clamp(min=1), torch.zeros_like(tp))
    return float(recall[used].mean()) * 100.0 if used.any() else float("nan")


def retrieval_map(scores: torch.Tensor, targets: torch.Tensor) -> float:
    """FG-BMK's RetrievalMAP, 0-100: classes ranked by torch.argsort(-score) (ties in that sort's order, as
    released), AP over the relevant classes (target > 1e-3); queries without one skipped."""
    order = torch.argsort(-scores.float(), dim=1)  # = the release's per-row argsort (tests check it on ties)
    rel = (torch.gather(targets, 1, order) > 1e-3).double()
    count = rel.sum(1)
    keep = count > 0
    if not keep.any():
        return float("nan")
    rel = rel[keep]
    ranks = torch.arange(1, rel.shape[1] + 1, dtype=torch.float64)
    hits = rel.cumsum(1)
    ap = (rel * hits / ranks).sum(1) / count[keep]
    return float(ap.mean()) * 100.0
