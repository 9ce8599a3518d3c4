"""Learned aspect-conditioned metrics on frozen backbone features: softmax(s̄ / τ) over the pair similarities,
cross-entropy against the vote shares, full-batch L-BFGS with early stopping (docs/tpips.md, "Models")."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import torch
from torch import nn

from .aspect_text import AspectText, AspectVocab
from .aspects import PAIRS
from .config import LearnedConfig
from .features import TpipsFeatures

# late_cosine: the paper's late-fusion form (the aspect-gated embedding compared by cosine), reported beside our
# `late` head (`late_head`) so that both stand in the tables
KINDS = ("late", "late_cosine", "mid", "mid_unconditioned", "mid_frozen")
CONDITIONED = ("late", "late_cosine", "mid")
Vocab = AspectVocab | AspectText


def vocabulary(aspects: list[str], ooo: pd.DataFrame) -> list[str]:
    """The heads' aspect vocabulary: the config's `aspects`, then the other aspects the OOO rows name."""
    return [*aspects, *dict.fromkeys(a for a in ooo.aspect.astype(str) if a not in aspects)]


def untrainable(ooo: pd.DataFrame) -> str | None:
    """Why the heads cannot be trained on `ooo` (no train rows: a released test file), or None."""
    if (ooo.split == "train").any():
        return None
    return (
        f"no OOO train rows to train the learned heads on (splits {sorted(set(ooo.split.astype(str)))}: a "
        "released file is one split, source.split); to train them, give each line its split (our extra field "
        "`split`, docs/tpips.md) in one file"
    )


def _unit(x: torch.Tensor) -> torch.Tensor:
    return x / (x.norm(dim=-1, keepdim=True) + 1e-8)


class AspectGain(nn.Module):
    """(M, D) gain per channel from the aspect: start + MLP(a(c)), exactly `start` at first (`conditioned`),
    one learned gain (`shared`) or 1 (`fixed`)."""

    def __init__(
        self, vocab: Vocab, dim: int, cfg: LearnedConfig, mode: str = "conditioned", start: float = 1.0
    ):
        super().__init__()
        self.mode, self.dim, self.start = mode, dim, float(start)
        self.vocab, self.n = vocab, len(vocab.aspects)
        text = vocab.vectors is not None
        self.aspect = None if text else nn.Embedding(self.n, cfg.aspect_dim)
        width = vocab.vectors.shape[1] if text else cfg.aspect_dim
        self.mlp = nn.Sequential(nn.Linear(width, cfg.hidden), nn.ReLU(), nn.Linear(cfg.hidden, dim))
        nn.init.zeros_(self.mlp[2].weight)
        nn.init.zeros_(self.mlp[2].bias)
        self.shared = nn.Parameter(torch.zeros(dim))

    def embed(self, c: torch.Tensor) -> torch.Tensor:
        """a(c) for aspect ids c."""
        return self.vocab.vectors[c] if self.aspect is None else self.aspect(c)

    def forward(self, c: torch.Tensor) -> torch.Tensor:
        if self.mode == "conditioned":
            return self.start + self.mlp(self.embed(c))
        if self.mode == "shared":
            return (self.start + self.shared).expand(len(c), -1)
        return torch.ones(len(c), self.dim)

    def penalty(self) -> torch.Tensor:
        """Σ over the training vocabulary and channels of (gain − start)²: the weight decay acts on the weights
        the metric uses, not on the MLP's factors (which would let a few directions grow unchecked)."""
        if self.mode == "conditioned":
            return (self.mlp(self.embed(torch.arange(self.n))) ** 2).sum()
        if self.mode == "shared":
            return self.n * (self.shared**2).sum()
        return torch.zeros(())


