"""Global-feature metrics from the feature cache (docs/analysis.md): kNN top-1 / top-5 and retrieval mAP on
the `mean`, `cls` and `global` features, in blocks of queries."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd
import torch

GLOBAL_METRIC_COLUMNS = (
    "backbone feature track metric k value n_queries n_gallery n_classes temperature seed headline".split()
)
KS = (20, 100, 200)
TEMPERATURE = 0.07


def image_cells(meta: dict) -> tuple[int, int]:
    """(rows, cols) of the grid cells overlapping the image (top-left of the padded square)."""
    side = max(meta["width"], meta["height"])
    rows = int(np.ceil(meta["height"] / side * meta["grid_h"] - 1e-9))
    cols = int(np.ceil(meta["width"] / side * meta["grid_w"] - 1e-9))
    return max(rows, 1), max(cols, 1)


def _normalise(x: np.ndarray) -> np.ndarray:
    n = np.linalg.norm(x, axis=1, keepdims=True)
    return (x / np.where(n > 0, n, 1.0)).astype(np.float32)


def pooled_features(store, image_ids) -> np.ndarray:
    """(N x C) L2-normalised mean of each image's cached map over its image cells (fp16 read, float32 sum)."""
    out = None
    for i, image_id in enumerate(image_ids):  # one read per image; the pooling itself is one numpy call
        arr, meta = getattr(store, "get_stored", store.get)(image_id)
        rows, cols = image_cells(meta)
        if out is None:
            out = np.empty((len(image_ids), arr.shape[0]), dtype=np.float32)
        out[i] = arr[:, :rows, :cols].mean(axis=(1, 2), dtype=np.float32)
    return _normalise(out if out is not None else np.zeros((0, 0), np.float32))


def class_tokens(store, image_ids) -> np.ndarray | None:
    """(N x C) cached class tokens, or None when the store has none (not a timm ViT, or an older cache)."""
    if not getattr(store, "has_class_token", False):
        return None
    return _normalise(np.stack([store.class_token(i) for i in image_ids]))


def seeded_split(labels: pd.Series, train_fraction: float, seed: int) -> np.ndarray:
    """Train mask: a seeded `train_fraction` per label, at least one train (and test) row."""
    rng = np.random.default_rng(seed)
    u = rng.random(len(labels))
    codes = pd.factorize(labels)[0]
    # Rank of each row's random draw within its label: the lowest ranks go to train.
    order = np.lexsort((u, codes))
    rank = np.empty(len(codes), dtype=np.int64)
    counts = np.bincount(codes)
    starts = np.r_[0, np.cumsum(counts)[:-1]]
    rank[order] = np.arange(len(codes)) - np.repeat(starts, counts)
    n_train = np.clip(np.round(counts * train_fraction), 1, np.maximum(counts - 1, 1)).astype(np.int64)
    return rank < n_train[codes]


def _blocks(n: int, size: int):
    for a in range(0, n, size):
        yield slice(a, min(n, a + size))


def knn_accuracy(
    train_x: np.ndarray,
    train_y: np.ndarray,
    test_x: np.ndarray,
    test_y: np.ndarray,
    ks=KS,
    temperature: float = TEMPERATURE,
    n_classes: int | None = None,
    block: int = 1024,
    allowed: Callable[[slice], torch.Tensor] | None = None,
) -> dict[int, tuple[float, float]]:
    """{k: (top-1 %, top-5 %)} of weighted kNN voting; `allowed` masks each query's neighbours."""
    tx, ty = torch.from_numpy(np.ascontiguousarray(train_x)), torch.from_numpy(np.asarray(train_y, np.int64))
    qx, qy = torch.from_numpy(np.ascontiguousarray(test_x)), torch.from_numpy(np.asarray(test_y, np.int64))
    n_classes = int(n_classes or (max(int(ty.max()), int(qy.max())) + 1))
    kmax = min(max(ks), len(tx))
    hits = {k: np.zeros(2) for k in ks}
    for s in _blocks(len(qx), block):
        sims = qx[s] @ tx.T
        if allowed is not None:
            sims = sims.masked_fill(~allowed(s), float("-inf"))
        top_sim, top_idx = sims.topk(kmax, dim=1)
        weights = (top_sim / temperature).exp()  # -inf -> weight 0
        labels = ty[top_idx]
        truth = qy[s][:, None]
        for k in ks:
            kk = min(k, kmax)
            votes = torch.zeros(len(top_idx), n_classes, dtype=weights.dtype)
            votes.scatter_add_(1, labels[:, :kk], weights[:, :kk])
            pred = votes.topk(min(5, n_classes), dim=1).indices
            hits[k] += [(pred[:, :1] == truth).any(1).sum().item(), (pred == truth).any(1).sum().item()]
    n = max(len(qx), 1)
    return {k: (100.0 * h[0] / n, 100.0 * h[1] / n) for k, h in hits.items()}


