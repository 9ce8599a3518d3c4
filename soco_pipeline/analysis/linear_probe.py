"""A contrastive linear probe on cached dense features (OmniProbe's `soco_lp`, docs/analysis.md): W starts at
the identity (step 0 is zero-shot), trained with InfoNCE on the train pairs only, scored on the test pairs by
matching.predict and metrics.compute_metrics on W F."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F

from soco_pipeline.analysis.global_metrics import seeded_split
from soco_pipeline.evaluation.matching import (
    cells_of,
    group_ids,
    predict,
    source_descriptors,
    to_unit,
    visible_keypoint_xy,
)
from soco_pipeline.evaluation.metrics import compute_metrics
from soco_pipeline.evaluation.protocol import ProtocolConfig
from soco_pipeline.taxonomy import Taxonomy

PROBE_COLUMNS = (
    "backbone method metric alpha value n n_train_images n_test_images n_train_queries n_test_pairs "
    "steps final_loss seed"
).split()


class ProbeError(ValueError):
    """The probe cannot be trained or scored on these inputs; the message says why and what to do."""


@dataclass(frozen=True)
class ProbeConfig:
    """Knobs of the linear probe (seeded; deterministic on the CPU)."""

    seed: int = 0
    train_fraction: float = 0.5
    dim: int | None = None  # output channels; None = the backbone's C
    temperature: float = 0.07
    steps: int = 200
    lr: float = 5e-3
    targets_per_step: int = 8


def split_images(images: pd.DataFrame, config: ProbeConfig) -> np.ndarray:
    """Boolean train mask over image_set rows: the `split` column when present, else a seeded split."""
    if "split" in images.columns:
        split = images["split"].astype(str).str.lower()
        bad = ~split.isin(["train", "test", "val"])
        if bad.any():
            raise ProbeError(
                f"image {images['image_id'][bad].iloc[0]!r} has split {images['split'][bad].iloc[0]!r}; "
                f"use train, test or val"
            )
        return (split == "train").to_numpy()
    return seeded_split(images["category"], config.train_fraction, config.seed)


class ProjectedStore:
    """A feature store whose maps are a linear probe's output: normalize(W @ F) over channels."""

    def __init__(self, store, weight: torch.Tensor):
        self.store, self.weight = store, weight.detach().float()

    def get(self, image_id: str) -> tuple[np.ndarray, dict]:
        """(D x h x w float32, L2-normalised over channels, meta) of one image."""
        arr, meta = self.store.get(image_id)
        c, h, w = arr.shape
        z = self.weight @ torch.from_numpy(np.asarray(arr, dtype=np.float32)).reshape(c, -1)
        z = F.normalize(z, dim=0).reshape(-1, h, w)
        return z.numpy(), {**meta, "channels": int(z.shape[0])}


def _pair_split(
    image_pairs: pd.DataFrame, train_ids: set, test_ids: set
) -> tuple[pd.DataFrame, pd.DataFrame]:
    src, trg = image_pairs["src_image"], image_pairs["trg_image"]
    train = image_pairs[src.isin(train_ids) & trg.isin(train_ids)]
    test = image_pairs[src.isin(test_ids) & trg.isin(test_ids) & image_pairs["evaluated"].astype(bool)]
    return train, test


def training_examples(
    store,
    train_pairs: pd.DataFrame,
    correspondences: pd.DataFrame,
    keypoints: pd.DataFrame,
    images: pd.DataFrame,
    protocol: ProtocolConfig,
    backbone: str,
) -> tuple[torch.Tensor, np.ndarray, np.ndarray, np.ndarray]:
    """The train pairs' queries: source descriptors, target images and positive (query, cell) rows."""
    train_rows = correspondences[correspondences["pair_id"].isin(train_pairs["pair_id"])]
    soc = train_rows[train_rows["kind"] == "soc"]
    cc = train_rows[train_rows["kind"] == "cc"]
    has_soc = pd.MultiIndex.from_frame(soc[["pair_id", "src_keypoint"]])
    cc_only = cc[~pd.MultiIndex.from_frame(cc[["pair_id", "src_keypoint"]]).isin(has_soc)]
    rows = pd.concat([soc, cc_only], ignore_index=True)
    if soc.empty:
        raise ProbeError(
            f"backbone {backbone!r}: no SOC correspondences between train images; use more images per category "
            f"or a larger train fraction"
        )
    rows = rows.merge(train_pairs[["pair_id", "src_image", "trg_image"]], on="pair_id")
    query, first = group_ids(rows["pair_id"].to_numpy(), rows["src_keypoint"].to_numpy())
    desc, code = source_descriptors(rows.iloc[first], keypoints, images, store, protocol, backbone, "cpu")
    trg = rows["trg_image"].to_numpy()
    xy = visible_keypoint_xy(keypoints, trg, rows["trg_keypoint"].to_numpy(), "target")
    sizes = images.set_index("image_id").loc[trg, ["width", "height"]].to_numpy(np.float64)
    cells = np.zeros(len(rows), dtype=np.int64)
    meta_of = getattr(store, "meta", None)
    for image_id in pd.unique(trg):  # one meta read per target image
        sel = trg == image_id
        meta = meta_of(image_id) if meta_of is not None else store.get(image_id)[1]
        uv = to_unit(xy[sel], sizes[sel], int(meta["input_size"]), protocol)
        cells[sel] = cells_of(uv, int(meta["grid_h"]), int(meta["grid_w"]))
    positives = np.unique(np.stack([query, cells], axis=1), axis=0)
    return desc[torch.as_tensor(code)].float(), trg[first], positives[:, 0], positives[:, 1]


