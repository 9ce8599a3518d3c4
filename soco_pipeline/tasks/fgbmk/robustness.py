"""Robustness of a trained probe on its frozen backbone: FGSM / PGD (epsilon in 1/255) and Gaussian noise."""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F

from soco_pipeline.features.global_cache import read_global
from soco_pipeline.features.global_extractors import (
    GlobalExtractor,
    in_order,
    load_global_pixels,
    torch_threads,
)
from soco_pipeline.tasks.fgbmk.config import FgbmkConfig, RobustnessConfig
from soco_pipeline.tasks.fgbmk.linear_probe import ProbeResult

ROBUSTNESS_COLUMNS = [
    "backbone",
    "level",
    "attack",
    "strength",
    "accuracy",
    "clean_accuracy",
    "n_images",
    "simulated",
]


class ProbedModel(torch.nn.Module):
    """pixels in [0, 1] -> logits of a probe head on the extractor's global features."""

    def __init__(self, extractor: GlobalExtractor, probe: ProbeResult, records: pd.DataFrame):
        super().__init__()
        (self.n_blocks, self.avgpool, _), self.head = probe.grid.head(probe.best)
        self.extractor, self.records = extractor, records

    def forward(self, pixels: torch.Tensor) -> torch.Tensor:
        """Logits (B, K)."""
        prev, last, mean = self.extractor.forward(pixels, self.records)
        parts = [prev, last][-self.n_blocks :] + ([mean] if self.avgpool else [])
        return self.head(torch.cat(parts, 1).float().cpu())


def fgsm(model: ProbedModel, x: torch.Tensor, y: torch.Tensor, eps: float) -> torch.Tensor:
    """One signed-gradient step of size eps, clamped to [0, 1]; eps = 0 returns x unchanged."""
    if eps == 0:
        return x.clone()
    x = x.clone().requires_grad_(True)
    (grad,) = torch.autograd.grad(F.cross_entropy(model(x), y), x)
    return (x + eps * grad.sign()).clamp(0, 1).detach()


def pgd(
    model: ProbedModel, x: torch.Tensor, y: torch.Tensor, eps: float, steps: int, scale: float
) -> torch.Tensor:
    """`steps` signed-gradient steps of scale * eps / steps, projected onto the L-inf eps-ball and [0, 1]."""
    if eps == 0:
        return x.clone()
    alpha, adv = scale * eps / steps, x.clone()
    for _ in range(steps):
        adv.requires_grad_(True)
        (grad,) = torch.autograd.grad(F.cross_entropy(model(adv), y), adv)
        adv = torch.min(torch.max(adv.detach() + alpha * grad.sign(), x - eps), x + eps).clamp(0, 1)
    return adv.detach()


def gaussian(x: torch.Tensor, sigma: float, seed: int) -> torch.Tensor:
    """x + N(0, sigma^2) per pixel (seeded), clamped to [0, 1]."""
    g = torch.Generator().manual_seed(int(seed))
    return (x + sigma * torch.randn(x.shape, generator=g)).clamp(0, 1)


def accuracy(model: ProbedModel, x: torch.Tensor, y: torch.Tensor) -> float:
    """Top-1 of the probe on these pixels, 0-100."""
    with torch.no_grad():
        return float((model(x).argmax(1) == y).float().mean()) * 100.0


def evaluate_robustness(
    backbone: str,
    extractor: GlobalExtractor,
    probe: ProbeResult,
    pixels: torch.Tensor,
    labels,
    records: pd.DataFrame,
    level: str,
    config: RobustnessConfig,
    seed: int = 0,
    reads_pixels: bool = True,
    simulated: bool = True,
) -> pd.DataFrame:
    """ROBUSTNESS_COLUMNS rows for one (backbone, level): clean, FGSM / PGD per epsilon, noise per sigma."""
    y = torch.as_tensor(np.asarray(labels), dtype=torch.long)
    model = ProbedModel(extractor, probe, records)
    clean = accuracy(model, pixels, y)
    rows = [("clean", 0.0, clean)]
    if reads_pixels:
        if extractor.differentiable:
            for eps in config.epsilons:
                rows.append(("fgsm", eps, accuracy(model, fgsm(model, pixels, y, eps / 255.0), y)))
                adv = pgd(model, pixels, y, eps / 255.0, config.pgd_steps, config.pgd_step_scale)
                rows.append(("pgd", eps, accuracy(model, adv, y)))
        for sigma in config.noise_sigmas:
            rows.append(("gaussian", sigma, accuracy(model, gaussian(pixels, sigma / 255.0, seed), y)))
    base = dict(backbone=backbone, level=level, clean_accuracy=clean, n_images=len(y), simulated=simulated)
    table = [{**base, "attack": a, "strength": float(s), "accuracy": acc} for a, s, acc in rows]
    return pd.DataFrame(table, columns=ROBUSTNESS_COLUMNS)


def robustness_for_backbone(
    backbone: str,
    extractor: GlobalExtractor,
    folder: str,
    items: pd.DataFrame,
    config: FgbmkConfig,
    reads_pixels: bool = True,
) -> pd.DataFrame:
    """Train the probe at each configured level, then attack it on up to `max_images` seeded test images."""
    from soco_pipeline.tasks.fgbmk.linear_probe import train_probe
    from soco_pipeline.tasks.fgbmk.machine_eval import level_labels

    if "multi_label" in items.columns:  # the probe is single-label (as the release's Dataset)
        items = items[~items.multi_label.astype(bool)].reset_index(drop=True)
    feats = read_global(folder, items.image_id)
    train, test = (items.split == "train").to_numpy(), (items.split == "test").to_numpy()
    test_rows = np.flatnonzero(test)
    if config.robustness.max_images and len(test_rows) > config.robustness.max_images:
        rng = np.random.default_rng([int(config.seed), 0x20B])
        test_rows = np.sort(rng.choice(test_rows, config.robustness.max_images, replace=False))
    recs = items.iloc[test_rows].reset_index(drop=True)
    pixels = (
        load_global_pixels(list(recs.uri), list(recs.image_id), config.global_features)
        if reads_pixels
        else torch.zeros(len(recs), 3, config.global_features.crop, config.global_features.crop)
    )
    levels = [lv for lv in config.robustness.levels if items[lv].nunique() > 1]
    policy = config.global_features
    with torch_threads(policy.threads):
        probes = []  # one after the other: the probe grid draws its initial weights from torch's global RNG
        for level in levels:
            labels = level_labels(items, level)
            f_train, f_test = feats.subset(items.image_id[train]), feats.subset(items.image_id[test])
            k = int(labels.max()) + 1
            probe = train_probe(
                f_train, labels[train], f_test, labels[test], config.linear_probe, config.seed, k
            )
            probes.append((level, labels[test_rows], probe))

        simulated = bool(items.simulated.all())

        def attacked(job: tuple) -> pd.DataFrame:
            level, labels, probe = job
            args = (pixels, labels, recs, level, config.robustness, config.seed, reads_pixels, simulated)
            return evaluate_robustness(backbone, extractor, probe, *args)

        # the levels' attacks draw no random number: `workers` of them at once, each on the policy's threads
        frames = list(in_order(attacked, probes, policy.workers if extractor.concurrent_batches else 1))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=ROBUSTNESS_COLUMNS)
