"""The FG-BMK paper's five findings checked on our tables (docs/fgbmk.md): an effect's 95% interval decides
each verdict; accuracies over different class counts compare as skill (acc - chance) / (100 - chance)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from soco_pipeline.tasks.fgbmk.config import LEVELS, FindingsConfig
from soco_pipeline.tasks.fgbmk.machine_eval import summary

FINDING_COLUMNS = [
    "finding",
    "claim",
    "paper",
    "measured",
    "effect",
    "ci_low",
    "ci_high",
    "test",
    "holds",
    "why",
    "models",
    "not_covered",
    "simulated",
]
# Each finding as the paper states it: the claim, the paper's figure, and what of it the project does not cover.
CLAIMS = {
    1: (
        "contrastive training keeps fine-grained features more discriminative than generative / reconstruction training",
        "across-superclass drop ~1.96 (contrastive) vs 4.16 (Qwen, generative), 7.41 (BEiT3, reconstruction) points",
        "LVLM vision towers (InternVL, Qwen, BEiT3) are not in the zoo; we compare backbones by paradigm",
    ),
    2: (
        "aligning visual features with text blurs fine-grained discriminability",
        "aligned < unaligned visual features; re-aligning with fine-grained text +2.55 (Stanford Dogs), still below",
        "the re-alignment with fine-grained text (+2.55) is not reproduced",
    ),
    3: (
        "fine-grained recognition is more sensitive to perturbation than coarse recognition",
        "CUB-200 (fine) 89 -> 25, CIFAR-100 (coarse) 93 -> 50 under perturbation",
        "the paper perturbs LVLM features on CUB vs CIFAR-100; we attack backbone + probe pixels at two levels of one set",
    ),
    4: (
        "perception beats reasoning: accuracy falls with finer granularity, and per-class accuracy is very uneven (knowledge bias)",
        "CUB class > 99% -> species ~60%; per-class accuracy 30% to 90%",
        "the attribute-perception vs category-reasoning contrast (LVLM attribute questions against category questions) is not tested",
    ),
    5: (
        "LVLMs and generic encoders still trail fine-grained specialist models",
        "LVLMs below fine-grained tailored models on the fine-grained datasets",
        "no fine-grained specialist model is part of the project's zoo; the LVLM side of the gap is not measured",
    ),
}
YES, NO, NOT_TESTABLE = "yes", "no", "not testable"
CHECKS = ("oracle", "random")  # paradigms that check the metrics and are no models
Z = 1.959964
NEEDS_CONTRASTIVE = (
    "a contrastive backbone (e.g. dinov2_vitb14, dino_vitb16; presets in assets/backbone_presets)"
)
NEEDS_GENERATIVE = "a generative or reconstruction one (e.g. sd21_dift, mae_vitb16)"
NEEDS_ALIGNED = "a text-aligned contrastive backbone (e.g. clip_vitb16)"
NEEDS_UNALIGNED = "a vision-only contrastive one (e.g. dinov2_vitb14)"
NEEDS_SPECIALIST = (
    "a fine-grained specialist model (paradigm `specialist` in findings.paradigms, e.g. a network fine-tuned "
    "on the dataset)"
)


def skill(acc: float, chance: float) -> float:
    """Chance-corrected accuracy (acc - chance) / (100 - chance): 0 at chance, 1 when perfect."""
    return (acc - chance) / (100.0 - chance)


def skill_se(acc: float, chance: float, n: float) -> float:
    """Binomial standard error of `skill` with n test images."""
    p = min(max(acc / 100.0, 0.0), 1.0)
    return float(np.sqrt(max(p * (1 - p), 0.25 / max(n, 1.0)) / max(n, 1.0))) * 100.0 / (100.0 - chance)


def interval(effect: float, se: float) -> tuple[float, float]:
    """The 95% normal interval of an effect."""
    return effect - Z * se, effect + Z * se


def verdict(lo: float, hi: float, below: bool) -> str:
    """yes when the interval lies on the claim's side of 0 (below it when `below`), no opposite, else not
    testable."""
    if (hi < 0) if below else (lo > 0):
        return YES
    if (lo > 0) if below else (hi < 0):
        return NO
    return NOT_TESTABLE


def spread_test(
    std: float, mean: float, n_per_class: float, classes: int, sims: int, seed: int
) -> tuple[float, float]:
    """Monte Carlo p-value of a per-class accuracy std (0-100) at least this large when every class had the
    mean accuracy and `n_per_class` test items (binomial noise alone), and the median std that gives."""
    n = max(int(round(n_per_class)), 1)
    rng = np.random.default_rng([int(seed), 0x5B1A5])
    hits = rng.binomial(n, min(max(mean / 100.0, 0.0), 1.0), size=(sims, max(classes, 1)))
    null = (hits / n).std(axis=1) * 100.0
    return float((1 + (null >= std - 1e-9).sum()) / (1 + sims)), float(np.median(null))


def _row(n, measured, holds, why, models, effect=np.nan, ci=(np.nan,) * 2, test=""):
    claim, paper, uncovered = CLAIMS[n]
    return {
        "finding": n,
        "claim": claim,
        "paper": paper,
        "measured": measured or "-",
        "effect": float(effect),
        "ci_low": float(ci[0]),
        "ci_high": float(ci[1]),
        "test": test,
        "holds": holds,
        "why": why,
        "models": ", ".join(sorted(models)),
        "not_covered": uncovered,
    }


def _paradigms(names, config: FindingsConfig) -> dict[str, tuple[str | None, bool]]:
    out = {}
    for name in names:
        p = config.paradigm_of(name)
        out[name] = (p.paradigm, p.text_aligned) if p is not None else (None, False)
    return out


def _paradigm(par: dict, name: str) -> str | None:
    return par.get(name, (None, False))[0]


def _present(par: dict) -> str:
    return "; the zoo here: " + (
        ", ".join(f"{b} ({p or 'no paradigm'})" for b, (p, _) in sorted(par.items())) or "no backbone"
    )


def _across(metrics: pd.DataFrame) -> pd.DataFrame:
    return metrics[metrics.scope == "across"].set_index(["backbone", "level"])


def _drops(metrics: pd.DataFrame, par: dict) -> dict[str, tuple[float, float]]:
    """Per model backbone: skill within a superclass (mean) - skill across at the subclass level, and its SE."""
    out = {}
    for b, grp in metrics.groupby("backbone", sort=True):
        if _paradigm(par, b) in CHECKS:
            continue
        within = grp[grp.scope == "within"]
        across = grp[(grp.scope == "across") & (grp.level == "subclass")]
        if within.empty or across.empty:
            continue
        w = [skill(r.top1, r.chance_top1) for r in within.itertuples()]
        w_se = [skill_se(r.top1, r.chance_top1, r.n_test) for r in within.itertuples()]
        a = across.iloc[0]
        drop = float(np.mean(w)) - skill(a.top1, a.chance_top1)
        se = float(
            np.sqrt(np.sum(np.square(w_se)) / len(w_se) ** 2 + skill_se(a.top1, a.chance_top1, a.n_test) ** 2)
        )
        out[b] = (drop, se)
    return out


def finding_1(metrics: pd.DataFrame, par: dict) -> dict:
    """Contrastive vs generative/reconstruction: the within -> across-superclass drop in chance-corrected skill."""
    drops = _drops(metrics, par)
    measured = "; ".join(f"{b} {d:+.3f} (SE {s:.3f})" for b, (d, s) in drops.items())
    measured = ("skill drop within -> across (subclass): " + measured) if drops else ""
    con = {b: v for b, v in drops.items() if par[b][0] == "contrastive"}
    gen = {b: v for b, v in drops.items() if par[b][0] in ("generative", "reconstruction")}
    if not con or not gen:
        need = [n for n, ok in ((NEEDS_CONTRASTIVE, con), (NEEDS_GENERATIVE, gen)) if not ok]
        why = "needs " + " and ".join(need) + _present(par)
        why = why if drops else "no within-superclass probes (a single superclass)"
        return _row(1, measured, NOT_TESTABLE, why, drops)
    c = float(np.mean([d for d, _ in con.values()]))
    c_se = float(np.sqrt(np.sum([s * s for _, s in con.values()])) / len(con))
    g_name = min(gen, key=lambda b: gen[b][0])
    effect, se = c - gen[g_name][0], float(np.hypot(c_se, gen[g_name][1]))
    ci = interval(effect, se)
    holds = verdict(*ci, below=True)
    why = f"mean contrastive drop - smallest generative/reconstruction drop ({g_name}); 95% CI {ci[0]:+.3f} .. {ci[1]:+.3f}"
    return _row(1, measured, holds, why, {**con, **gen}, effect, ci, "normal CI")


def finding_2(metrics: pd.DataFrame, par: dict) -> dict:
    """Text-aligned vs vision-only contrastive encoders: subclass top-1 (same classes, so raw points)."""
    acr = _across(metrics)
    top1 = {
        b: (float(r.top1), float(r.n_test))
        for (b, lv), r in acr.iterrows()
        if lv == "subclass" and _paradigm(par, b) == "contrastive"
    }
    aligned = {b: v for b, v in top1.items() if par[b][1]}
    plain = {b: v for b, v in top1.items() if not par[b][1]}
    measured = (
        ("subclass top-1: " + ", ".join(f"{b} {v[0]:.1f}" for b, v in sorted(top1.items()))) if top1 else ""
    )
    if not aligned or not plain:
        need = [n for n, ok in ((NEEDS_ALIGNED, aligned), (NEEDS_UNALIGNED, plain)) if not ok]
        return _row(2, measured, NOT_TESTABLE, "needs " + " and ".join(need) + _present(par), top1)

    def mean_se(group):
        acc = np.array([v[0] for v in group.values()])
        se = [np.sqrt(max(a * (100 - a), 25.0 / n) / n) for a, n in group.values()]
        return float(acc.mean()), float(np.sqrt(np.sum(np.square(se))) / len(se))

    (a, a_se), (p, p_se) = mean_se(aligned), mean_se(plain)
    ci = interval(a - p, float(np.hypot(a_se, p_se)))
    why = f"mean subclass top-1 text-aligned {a:.1f} - vision-only {p:.1f}; 95% CI {ci[0]:+.1f} .. {ci[1]:+.1f} points"
    return _row(2, measured, verdict(*ci, below=True), why, top1, a - p, ci, "normal CI")


def finding_3(metrics: pd.DataFrame, robustness: pd.DataFrame | None, par: dict) -> dict:
    """Share of chance-corrected skill kept at the strongest FGSM/PGD epsilon, fine vs coarse level."""
    if robustness is None or robustness.empty:
        return _row(3, "", NOT_TESTABLE, "no robustness rows (fgbmk_robustness not materialized)", [])
    chance = metrics[metrics.scope == "across"].groupby(["backbone", "level"]).chance_top1.first()
    attacks = robustness[robustness.attack.isin(["fgsm", "pgd"])]
    levels = [lv for lv in LEVELS if lv in set(robustness.level)]
    fine, coarse = (levels[-1], levels[0]) if len(levels) >= 2 else (None, None)
    parts, effects, used, skipped = [], [], [], []
    for b, grp in attacks.groupby("backbone", sort=True):
        if _paradigm(par, b) in CHECKS or fine is None:
            continue
        kept = {}
        for lv in (fine, coarse):
            g = grp[grp.level == lv]
            ch = float(chance.get((b, lv), np.nan))
            if g.empty or not np.isfinite(ch):
                break
            clean, n = float(g.clean_accuracy.iloc[0]), float(g.n_images.iloc[0])
            worst = float(g[g.strength == g.strength.max()].accuracy.min())
            s_clean, se_clean = skill(clean, ch), skill_se(clean, ch, n)
            if s_clean - Z * se_clean <= 0:
                skipped.append(f"{b} ({lv} clean {clean:.1f} on {n:g} images, chance {ch:.1f})")
                break
            # an attack may push accuracy below chance: that is all the skill lost, not less than none
            r = max(skill(worst, ch), 0.0) / s_clean
            r_se = float(np.hypot(skill_se(worst, ch, n), r * se_clean)) / s_clean
            kept[lv] = (clean, worst, float(g.strength.max()), r, r_se)
        if len(kept) < 2:
            continue
        (cf, wf, eps, rf, sf), (cc, wc, _, rc, sc) = kept[fine], kept[coarse]
        parts.append(
            f"{b} at eps {eps:g}/255: {fine} {cf:.1f} -> {wf:.1f} (keeps {rf:.0%} of its skill), {coarse} "
            f"{cc:.1f} -> {wc:.1f} (keeps {rc:.0%})"
        )
        effects.append((rf - rc, float(np.hypot(sf, sc))))
        used.append(b)
    why_skip = f"; clean skill not above chance (95%): {', '.join(skipped)}" if skipped else ""
    if not used:
        why = (
            "no FGSM/PGD rows at two levels of a differentiable model backbone with clean skill above chance"
            + why_skip
        )
        return _row(3, "", NOT_TESTABLE, why, [])
    effect = float(np.mean([e for e, _ in effects]))
    ci = interval(effect, float(np.sqrt(np.sum([s * s for _, s in effects])) / len(effects)))
    holds = verdict(*ci, below=True)
    why = (
        f"share of skill kept, fine - coarse: {effect:+.2f}, 95% CI {ci[0]:+.2f} .. {ci[1]:+.2f}"
        + (
            ""
            if holds != NOT_TESTABLE
            else " (holds 0: both levels lose (nearly) all their skill, or too few images were attacked)"
        )
        + why_skip
    )
    return _row(3, "; ".join(parts), holds, why, used, effect, ci, "normal CI")


def _spread_verdict(p: float, spread: float, config: FindingsConfig) -> str:
    """Knowledge bias of one model: yes when its per-class spread beats binomial noise and is wide enough."""
    return (
        YES if p < config.alpha and spread >= config.min_spread else NOT_TESTABLE if p >= config.alpha else NO
    )


def finding_4(metrics: pd.DataFrame, lvlm: pd.DataFrame | None, par: dict, config: FindingsConfig) -> dict:
    """(a) skill falls from the coarsest to the finest level; (b) per-class accuracy spreads beyond noise."""
    acr = _across(metrics)
    gran, effects, used = [], [], []
    for b in sorted({b for b, _ in acr.index}):
        if _paradigm(par, b) in CHECKS or any((b, lv) not in acr.index for lv in ("superclass", "subclass")):
            continue
        rows = {lv: acr.loc[(b, lv)] for lv in LEVELS if (b, lv) in acr.index}
        s = {lv: skill(r.top1, r.chance_top1) for lv, r in rows.items()}
        se = {lv: skill_se(r.top1, r.chance_top1, r.n_test) for lv, r in rows.items()}
        d = s["superclass"] - s["subclass"]
        lo, hi = interval(d, float(np.hypot(se["superclass"], se["subclass"])))
        mult = " -> ".join(f"{r.top1 / r.chance_top1:.1f}x" for r in rows.values())
        gran.append(
            f"{b}: top-1 "
            + " -> ".join(f"{r.top1:.1f}" for r in rows.values())
            + f" ({mult} chance), skill "
            + " -> ".join(f"{v:.2f}" for v in s.values())
            + f", superclass - subclass {d:+.2f} [{lo:+.2f}, {hi:+.2f}]"
        )
        effects.append((d, lo, hi))
        used.append(b)
    if lvlm is not None and len(lvlm):
        acc = lvlm[(lvlm.task == "hierarchical") & (lvlm.form == "choice") & (lvlm.metric == "accuracy")]
        for m, grp in acc.groupby("model", sort=True):
            if _paradigm(par, m) in CHECKS:
                continue
            g = grp.set_index("level")
            if "superclass" in g.index and "subclass" in g.index:
                ch = 100.0 / config.lvlm_choices
                a, z = float(g.value["superclass"]), float(g.value["subclass"])
                d = skill(a, ch) - skill(z, ch)
                se = float(np.hypot(skill_se(a, ch, g.n["superclass"]), skill_se(z, ch, g.n["subclass"])))
                lo, hi = interval(d, se)
                gran.append(
                    f"{m} (LVLM, {config.lvlm_choices}-choice): {a:.1f} -> {z:.1f}, skill drop {d:+.2f} [{lo:+.2f}, {hi:+.2f}]"
                )
                effects.append((d, lo, hi))
                used.append(m)
    part_a = [verdict(lo, hi, below=False) for _, lo, hi in effects]
    a = NO if NO in part_a else YES if YES in part_a else NOT_TESTABLE
    bias, part_b = [], []
    sub = metrics[(metrics.scope == "across") & (metrics.level == "subclass")]
    for r in sub.itertuples():
        if _paradigm(par, r.backbone) in CHECKS or not np.isfinite(r.class_top1_std):
            continue
        classes = int(round(r.n_test / max(r.test_per_class, 1e-9)))
        p, null = spread_test(
            r.class_top1_std, r.class_top1_mean, r.test_per_class, classes, config.simulations, config.seed
        )
        spread = r.class_top1_max - r.class_top1_min
        bias.append(
            f"{r.backbone}: per-class top-1 {r.class_top1_min:.0f}-{r.class_top1_max:.0f}, std {r.class_top1_std:.1f} vs "
            f"{null:.1f} from {r.test_per_class:g} images/class alone (p = {p:.3f})"
        )
        part_b.append(_spread_verdict(p, spread, config))
        if r.backbone not in used:
            used.append(r.backbone)
    if lvlm is not None and len(lvlm):
        kb = lvlm[lvlm.task == "knowledge_bias"].pivot_table(index="model", columns="metric", values="value")
        for m, r in kb.iterrows():
            if _paradigm(par, m) in CHECKS or not {"class_accuracy_std", "class_accuracy_questions"} <= set(
                r.index
            ):
                continue
            classes = int(lvlm[(lvlm.model == m) & (lvlm.metric == "class_accuracy_std")].n.iloc[0])
            cols = ["class_accuracy_std", "class_accuracy_mean", "class_accuracy_questions"]
            p, null = spread_test(*r[cols], classes, config.simulations, config.seed)
            bias.append(
                f"{m} (LVLM knowledge bias): {r['class_accuracy_min']:.0f}-{r['class_accuracy_max']:.0f}, std {r['class_accuracy_std']:.1f} vs {null:.1f} (p = {p:.3f})"
            )
            spread = r["class_accuracy_max"] - r["class_accuracy_min"]
            part_b.append(_spread_verdict(p, spread, config))
            if m not in used:
                used.append(m)
    b = YES if part_b and all(v == YES for v in part_b) else NO if NO in part_b else NOT_TESTABLE
    if not used:
        why = "no model scored at the coarsest and finest levels (oracles and random-init nets are left out)"
        return _row(4, "", NOT_TESTABLE, why, [])
    holds = YES if a == YES and b == YES else NO if NO in (a, b) else NOT_TESTABLE
    means = [float(np.mean(col)) for col in zip(*effects, strict=True)] if effects else [np.nan] * 3
    eff, ci = means[0], (means[1], means[2])
    why = (
        f"(a) granularity: {a} ({sum(v == YES for v in part_a)} of {len(part_a)} models fall in chance-corrected skill, 95% CI above 0); "
        f"(b) knowledge bias: {b} ({sum(v == YES for v in part_b)} of {len(part_b)} spreads beyond binomial noise at p < {config.alpha:g} "
        f"and span >= {config.min_spread:g} points)"
    )
    return _row(4, "; ".join(gran + bias), holds, why, used, eff, ci, "normal CI; Monte Carlo spread test")


def finding_5(metrics: pd.DataFrame, par: dict) -> dict:
    """Specialist vs the best other model at the subclass level (top-1, same classes)."""
    acr = _across(metrics)
    sub = {
        b: (float(r.top1), float(r.n_test))
        for (b, lv), r in acr.iterrows()
        if lv == "subclass" and _paradigm(par, b) not in CHECKS
    }
    spec = {b: v for b, v in sub.items() if _paradigm(par, b) == "specialist"}
    other = {b: v for b, v in sub.items() if _paradigm(par, b) not in ("specialist", None)}
    if not spec or not other:
        return _row(
            5, "", NOT_TESTABLE, "needs " + NEEDS_SPECIALIST + " beside a generic one" + _present(par), []
        )
    s, o = max(spec, key=lambda b: spec[b][0]), max(other, key=lambda b: other[b][0])
    (a1, n1), (a2, n2) = spec[s], other[o]
    ci = interval(a2 - a1, float(np.hypot(np.sqrt(a1 * (100 - a1) / n1), np.sqrt(a2 * (100 - a2) / n2))))
    why = f"best generic {o} {a2:.1f} - best specialist {s} {a1:.1f}; 95% CI {ci[0]:+.1f} .. {ci[1]:+.1f} points"
    measured = f"subclass top-1: {s} {a1:.1f}, {o} {a2:.1f}"
    return _row(5, measured, verdict(*ci, below=True), why, [s, o], a2 - a1, ci, "normal CI")


def check_findings(
    metrics: pd.DataFrame,
    robustness: pd.DataFrame | None,
    config: FindingsConfig,
    lvlm_metrics: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """The paper's five findings (FINDING_COLUMNS), in its order, from the fgbmk tables of every partition."""
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
        finding_1(metrics, par),
        finding_2(metrics, par),
        finding_3(metrics, robustness, par),
        finding_4(metrics, lvlm_metrics, par, config),
        finding_5(metrics, par),
    ]
    return pd.DataFrame(rows, columns=FINDING_COLUMNS).assign(simulated=simulated)


def findings_markdown(findings: pd.DataFrame) -> str:
    """The findings table as Markdown (finding, paper, ours, effect with its interval, holds, why, not covered)."""
    lines = [
        "| # | finding | paper | ours | effect [95% CI] | holds | why | not covered |",
        "|---|---|---|---|---|:---:|---|---|",
    ]
    for r in findings.itertuples(index=False):
        eff = f"{r.effect:+.3f} [{r.ci_low:+.3f}, {r.ci_high:+.3f}]" if np.isfinite(r.effect) else "-"
        lines.append(
            f"| {r.finding} | {r.claim} | {r.paper} | {r.measured} | {eff} | {r.holds} | {r.why} | {r.not_covered} |"
        )
    return "\n".join(lines) + "\n"