def _multi_positive_nce(logits: torch.Tensor, rows: torch.Tensor, cells: torch.Tensor) -> torch.Tensor:
    """Sum over queries of -log(sum of softmax over the grid at the query's positive cells)."""
    n = logits.shape[0]
    pos = logits[rows, cells]
    # log-sum-exp of each query's positives: scatter of exp after subtracting the row max (stable)
    top = logits.max(dim=1).values.detach()
    num = torch.zeros(n, dtype=logits.dtype).index_add(0, rows, (pos - top[rows]).exp())
    return (torch.logsumexp(logits, dim=1) - (num.log() + top)).sum()


def train_probe(
    store,
    descriptors: torch.Tensor,
    targets: np.ndarray,
    pos_query: np.ndarray,
    pos_cell: np.ndarray,
    config: ProbeConfig,
    log: Callable[[str], None] | None = None,
) -> tuple[torch.Tensor, list[float]]:
    """The trained W (D x C) and the loss per step (InfoNCE over each target's grid)."""
    log = log or (lambda _m: None)
    c = descriptors.shape[1]
    d = config.dim or c
    gen = torch.Generator().manual_seed(int(config.seed))
    weight = (
        torch.eye(d, c) if d <= c else torch.cat([torch.eye(c), 0.01 * torch.randn(d - c, c, generator=gen)])
    )
    weight = weight.clone().requires_grad_(True)
    opt = torch.optim.Adam([weight], lr=config.lr)
    uniq, owner = np.unique(targets, return_inverse=True)
    queries_of = [np.flatnonzero(owner == t) for t in range(len(uniq))]
    rng = np.random.default_rng(config.seed)
    order, at, losses = rng.permutation(len(uniq)), 0, []
    pos_query_t, pos_cell_t = torch.as_tensor(pos_query), torch.as_tensor(pos_cell)
    for step in range(config.steps):
        if at >= len(order):
            order, at = rng.permutation(len(uniq)), 0
        chosen, at = order[at : at + config.targets_per_step], at + config.targets_per_step
        loss, count = torch.zeros(()), 0
        for t in chosen:  # a few target maps per step; all their queries at once
            arr, _ = store.get(uniq[t])
            fmap = torch.from_numpy(np.asarray(arr, dtype=np.float32)).reshape(arr.shape[0], -1)
            q = queries_of[t]
            local = np.full(len(descriptors), -1)
            local[q] = np.arange(len(q))
            sel = torch.from_numpy(np.isin(pos_query, q))
            z = F.normalize(weight @ fmap, dim=0)  # D x hw
            s = F.normalize(descriptors[q] @ weight.T, dim=1)  # n x D
            logits = (s @ z) / config.temperature
            rows = torch.as_tensor(local)[pos_query_t[sel]]
            loss = loss + _multi_positive_nce(logits, rows, pos_cell_t[sel])
            count += len(q)
        loss = loss / max(count, 1)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
        if step % 50 == 0 or step == config.steps - 1:
            log(f"probe step {step}/{config.steps}: InfoNCE {losses[-1]:.3f}")
    return weight.detach(), losses


def probe_metrics(
    store,
    image_pairs: pd.DataFrame,
    correspondences: pd.DataFrame,
    keypoints: pd.DataFrame,
    images: pd.DataFrame,
    taxonomy: Taxonomy,
    protocol: ProtocolConfig,
    backbone: str,
    config: ProbeConfig | None = None,
    log: Callable[[str], None] | None = None,
) -> pd.DataFrame:
    """Train the probe and score zero-shot and probe on the test pairs (PROBE_COLUMNS)."""
    config = config or ProbeConfig()
    log = log or (lambda _m: None)
    train_mask = split_images(images, config)
    train_ids, test_ids = set(images["image_id"][train_mask]), set(images["image_id"][~train_mask])
    train_pairs, test_pairs = _pair_split(image_pairs, train_ids, test_ids)
    if test_pairs.empty:
        raise ProbeError(
            f"backbone {backbone!r}: no evaluated pair has two test images; lower train_fraction"
        )
    desc, targets, pos_query, pos_cell = training_examples(
        store, train_pairs, correspondences, keypoints, images, protocol, backbone
    )
    log(
        f"[{backbone}] probe: {len(train_ids)} train / {len(test_ids)} test images, {len(desc)} train queries, "
        f"{len(test_pairs)} test pairs"
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(config.seed)
        weight, losses = train_probe(store, desc, targets, pos_query, pos_cell, config, log)
    test_pairs = test_pairs.assign(evaluated=True)
    frames = []
    for method, s in (("zero_shot", store), ("probe", ProjectedStore(store, weight))):
        preds = predict(test_pairs, correspondences, keypoints, images, s, protocol, backbone)
        m = compute_metrics(preds, None, correspondences, keypoints, images, test_pairs, taxonomy, protocol)
        m = m[(m["scope"] == "all") & (m["reduction"] == "official")]
        frames.append(m.assign(method=method))
    out = pd.concat(frames, ignore_index=True).assign(
        n_train_images=len(train_ids),
        n_test_images=len(test_ids),
        n_train_queries=len(desc),
        n_test_pairs=len(test_pairs),
        steps=config.steps,
        final_loss=losses[-1] if losses else np.nan,
        seed=config.seed,
    )
    return out[PROBE_COLUMNS].reset_index(drop=True)
