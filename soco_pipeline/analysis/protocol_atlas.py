"""The protocol-sensitivity atlas (docs/results.md, `protocol_atlas`): per knob, Kendall tau-b between the
rankings with a bootstrap CI over the family's unit, the flipped pairs and the largest change; each resample
is a matrix product, counts (B x U) times values (U x models)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from soco_pipeline.analysis.bootstrap import pair_seed, resample_counts, resample_indices

SHIPPED = "shipped"
UNITS = {
    "soco": "category",
    "mmvm": "match type",
    "tpips": "aspect",
    "fgbmk": "class",
}  # each family's bootstrap unit: that of its headline CI (FG-BMK: its classes; fgbmk_knob_table says why)
ATLAS_COLUMNS = (
    "family metric knob unit n_models n_units tau tau_low tau_high n_flipped flipped_pairs "
    "largest_change_model largest_change models"
).split()
TAIL = 100.0 * (1.0 - 0.95) / 2.0  # percent in each tail of the 95% CI (computed so, as the figures were)
KNOB_COLUMNS = ["family", "metric", "knob", "model", "unit", "value", "weight"]  # the atlas's input


def kendall_tau_b(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Kendall tau-b between the columns of x and y, vectorized; NaN when one side ties all."""
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    i, j = np.triu_indices(x.shape[-1], k=1)
    sx, sy = np.sign(x[..., i] - x[..., j]), np.sign(y[..., i] - y[..., j])
    num = (sx * sy).sum(axis=-1)
    den = np.sqrt((sx != 0).sum(axis=-1) * (sy != 0).sum(axis=-1).astype(np.float64))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, num / np.where(den > 0, den, 1.0), np.nan)


def flipped_pairs(models: list[str], before: np.ndarray, after: np.ndarray) -> list[str]:
    """The model pairs whose order flips with the knob change ('a > b -> b > a')."""
    out = []
    for i, j in zip(*np.triu_indices(len(models), k=1), strict=True):
        s, t = np.sign(before[i] - before[j]), np.sign(after[i] - after[j])
        if s != 0 and t != 0 and s != t:
            a, b = (models[i], models[j]) if s > 0 else (models[j], models[i])
            out.append(f"{a} > {b} -> {b} > {a}")
    return out


