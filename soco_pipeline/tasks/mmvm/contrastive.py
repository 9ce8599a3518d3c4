"""Beyond the paper: CoLVA's object-level contrastive idea on frozen features as a linear head W (C -> D),
trained with Adam and InfoNCE on the training split (docs/mmvm.md, "Feature backbones")."""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch


def training_pairs(objects: pd.DataFrame, cases: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(anchors, pool): frame-1 objects seen again in frame 2 of a training case (`target`: the pool row)."""
    train = set(cases.loc[cases["split"] == "train", "case_id"])
    obj = objects[
        objects["case_id"].isin(train) & objects["role"].isin(["query", "match", "distractor", "other"])
    ]
    pool = obj[obj["frame"] == 1].reset_index(drop=True)
    pos = {(c, i): k for k, (c, i) in enumerate(zip(pool["case_id"], pool["identity"], strict=True))}
    anchors = obj[obj["frame"] == 0].copy()
    anchors["target"] = [
        pos.get((c, i), -1) for c, i in zip(anchors["case_id"], anchors["identity"], strict=True)
    ]
    return anchors[anchors["target"] >= 0].reset_index(drop=True), pool


def train_head(
    descriptors: dict,
    objects: pd.DataFrame,
    cases: pd.DataFrame,
    dim: int = 64,
    steps: int = 200,
    lr: float = 0.01,
    temperature: float = 0.1,
    seed: int = 0,
) -> np.ndarray:
    """The trained C x D head (float32); with no training pair, the initial random projection."""
    anchors, pool = training_pairs(objects, cases)
    some = next(iter(descriptors.values()))
    c = int(some.shape[0])
    gen = torch.Generator().manual_seed(int(seed))
    d = min(dim, c)
    w0 = torch.linalg.qr(torch.randn(c, d, generator=gen))[0]
    if anchors.empty:
        return w0.numpy().astype(np.float32)
    a = torch.from_numpy(
        np.stack(
            [descriptors[(i, int(lb))] for i, lb in zip(anchors["image_id"], anchors["label"], strict=True)]
        )
    ).float()
    p = torch.from_numpy(
        np.stack([descriptors[(i, int(lb))] for i, lb in zip(pool["image_id"], pool["label"], strict=True)])
    ).float()
    same_case = torch.from_numpy(
        anchors["case_id"].to_numpy()[:, None] == pool["case_id"].to_numpy()[None, :]
    )
    target = torch.from_numpy(anchors["target"].to_numpy()).long()
    w = torch.nn.Parameter(w0.clone())
    opt = torch.optim.Adam([w], lr=lr)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # matrices of a few hundred rows: extra threads only contend
    try:
        for _ in range(steps):
            za = torch.nn.functional.normalize(a @ w, dim=1)
            zp = torch.nn.functional.normalize(p @ w, dim=1)
            logits = (za @ zp.T / temperature).masked_fill(~same_case, float("-inf"))
            loss = torch.nn.functional.cross_entropy(logits, target)
            opt.zero_grad()
            loss.backward()
            opt.step()
    finally:
        torch.set_num_threads(threads)
    return w.detach().numpy().astype(np.float32)


def apply_head(descriptors: dict, head: np.ndarray) -> dict:
    """Descriptors projected by the head and L2-normalised (same keys)."""
    keys = list(descriptors)
    z = np.stack([descriptors[k] for k in keys]).astype(np.float32) @ head
    z /= np.maximum(np.linalg.norm(z, axis=1, keepdims=True), 1e-12)
    return dict(zip(keys, z, strict=True))