def retrieval_map(
    gallery_x: np.ndarray,
    gallery_y: np.ndarray,
    query_x: np.ndarray,
    query_y: np.ndarray,
    block: int = 512,
    allowed: Callable[[slice], torch.Tensor] | None = None,
) -> float:
    """Mean average precision (%) of cosine gallery rankings (relevant = same label)."""
    gx = torch.from_numpy(np.ascontiguousarray(gallery_x))
    gy = torch.from_numpy(np.asarray(gallery_y, np.int64))
    qx, qy = torch.from_numpy(np.ascontiguousarray(query_x)), torch.from_numpy(np.asarray(query_y, np.int64))
    ap_sum, n_q = 0.0, 0
    ranks = torch.arange(1, len(gx) + 1, dtype=torch.float64)
    for s in _blocks(len(qx), block):
        sims = qx[s] @ gx.T
        rel_all = gy[None, :] == qy[s][:, None]
        if allowed is not None:
            mask = allowed(s)
            sims = sims.masked_fill(~mask, float("-inf"))
            rel_all &= mask
        order = sims.argsort(dim=1, descending=True, stable=True)
        rel = rel_all.gather(1, order).double()
        n_rel = rel.sum(1)
        prec = rel.cumsum(1) / ranks
        ap = (prec * rel).sum(1) / n_rel.clamp(min=1)
        ok = n_rel > 0
        ap_sum += float(ap[ok].sum())
        n_q += int(ok.sum())
    return 100.0 * ap_sum / max(n_q, 1)


def _track_rows(feats, labels, groups, train, ks, temperature) -> list[dict]:
    """kNN and mAP rows of one feature kind on one track (`groups` restricts neighbours; None: none)."""
    codes, uniques = pd.factorize(labels)
    tr, te = np.flatnonzero(train), np.flatnonzero(~train)
    allowed = None
    if groups is not None:
        g = torch.from_numpy(pd.factorize(groups)[0])
        g_tr, g_te = g[tr], g[te]

        def allowed(s):
            return g_te[s][:, None] == g_tr[None, :]

    acc = knn_accuracy(
        feats[tr], codes[tr], feats[te], codes[te], ks, temperature, len(uniques), allowed=allowed
    )
    common = {"n_queries": len(te), "n_gallery": len(tr), "n_classes": len(uniques)}
    rows = []
    for k, (t1, t5) in acc.items():
        rows += [
            dict(metric="knn_top1", k=k, value=t1, **common),
            dict(metric="knn_top5", k=k, value=t5, **common),
        ]
    mean_ap = retrieval_map(feats[tr], codes[tr], feats[te], codes[te], allowed=allowed)
    rows.append(dict(metric="retrieval_map", k=np.nan, value=mean_ap, **common))
    return rows


def global_metrics(
    store,
    images: pd.DataFrame,
    backbone: str,
    family_of: Callable[[str], str] | None = None,
    seed: int = 0,
    train_fraction: float = 0.5,
    ks=KS,
    temperature: float = TEMPERATURE,
    log: Callable[[str], None] | None = None,
    global_features=None,
) -> pd.DataFrame:
    """kNN top-1/top-5 and retrieval mAP (0-100) of a backbone's cached features."""
    log = log or (lambda _m: None)
    images = images[["image_id", "category"]].drop_duplicates("image_id").reset_index(drop=True)
    ids = images["image_id"].tolist()
    train = seeded_split(images["category"], train_fraction, seed)
    kinds = {"mean": pooled_features(store, ids)}
    tokens = class_tokens(store, ids)
    if tokens is not None:
        kinds["cls"] = tokens
    if global_features is not None:
        kinds["global"] = _normalise(global_features.subset(ids).cls_last)
    headline_kind = "cls" if "cls" in kinds else "mean"
    rows = []
    tracks: dict[str, tuple[pd.Series, pd.Series | None]] = {"category": (images["category"], None)}
    if family_of is not None:
        fam = images["category"].map(family_of)
        multi = fam.map(images.groupby(fam)["category"].nunique()) >= 2
        if multi.any():
            tracks["fine_grained"] = (images["category"].where(multi), fam.where(multi))
    for kind, feats in kinds.items():
        for track, (labels, groups) in tracks.items():
            keep = labels.notna().to_numpy()
            grouped = None if groups is None else groups[keep].to_numpy()
            sub = _track_rows(feats[keep], labels[keep].to_numpy(), grouped, train[keep], ks, temperature)
            for r in sub:
                r.update(
                    backbone=backbone,
                    feature=kind,
                    track=track,
                    temperature=temperature,
                    seed=seed,
                    headline=bool(
                        kind == headline_kind
                        and track == "category"
                        and (r["metric"] == "retrieval_map" or r["k"] == 20)
                    ),
                )
            rows += sub
            log(
                f"[{backbone}] {kind} / {track}: "
                + ", ".join(
                    f"{r['metric']}{'' if np.isnan(r['k']) else '@' + str(int(r['k']))}={r['value']:.1f}"
                    for r in sub
                    if r["metric"] != "knn_top5"
                )
            )
    return pd.DataFrame(rows, columns=GLOBAL_METRIC_COLUMNS).astype({"k": "float64", "value": "float64"})


def headline_global(metrics: pd.DataFrame) -> pd.DataFrame:
    """One row per backbone: knn_top1 (k = 20) and retrieval_map of the headline rows (leaderboard columns)."""
    cols = ["knn_top1", "retrieval_map"]
    h = metrics[metrics["headline"].astype(bool) & metrics["metric"].isin(cols)]
    if h.empty:
        return pd.DataFrame(columns=["backbone", *cols])
    wide = h.pivot_table(index="backbone", columns="metric", values="value", aggfunc="first")
    return wide.reindex(columns=cols).reset_index().rename_axis(columns=None)