def _matrix(rows: pd.DataFrame, models: list[str], units: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """(units x models) values and weights; a unit a model lacks has weight 0."""
    value = rows.pivot_table(index="unit", columns="model", values="value", aggfunc="first")
    weight = rows.pivot_table(index="unit", columns="model", values="weight", aggfunc="first")
    value = value.reindex(index=units, columns=models)
    weight = weight.reindex(index=units, columns=models).fillna(0.0)
    return value.fillna(0.0).to_numpy(), weight.to_numpy()


def _scores(counts: np.ndarray, value: np.ndarray, weight: np.ndarray) -> np.ndarray:
    """(B x models) weighted means over the resampled units."""
    with np.errstate(invalid="ignore", divide="ignore"):
        return (counts @ (value * weight)) / (counts @ weight)


def protocol_atlas(
    long: pd.DataFrame,
    controls: set[str] = frozenset(),
    n_resamples: int = 1000,
    seed: int = 0,
) -> pd.DataFrame:
    """ATLAS_COLUMNS rows per (family, metric, knob), over the non-control models."""
    rows = []
    for (family, metric), block in long.groupby(["family", "metric"], sort=True):
        knobs = sorted(set(block["knob"]) - {SHIPPED})  # every knob has a row, even with only controls
        block = block[~block["model"].isin(controls)]
        shipped = block[block["knob"] == SHIPPED]
        for knob in knobs:
            other = block[block["knob"] == knob]
            models = sorted(set(shipped["model"]) & set(other["model"]))
            units = sorted(set(shipped.loc[shipped["model"].isin(models), "unit"]))
            v0, w0 = _matrix(shipped, models, units)
            v1, w1 = _matrix(other, models, units)
            ones = np.ones((1, len(units)), dtype=np.float64)
            before, after = _scores(ones, v0, w0)[0], _scores(ones, v1, w1)[0]
            tau, lo, hi = float("nan"), float("nan"), float("nan")
            if len(models) >= 2 and units:
                tau = float(kendall_tau_b(before, after))
                rng = pair_seed(seed, "protocol_atlas", family, metric, knob)
                counts = resample_counts(resample_indices(len(units), n_resamples, rng)).astype(np.float64)
                taus = kendall_tau_b(_scores(counts, v0, w0), _scores(counts, v1, w1))
                ok = taus[np.isfinite(taus)]
                if len(ok):
                    lo, hi = (float(q) for q in np.percentile(ok, [TAIL, 100.0 - TAIL]))
            change = after - before
            k = int(np.nanargmax(np.abs(change))) if len(models) else -1
            flips = flipped_pairs(models, before, after)
            rows.append(
                {
                    "family": family,
                    "metric": metric,
                    "knob": knob,
                    "unit": UNITS.get(family, "unit"),
                    "n_models": len(models),
                    "n_units": len(units),
                    "tau": tau,
                    "tau_low": lo,
                    "tau_high": hi,
                    "n_flipped": len(flips),
                    "flipped_pairs": "; ".join(flips),
                    "largest_change_model": models[k] if k >= 0 else "",
                    "largest_change": float(change[k]) if k >= 0 else float("nan"),
                    "models": ", ".join(models),
                }
            )
    return pd.DataFrame(rows, columns=ATLAS_COLUMNS)


# SOCO's single-knob changes that the stored metrics already hold (scoring knobs: no model runs again)
ATLAS_LEVELS = ("soc", "cc", "cross_soc")


def soco_knob_table(metrics: pd.DataFrame, headline_alpha: float, alphas, reductions) -> pd.DataFrame:
    """SOCO's per-category metrics as the atlas's input: shipped and each single-knob change."""
    cat = metrics[(metrics["scope"] == "category") & metrics["metric"].isin(ATLAS_LEVELS)]
    name = "model" if "model" in cat.columns else "backbone"

    def pick(alpha: float, reduction: str, knob: str, weighted: bool) -> pd.DataFrame:
        at = cat[((cat["alpha"] - alpha).abs() < 1e-9) & (cat["reduction"] == reduction)]
        weight = at["n"].astype(float).to_numpy() if weighted else 1.0
        unit, value = at["group"].astype(str).to_numpy(), at["value"].astype(float).to_numpy()
        return knob_rows("soco", at["metric"].to_numpy(), knob, at[name].to_numpy(), unit, value, weight)

    frames = [pick(headline_alpha, "official", SHIPPED, False)]
    frames += [
        pick(a, "official", f"alpha {headline_alpha:g} -> {a:g}", False)
        for a in alphas
        if abs(a - headline_alpha) > 1e-9
    ]
    if "keypoint" in reductions:
        frames.append(pick(headline_alpha, "keypoint", "reduction official -> keypoint", True))
    return pd.concat(frames, ignore_index=True)


def knob_rows(family: str, metric, knob: str, model, unit, value, weight) -> pd.DataFrame:
    """Atlas input rows (KNOB_COLUMNS) of one knob setting: per model and unit a value and its weight."""
    return pd.DataFrame(
        dict(zip(KNOB_COLUMNS, (family, metric, knob, model, unit, value, weight), strict=True))
    )


def control_models(specs_dir: str) -> set[str]:
    """The models of a spec folder that are controls, not contenders: the oracles (`kind: oracle`)."""
    from pathlib import Path

    from soco_pipeline.backbones.spec_files import spec_kind

    return {p.stem for p in Path(specs_dir).glob("*.yaml") if spec_kind(p) == "oracle"}


def atlas_figure_png(atlas: pd.DataFrame) -> bytes:
    """One figure: Kendall tau with its bootstrap CI per (family, metric, knob), a dot and a bar each."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from soco_pipeline.analysis.figure import figure_bytes

    shown = atlas[np.isfinite(atlas["tau"].astype(float))].reset_index(drop=True)
    fig, ax = plt.subplots(figsize=(7.5, 0.35 * max(len(shown), 3) + 1.2))
    y = np.arange(len(shown))
    tau = shown["tau"].astype(float).to_numpy()
    lo = np.nan_to_num(tau - shown["tau_low"].astype(float).to_numpy())
    hi = np.nan_to_num(shown["tau_high"].astype(float).to_numpy() - tau)
    ax.errorbar(tau, y, xerr=[lo, hi], fmt="o", color="#1f4e79", ecolor="#7a9cc6", capsize=3)
    ax.set_yticks(y, [f"{r.family} {r.metric}: {r.knob}" for r in shown.itertuples()])
    ax.axvline(1.0, color="#999", lw=0.8, ls="--")
    ax.set_xlim(-1.05, 1.05)
    ax.invert_yaxis()
    ax.set_xlabel("Kendall tau vs the shipped protocol's ranking (95% bootstrap CI)")
    fig.tight_layout()
    try:
        return figure_bytes(fig, "png")
    finally:
        plt.close(fig)


MMVM_FORCED = "none option: offered -> forced choice (items with the query)"


def mmvm_knob_table(predictions: pd.DataFrame, method: str = "zero_shot") -> pd.DataFrame:
    """MMVM's test outcomes as atlas input: None option offered against forced choice."""
    rows = predictions[
        (predictions["split"] == "test") & (predictions["method"] == method) & (predictions["status"] == "ok")
    ]
    if rows.empty:
        return pd.DataFrame(columns=KNOB_COLUMNS)

    def per_unit(frame: pd.DataFrame, outcome: str, knob: str) -> pd.DataFrame:
        g = frame.groupby(["model", "match_type"], sort=True)[outcome].agg(["mean", "size"]).reset_index()
        unit, value = g["match_type"].astype(str).to_numpy(), 100.0 * g["mean"].astype(float).to_numpy()
        model, weight = g["model"].to_numpy(), g["size"].astype(float).to_numpy()
        return knob_rows("mmvm", f"accuracy/{method}", knob, model, unit, value, weight)

    present = rows[~rows["query_absent"].astype(bool)]
    frames = [per_unit(rows.assign(correct=rows["correct"].astype(float)), "correct", SHIPPED)]
    if "correct_forced" in rows.columns and len(present):
        forced = present.assign(correct_forced=present["correct_forced"].astype(float))
        frames.append(per_unit(forced, "correct_forced", MMVM_FORCED))
    return pd.concat(frames, ignore_index=True)[KNOB_COLUMNS]


TPIPS_MAJORITY = "agreement: vote share of the pick -> majority hit"


def tpips_knob_table(outcomes: pd.DataFrame, ooo: pd.DataFrame, method: str = "cosine") -> pd.DataFrame:
    """TPIPS's test outcomes as atlas input: agreement against the majority hit."""
    rows = outcomes[(outcomes["split"] == "test") & (outcomes["method"] == method)]
    if rows.empty or ooo is None or ooo.empty:
        return pd.DataFrame(columns=KNOB_COLUMNS)
    key = ["triplet_id", "aspect"]
    votes = ooo[[*key, "y_0", "y_1", "y_2"]].astype({"triplet_id": str, "aspect": str})
    rows = rows.astype({"triplet_id": str, "aspect": str}).merge(
        votes, on=key, how="inner", validate="many_to_one"
    )
    top = rows[["y_0", "y_1", "y_2"]].to_numpy(float).max(axis=1)
    rows = rows.assign(
        shipped=rows["agreement"].astype(float),
        majority=(rows["agreement"].to_numpy(float) >= top - 1e-9) * 1.0,
    )
    g = rows.groupby(["model", "aspect"], sort=True).agg(
        shipped=("shipped", "mean"), majority=("majority", "mean"), n=("shipped", "size")
    )
    g = g.reset_index()
    model, unit, weight = g["model"].to_numpy(), g["aspect"].to_numpy(), g["n"].to_numpy(float)
    frames = [
        knob_rows("tpips", f"ooo/{method}", knob, model, unit, 100.0 * g[column].to_numpy(float), weight)
        for knob, column in ((SHIPPED, "shipped"), (TPIPS_MAJORITY, "majority"))
    ]
    return pd.concat(frames, ignore_index=True)[KNOB_COLUMNS]


FGBMK_BALANCED = "reduction: pooled over images -> mean over classes"


def fgbmk_knob_table(predictions: pd.DataFrame) -> pd.DataFrame:
    """FG-BMK's probe outcomes as atlas input: pooled against class-balanced top-1."""
    if predictions.empty:
        return pd.DataFrame(columns=KNOB_COLUMNS)
    g = (
        predictions.assign(correct=predictions["correct"].astype(float))
        .groupby(["backbone", "level", "label"], sort=True)["correct"]
        .agg(["mean", "size"])
        .reset_index()
    )
    metric, model = "top1/" + g["level"].astype(str), g["backbone"].to_numpy()
    unit, value = g["label"].astype(str).to_numpy(), 100.0 * g["mean"].to_numpy(float)
    frames = [
        knob_rows("fgbmk", metric, knob, model, unit, value, weight)
        for knob, weight in ((SHIPPED, g["size"].to_numpy(float)), (FGBMK_BALANCED, 1.0))
    ]
    return pd.concat(frames, ignore_index=True)[KNOB_COLUMNS]