class LateFusion(nn.Module):
    """Aspect-gated (optionally projected) global embedding, compared by cosine."""

    def __init__(self, emb: torch.Tensor, vocab: Vocab, cfg: LearnedConfig):
        super().__init__()
        self.register_buffer("emb", emb)
        d = emb.shape[1]
        self.gain = AspectGain(vocab, d, cfg)
        # proj_dim 0: the gate alone (a per-aspect diagonal projection; fewer parameters for small data)
        self.proj = nn.Linear(d, cfg.proj_dim, bias=False) if cfg.proj_dim else nn.Identity()

    def penalty(self) -> torch.Tensor:
        """The gains' deviation from 1 and, with a projection, its squared entries."""
        extra = (self.proj.weight**2).sum() if isinstance(self.proj, nn.Linear) else 0.0
        return self.gain.penalty() + extra

    def forward(self, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        g = self.gain(c)
        za, zb = _unit(self.proj(self.emb[a] * g)), _unit(self.proj(self.emb[b] * g))
        return (za * zb).sum(1)


class MidFusion(nn.Module):
    """−Σ_ℓ mean_t Σ_ch w_ℓ(c)_ch (φ_ℓ(x_i)_t − φ_ℓ(x_j)_t)_ch² over unit-normalised tokens, w(c) = w0 ⊙ g(c)
    or w0 ⊙ g(c)²; w0 = 1 / (L · the layer's mean train distance), 1 for the frozen ablation."""

    def __init__(
        self, layers: list[torch.Tensor], vocab: Vocab, cfg: LearnedConfig, mode: str = "conditioned"
    ):
        super().__init__()
        self.layers = [_unit(f) for f in layers]
        self.sizes = [f.shape[2] for f in layers]
        self.signed = cfg.mid_weights == "signed"
        self.gain = AspectGain(vocab, sum(self.sizes), cfg, mode, start=0.0 if self.signed else 1.0)
        self.register_buffer("w0", torch.ones(sum(self.sizes)))

    def calibrate(self, d: torch.Tensor) -> None:
        """Set w0 from train diffs d: 1 / each channel's mean, so that the weight decay treats them alike."""
        self.w0 = 1.0 / d.reshape(-1, d.shape[-1]).mean(0).clamp_min(1e-8)

    def weights(self, c: torch.Tensor) -> torch.Tensor:
        """Per-channel weights w(c) (M, Σ C_ℓ) for aspect ids c."""
        g = self.gain(c)
        return self.w0 * (g if self.signed else g**2)

    def diffs(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        """(M, Σ C_ℓ): per layer and channel, the token-mean of the squared difference (no parameters)."""
        return torch.cat([((f[a] - f[b]) ** 2).mean(1) for f in self.layers], 1)

    def from_diffs(self, d: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        """Similarity from precomputed diffs."""
        return -(self.weights(c) * d).sum(1)

    def penalty(self) -> torch.Tensor:
        """The gains' squared deviation from their start."""
        return self.gain.penalty()

    def forward(self, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        return self.from_diffs(self.diffs(a, b), c)


@dataclass
class TrainedMetric:
    """A trained (or fixed) metric with its training record."""

    kind: str
    model: nn.Module
    vocab: Vocab
    tau: float
    epochs: int
    best_epoch: int
    seconds: float
    train_rows: int
    history: list[dict] = field(default_factory=list)

    @property
    def triplets_per_second(self) -> float:
        """Training throughput: (triplet, aspect) rows processed per second, all epochs."""
        return self.train_rows * self.epochs / max(self.seconds, 1e-9)

    def sim(self, a: np.ndarray, b: np.ndarray, aspects: np.ndarray) -> np.ndarray:
        """Similarities for image rows a, b under aspect strings (a SimFn for the baselines' scorers)."""
        with torch.no_grad():
            c = self.vocab.encode(list(aspects))
            return self.model(torch.as_tensor(a), torch.as_tensor(b), c).numpy().astype(float)

    def channel_weights(self, aspect: str) -> np.ndarray:
        """w(c) of a mid-fusion metric for one aspect."""
        with torch.no_grad():
            return self.model.weights(self.vocab.encode([aspect]))[0].numpy()


def _pooled(tokens: np.ndarray, grid: int) -> np.ndarray:
    """(N, grid*grid*C): the token map average-pooled to a grid x grid layout (position kept coarsely)."""
    n, t, c = tokens.shape
    side = int(round(np.sqrt(t)))
    m = torch.as_tensor(tokens.reshape(n, side, side, c)).permute(0, 3, 1, 2)
    p = nn.functional.adaptive_avg_pool2d(m, grid).permute(0, 2, 3, 1)
    return (p / (p.norm(dim=-1, keepdim=True) + 1e-8)).reshape(n, -1).numpy() / grid


def _late_inputs(feats: TpipsFeatures, grid: int = 1) -> torch.Tensor:
    pooled = [f.mean(1) for f in feats.layers] if grid <= 1 else [_pooled(f, grid) for f in feats.layers]
    parts = [feats.globals_] + pooled
    parts = [p / (np.linalg.norm(p, axis=1, keepdims=True) + 1e-8) for p in parts]
    x = np.concatenate(parts, 1)
    # standardised per channel over the images: the cosine then compares deviations from the typical image
    # (uncentred, every embedding shares one large mean direction and cosines barely differ)
    x = (x - x.mean(0)) / (x.std(0) + 1e-6)
    return torch.as_tensor(x, dtype=torch.float32)


def _rows(ooo: pd.DataFrame, pos: np.ndarray, vocab: Vocab):
    y = torch.as_tensor(ooo[["y_0", "y_1", "y_2"]].to_numpy(float), dtype=torch.float32)
    return torch.as_tensor(pos), vocab.encode(ooo.aspect.tolist()), y


def train_metric(
    kind: str, feats: TpipsFeatures, ooo: pd.DataFrame, pos: np.ndarray, vocab: Vocab, cfg: LearnedConfig
) -> TrainedMetric:
    """Train one metric on the OOO train split: full-batch L-BFGS rounds, keeping the best val round."""
    if kind not in KINDS:
        raise ValueError(f"unknown metric kind {kind!r}: use one of {KINDS}")
    torch.manual_seed(cfg.seed)
    layers = [torch.as_tensor(f, dtype=torch.float32) for f in feats.layers]
    head = "gated" if kind == "late_cosine" else cfg.late_head if kind == "late" else None
    if head == "distance":
        # one embedding per image, compared by mid fusion's aspect-weighted squared distance (a one-token layer)
        model: nn.Module = MidFusion([_late_inputs(feats, cfg.late_grid)[:, None, :]], vocab, cfg)
    elif head is not None:
        model = LateFusion(_late_inputs(feats, cfg.late_grid), vocab, cfg)
    else:
        mode = {"mid": "conditioned", "mid_unconditioned": "shared", "mid_frozen": "fixed"}[kind]
        model = MidFusion(layers, vocab, cfg, mode)
    tau0 = cfg.tau_init if head == "gated" else cfg.tau_mid
    log_tau = nn.Parameter(torch.tensor(float(np.log(tau0))), requires_grad=cfg.learn_tau)
    split = ooo.split.to_numpy()
    tr, va = split == "train", split == "val"
    if not tr.any():
        raise ValueError("the OOO set has no train rows: generate more triplets or check the split shares")
    data = {}
    for name, m in (("train", tr), ("val", va)):
        p, c, y = _rows(ooo[m], pos[m], vocab)
        mid = isinstance(model, MidFusion)  # the feature part of the distance is fixed: compute it once
        d = torch.stack([model.diffs(p[:, i], p[:, j]) for i, j in PAIRS], 1) if mid else None
        data[name] = (p, c, y, d)
    if head == "distance":
        # w0 = 1 / the expected squared difference of two train images: 1 / (2 x each channel's variance)
        emb = model.layers[0][torch.unique(data["train"][0]), 0]
        model.calibrate(2 * emb.var(0)[None])
    elif isinstance(model, MidFusion) and kind != "mid_frozen":
        model.calibrate(data["train"][3])

    def scores(name: str) -> torch.Tensor:
        p, c, y, d = data[name]
        if d is not None:
            return torch.stack([model.from_diffs(d[:, k], c) for k in range(3)], 1)
        return torch.stack([model(p[:, i], p[:, j], c) for i, j in PAIRS], 1)

    def loss_of(name: str) -> torch.Tensor:
        # softmax over s̄_k / τ (s̄_k: the pair excluding image k), cross-entropy against the vote shares y
        s = scores(name) / log_tau.exp()
        return -(data[name][2] * torch.log_softmax(s, 1)).sum(1).mean()

    params = [q for q in model.parameters() if q.requires_grad] + ([log_tau] if cfg.learn_tau else [])
    history: list[dict] = []
    start = time.perf_counter()
    epochs = best_epoch = 0
    if kind != "mid_frozen":
        # max_eval: torch's default (1.25 x max_iter) leaves the line search no trial beyond the first step at
        # lbfgs_iter 1, so a first step that fails the Armijo test returned "no step" and training stalled
        opt = torch.optim.LBFGS(
            params,
            lr=cfg.lr,
            max_iter=cfg.lbfgs_iter,
            max_eval=cfg.lbfgs_iter * 25,
            line_search_fn="strong_wolfe",
        )

        def closure() -> torch.Tensor:
            opt.zero_grad()
            loss = loss_of("train") + cfg.weight_decay * model.penalty()
            loss.backward()
            return loss

        # the best trained round is kept even when none beats the start (signed gains start at 0: all ties)
        best, best_state, since = float("inf"), None, 0
        for epoch in range(cfg.epochs):
            model.train()
            opt.step(closure)
            with torch.no_grad():
                train = float(loss_of("train"))
                val = float(loss_of("val")) if va.any() else train
            history.append({"epoch": epoch, "train_loss": train, "val_loss": val})
            epochs = epoch + 1
            if val < best - 1e-5:
                best, since, best_epoch = val, 0, epoch
                best_state = ({k: v.clone() for k, v in model.state_dict().items()}, log_tau.detach().clone())
            else:
                since += 1
                if since >= cfg.patience:
                    break
        if best_state is not None:
            model.load_state_dict(best_state[0])
            log_tau.data = best_state[1]
    seconds = time.perf_counter() - start
    model.eval()
    return TrainedMetric(
        kind, model, vocab, float(log_tau.detach().exp()), epochs, best_epoch, seconds, int(tr.sum()), history
    )
