"""The FG-BMK paper's five findings, checked on our tables: one row per finding with the paper's figure,
ours, and whether it holds here (yes / no / not testable, with the reason and what would make it testable).

Inputs are the concatenated per-partition tables: `fgbmk_metrics` (METRIC_COLUMNS), `fgbmk_robustness`
(ROBUSTNESS_COLUMNS) and optionally `fgbmk_lvlm_metrics` (LVLM_METRIC_COLUMNS). A backbone's training
paradigm comes from the config (`findings.paradigms`); oracles and random-init nets check the metrics and
are no models, so no finding counts them (a model matching no pattern only sits out findings 1 and 2).

1. Contrastive training drops less from within-superclass to across-superclass classification than
   generative or reconstruction training (paper: ~1.96 points vs 4.16 for Qwen, 7.41 for BEiT3).
2. Text alignment blurs fine-grained features: a text-aligned contrastive encoder probes lower at the
   subclass level than a vision-only one (paper: aligned < unaligned; fine-grained re-alignment +2.55 on
   Stanford Dogs, still below).
3. Accuracy collapses under perturbation, more at the fine level than the coarse one (paper: CUB 89 -> 25,
   CIFAR-100 93 -> 50): at the strongest epsilon the fine probe keeps at most half its clean accuracy and a
   smaller share of it than the coarse probe.
4. Accuracy falls as the granularity gets finer (paper: class > 99%, species ~60% on CUB): top-1 (choice
   accuracy for LVLMs) at superclass >= class >= subclass, superclass above subclass.
5. Per-class accuracy is very uneven (paper: 30-90%): per-class top-1 of the subclass probe (or an LVLM's
   knowledge-bias per-class accuracy) spans at least `min_spread` points, and for probes its std exceeds the
   binomial std that `test_per_class` test images per class give at the mean accuracy alone.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from soco_pipeline.tasks.fgbmk.config import LEVELS, FindingsConfig
from soco_pipeline.tasks.fgbmk.machine_eval import summary

FINDING_COLUMNS = ["finding", "claim", "paper", "measured", "holds", "why", "models", "simulated"]
YES, NO, NOT_TESTABLE = "yes", "no", "not testable"
CHECKS = ("oracle", "random")  # paradigms that check the metrics and are no models
NEEDS_CONTRASTIVE = (
    "a contrastive backbone (e.g. dinov2_vitb14, dino_vitb16; presets in assets/backbone_presets)"
)
NEEDS_GENERATIVE = "a generative or reconstruction one (e.g. sd21_dift, mae_vitb16)"
NEEDS_ALIGNED = "a text-aligned contrastive backbone (e.g. clip_vitb16)"
NEEDS_UNALIGNED = "a vision-only contrastive one (e.g. dinov2_vitb14)"


def _row(
    n: int, claim: str, paper: str, measured: str, holds: str, why: str, models, simulated: bool
) -> dict:
    return {
        "finding": n,
        "claim": claim,
        "paper": paper,
        "measured": measured or "-",
        "holds": holds,
        "why": why,
        "models": ", ".join(sorted(models)),
        "simulated": simulated,
    }


def _paradigms(names, config: FindingsConfig) -> dict[str, tuple[str | None, bool]]:
    out = {}
    for name in names:
        p = config.paradigm_of(name)
        out[name] = (p.paradigm, p.text_aligned) if p is not None else (None, False)
    return out


def _fmt(values: dict[str, float], unit: str = "") -> str:
    return ", ".join(f"{k} {v:.1f}{unit}" for k, v in sorted(values.items()))


def _present(par: dict) -> str:
    return "; the zoo here: " + (
        ", ".join(f"{b} ({p or 'no paradigm'})" for b, (p, _) in sorted(par.items())) or "no backbone"
    )


def finding_1(board: pd.DataFrame, par: dict, simulated: bool) -> dict:
    """Contrastive vs generative/reconstruction on the within -> across drop (top-1 points)."""
    claim = "contrastive training drops less from within- to across-superclass classification"
    paper = "drop ~1.96 (contrastive) vs 4.16 (Qwen, generative), 7.41 (BEiT3, reconstruction) points"
    drops = {
        b: float(d)
        for b, d in zip(board.backbone, board.top1_drop_across, strict=True)
        if np.isfinite(d) and par[b][0] not in CHECKS
    }
    measured = ("top-1 within - across at the subclass level: " + _fmt(drops)) if drops else ""
    con = {b: d for b, d in drops.items() if par[b][0] == "contrastive"}
    gen = {b: d for b, d in drops.items() if par[b][0] in ("generative", "reconstruction")}
    if not con or not gen:
        need = [n for n, ok in ((NEEDS_CONTRASTIVE, con), (NEEDS_GENERATIVE, gen)) if not ok]
        why = (
            "no within-superclass probes (a single superclass)"
            if not drops
            else "needs " + " and ".join(need) + _present(par)
        )
        return _row(1, claim, paper, measured, NOT_TESTABLE, why, drops, simulated)
    holds = float(np.mean(list(con.values()))) < min(gen.values())
    why = (
        f"mean contrastive drop {np.mean(list(con.values())):.1f} vs smallest generative/reconstruction drop "
        f"{min(gen.values()):.1f}"
    )
    return _row(1, claim, paper, measured, YES if holds else NO, why, {**con, **gen}, simulated)


def finding_2(board: pd.DataFrame, par: dict, simulated: bool) -> dict:
    """Text-aligned vs vision-only contrastive encoders at the subclass level (top-1)."""
    claim = "text alignment blurs fine-grained features (aligned encoders probe lower at the finest level)"
    paper = "aligned < unaligned visual features; re-aligning with fine-grained text +2.55 (Stanford Dogs), still below"
    top1 = {
        b: float(v)
        for b, v in zip(
            board.backbone, board.get("top1_subclass", pd.Series(np.nan, board.index)), strict=True
        )
        if np.isfinite(v) and par[b][0] == "contrastive"
    }
    aligned = {b: v for b, v in top1.items() if par[b][1]}
    plain = {b: v for b, v in top1.items() if not par[b][1]}
    measured = ("subclass top-1: " + _fmt(top1)) if top1 else ""
    if not aligned or not plain:
        need = [n for n, ok in ((NEEDS_ALIGNED, aligned), (NEEDS_UNALIGNED, plain)) if not ok]
        return _row(
            2,
            claim,
            paper,
            measured,
            NOT_TESTABLE,
            "needs " + " and ".join(need) + _present(par),
            top1,
            simulated,
        )
    a, p = float(np.mean(list(aligned.values()))), float(np.mean(list(plain.values())))
    return _row(
        2,
        claim,
        paper,
        measured,
        YES if a < p else NO,
        f"mean subclass top-1 of text-aligned {a:.1f} vs vision-only {p:.1f}",
        top1,
        simulated,
    )


def finding_3(
    metrics: pd.DataFrame, robustness: pd.DataFrame, par: dict, config: FindingsConfig, simulated: bool
) -> dict:
    """Share of clean accuracy kept at the strongest FGSM/PGD epsilon, fine vs coarse level."""
    claim = "accuracy collapses under perturbation, more at the fine level than at the coarse one"
    paper = "CUB-200 (fine) 89 -> 25 (keeps 28%), CIFAR-100 (coarse) 93 -> 50 (keeps 54%) under attack"
    if robustness is None or robustness.empty:
        return _row(
            3,
            claim,
            paper,
            "",
            NOT_TESTABLE,
            "no robustness rows (fgbmk_robustness not materialized)",
            [],
            simulated,
        )
    chance = metrics[metrics.scope == "across"].groupby(["backbone", "level"]).chance_top1.first()
    attacks = robustness[robustness.attack.isin(["fgsm", "pgd"])]
    levels = [lv for lv in LEVELS if lv in set(robustness.level)]
    fine, coarse = (levels[-1], levels[0]) if len(levels) >= 2 else (None, None)
    parts, verdicts, used, skipped = [], [], [], []
    for b, grp in attacks.groupby("backbone", sort=True):
        if par.get(b, (None, False))[0] in CHECKS or fine is None:
            continue
        kept = {}
        for lv in (fine, coarse):
            g = grp[grp.level == lv]
            if g.empty:
                break
            clean = float(g.clean_accuracy.iloc[0])
            worst = float(g[g.strength == g.strength.max()].accuracy.min())
            if clean < config.min_above_chance * float(chance.get((b, lv), 0.0)):
                skipped.append(
                    f"{b} ({lv} clean {clean:.1f}, chance {chance.get((b, lv), float('nan')):.1f})"
                )
                break
            kept[lv] = (clean, worst, float(g.strength.max()))
        if len(kept) < 2:
            continue
        (cf, wf, eps), (cc, wc, _) = kept[fine], kept[coarse]
        rf, rc = wf / cf, wc / cc
        parts.append(
            f"{b} at eps {eps:g}/255: {fine} {cf:.1f} -> {wf:.1f} (keeps {rf:.0%}), {coarse} "
            f"{cc:.1f} -> {wc:.1f} (keeps {rc:.0%})"
        )
        verdicts.append(rf <= 0.5 and rf < rc)
        used.append(b)
    why_skip = (
        f"; left out (clean top-1 under {config.min_above_chance:g}x chance): {', '.join(skipped)}"
        if skipped
        else ""
    )
    if not used:
        why = (
            "no FGSM/PGD rows at two levels of a differentiable model backbone (SIFT and the oracles get none)"
            + why_skip
        )
        return _row(3, claim, paper, "", NOT_TESTABLE, why, [], simulated)
    holds = all(verdicts)
    why = (
        f"{sum(verdicts)} of {len(verdicts)} backbones keep <= 50% at the fine level and less than at the "
        f"coarse one" + why_skip
    )
    return _row(3, claim, paper, "; ".join(parts), YES if holds else NO, why, used, simulated)


def finding_4(board: pd.DataFrame, lvlm: pd.DataFrame | None, par: dict, simulated: bool) -> dict:
    """Top-1 (LVLM choice accuracy) per level, coarse to fine."""
    claim = "accuracy falls as the granularity gets finer (superclass -> class -> subclass)"
    paper = "class > 99% -> species ~60% on CUB-200 (LVLMs)"
    series: dict[str, list[float]] = {}
    for r in board.to_dict("records"):
        if par[r["backbone"]][0] in CHECKS:
            continue
        vals = [r.get(f"top1_{lv}", np.nan) for lv in LEVELS]
        if all(np.isfinite(v) for v in vals):
            series[r["backbone"]] = [float(v) for v in vals]
    if lvlm is not None and len(lvlm):
        acc = lvlm[(lvlm.task == "hierarchical") & (lvlm.form == "choice") & (lvlm.metric == "accuracy")]
        for m, grp in acc.groupby("model", sort=True):
            p = par.get(m) or (None, False)
            vals = grp.set_index("level").value.reindex(list(LEVELS)).to_numpy(dtype=float)
            if p[0] not in CHECKS and np.isfinite(vals).all():
                series[f"{m} (LVLM)"] = list(vals)
    if not series:
        return _row(
            4,
            claim,
            paper,
            "",
            NOT_TESTABLE,
            "no model scored at all three levels (oracles and random-init nets are left out)",
            [],
            simulated,
        )
    ok = {m: (v[0] >= v[1] >= v[2]) and v[0] > v[2] for m, v in series.items()}
    measured = "; ".join(f"{m}: " + " -> ".join(f"{x:.1f}" for x in v) for m, v in sorted(series.items()))
    bad = sorted(m for m, good in ok.items() if not good)
    why = f"{sum(ok.values())} of {len(ok)} models fall from superclass to subclass" + (
        f"; not monotone: {', '.join(bad)}" if bad else ""
    )
    return _row(
        4,
        claim,
        paper,
        "top-1 superclass -> class -> subclass: " + measured,
        YES if not bad else NO,
        why,
        [m.removesuffix(" (LVLM)") for m in series],
        simulated,
    )


def finding_5(
    metrics: pd.DataFrame, lvlm: pd.DataFrame | None, par: dict, config: FindingsConfig, simulated: bool
) -> dict:
    """Spread of per-class accuracy: the subclass probe's, and LVLM knowledge-bias per-class accuracy."""
    claim = "per-class accuracy is very uneven (knowledge bias)"
    paper = "per-class accuracy from ~30% to ~90%"
    sub = metrics[(metrics.scope == "across") & (metrics.level == "subclass")]
    parts, verdicts, used = [], [], []
    if "class_top1_std" in sub.columns:
        for r in sub.to_dict("records"):
            b = r["backbone"]
            if par.get(b, (None, False))[0] in CHECKS or not np.isfinite(r["class_top1_std"]):
                continue
            if r["top1"] < config.min_above_chance * r["chance_top1"]:
                continue
            p, n = r["class_top1_mean"] / 100.0, max(float(r["test_per_class"]), 1.0)
            noise = float(np.sqrt(p * (1 - p) / n)) * 100.0
            spread = r["class_top1_max"] - r["class_top1_min"]
            parts.append(
                f"{b}: per-class top-1 {r['class_top1_min']:.0f}-{r['class_top1_max']:.0f} "
                f"(std {r['class_top1_std']:.1f}, binomial noise alone {noise:.1f} at {n:g} images/class)"
            )
            verdicts.append(spread >= config.min_spread and r["class_top1_std"] > noise)
            used.append(b)
    if lvlm is not None and len(lvlm):
        kb = lvlm[lvlm.task == "knowledge_bias"].pivot_table(index="model", columns="metric", values="value")
        for m, r in kb.iterrows():
            if (par.get(m) or (None, False))[0] in CHECKS or "class_accuracy_min" not in r:
                continue
            spread = r["class_accuracy_max"] - r["class_accuracy_min"]
            parts.append(
                f"{m} (LVLM, knowledge bias): {r['class_accuracy_min']:.0f}-{r['class_accuracy_max']:.0f} "
                f"(std {r['class_accuracy_std']:.1f})"
            )
            verdicts.append(spread >= config.min_spread)
            used.append(m)
    if not used:
        return _row(
            5,
            claim,
            paper,
            "",
            NOT_TESTABLE,
            f"no model probe at or above {config.min_above_chance:g}x "
            "chance at the subclass level and no LVLM knowledge-bias rows",
            [],
            simulated,
        )
    why = (
        f"{sum(verdicts)} of {len(verdicts)} models span >= {config.min_spread:g} points"
        " (probes: with a std above the binomial noise of their test images)"
    )
    return _row(5, claim, paper, "; ".join(parts), YES if all(verdicts) else NO, why, used, simulated)


def check_findings(
    metrics: pd.DataFrame,
    robustness: pd.DataFrame | None,
    config: FindingsConfig,
    lvlm_metrics: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """The five findings (FINDING_COLUMNS), in the paper's order, from the fgbmk tables of every partition."""
    if metrics is None or metrics.empty:
        raise ValueError(
            "check_findings: no fgbmk_metrics rows; materialize fgbmk_metrics for a backbone first"
        )
    board = summary(metrics)
    names = set(board.backbone) | (
        set(robustness.backbone) if robustness is not None and len(robustness) else set()
    )
    if lvlm_metrics is not None and len(lvlm_metrics):
        names |= set(lvlm_metrics.model)
    par = _paradigms(names, config)
    simulated = bool(metrics.simulated.all())
    rows = [
        finding_1(board, par, simulated),
        finding_2(board, par, simulated),
        finding_3(metrics, robustness, par, config, simulated),
        finding_4(board, lvlm_metrics, par, simulated),
        finding_5(metrics, lvlm_metrics, par, config, simulated),
    ]
    return pd.DataFrame(rows, columns=FINDING_COLUMNS)


def findings_markdown(findings: pd.DataFrame) -> str:
    """The findings table as Markdown (finding, paper, ours, holds, why)."""
    lines = ["| # | finding | paper | ours | holds | why |", "|---|---|---|---|:---:|---|"]
    for r in findings.itertuples(index=False):
        lines.append(f"| {r.finding} | {r.claim} | {r.paper} | {r.measured} | {r.holds} | {r.why} |")
    return "\n".join(lines) + "\n"
