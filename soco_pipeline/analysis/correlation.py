"""The correlation study of the SOCO paper's Fig. 4 (docs/analysis.md): Pearson r and Spearman rho with seeded
bootstrap CIs and paired delta r; error metrics are sign-flipped first (`sign_flipped`)."""

from __future__ import annotations

import fnmatch
import hashlib
from collections.abc import Callable
from dataclasses import field
from pathlib import Path
from typing import Annotated, Any, NamedTuple

import numpy as np
import pandas as pd
from pydantic import ConfigDict, Field, StrictFloat, StrictInt, model_validator
from pydantic.dataclasses import dataclass as pydantic_dataclass

from soco_pipeline.analysis.bootstrap import (
    Interval,
    bootstrap_correlations,
    bootstrap_delta,
    pair_seed,
    resample_indices,
)
from soco_pipeline.analysis.reference import ReferenceDataError, select_models
from soco_pipeline.config import read_yaml, validate_doc
from soco_pipeline.storage import PROJECT_ROOT

STATISTICS = ("pearson", "spearman")
ANALYSIS_CONFIG = PROJECT_ROOT / "assets" / "analysis.yaml"
CORRELATION_COLUMNS = (
    "subset benchmark benchmark_task benchmark_metric task task_display metric metric_shown sign_flipped "
    "headline statistic estimate ci_low ci_high n n_resamples confidence seed degenerate_resamples inputs_sha"
).split()
# Bumped whenever the bootstrap's arithmetic changes: a stored row is reused only under the same version.
BOOTSTRAP_VERSION = "1"


class AnalysisConfigError(ValueError):
    """The analysis config is malformed; the message names the file, the field and the fix."""


class BenchmarkRef(NamedTuple):
    """Where a benchmark score lives in the score tables: `{task: ..., metric: ...}` in the YAML."""

    task: str
    metric: str


# Lax (lists fill the tuples) except for the numbers, which are strict (`seed: true` is an error).
@pydantic_dataclass(frozen=True, config=ConfigDict(extra="forbid"))
class AnalysisConfig:
    """Settings of the correlation study (assets/analysis.yaml), typed: a bad value names its field."""

    seed: StrictInt = 0
    n_resamples: Annotated[StrictInt, Field(ge=100)] = 10_000
    confidence: Annotated[StrictFloat, Field(gt=0.5, lt=1)] = 0.95
    min_models: Annotated[StrictInt, Field(ge=2)] = 5
    benchmarks: dict[str, BenchmarkRef] = field(default_factory=dict)
    deltas: tuple[tuple[str, str], ...] = ()
    not_downstream: tuple[str, ...] = ("soco", "soco_*", "knn", "soco_pipeline")
    # label -> all | is_main_model | [model names]
    subsets: dict[str, str | list[str]] = field(default_factory=lambda: {"all": "all"})
    headline: dict[str, str] = field(default_factory=dict)
    source: str = "the analysis config"

    @model_validator(mode="after")
    def _deltas_name_benchmarks(self) -> AnalysisConfig:
        for a, b in self.deltas:
            for name in (a, b):
                if name not in self.benchmarks:
                    raise ValueError(
                        f"a delta names benchmark {name!r}, which is not in `benchmarks`; add it "
                        f"there or fix the name"
                    )
        return self


def load_analysis_config(path: str | Path = ANALYSIS_CONFIG, **overrides) -> AnalysisConfig:
    """The analysis config from YAML with keyword overrides; AnalysisConfigError names the field."""
    raw = read_yaml(path, AnalysisConfigError, "analysis config")
    raw = {} if raw is None else raw
    if isinstance(raw, dict):
        raw = {"source": str(path), **raw, **{k: v for k, v in overrides.items() if v is not None}}
    return validate_doc(
        AnalysisConfig, raw, str(path), AnalysisConfigError, allowed=AnalysisConfig.__dataclass_fields__
    )


def _wide(scores: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Models x (task, metric) values, and one row of facts (higher_better, task_display) per column."""
    wide = scores.pivot(index="model", columns=["task", "metric"], values="value")
    facts = scores.drop_duplicates(["task", "metric"]).set_index(["task", "metric"])[
        ["higher_better", "task_display"]
    ]
    return wide, facts


def downstream_columns(scores: pd.DataFrame, config: AnalysisConfig) -> list[tuple[str, str]]:
    """The (task, metric) columns that are downstream tasks (not benchmarks or SOCO variants)."""
    keys = scores[["task", "metric"]].drop_duplicates()
    keep = ~keys["task"].map(lambda t: any(fnmatch.fnmatchcase(t, p) for p in config.not_downstream))
    return [tuple(k) for k in keys[keep].itertuples(index=False)]


def inputs_sha(config: AnalysisConfig, key: tuple[str, ...], *values: np.ndarray) -> str:
    """A hash of everything one bootstrap reads: its models' values, its seed key, the resampling settings, the
    bootstrap's version and the numpy / scipy that compute it. Equal hashes give equal intervals."""
    import scipy

    h = hashlib.sha256()
    settings = (BOOTSTRAP_VERSION, np.__version__, scipy.__version__, config.seed, config.n_resamples)
    h.update(repr((settings, float(config.confidence), STATISTICS, key)).encode())
    for v in values:
        h.update(np.ascontiguousarray(v, dtype=np.float64).tobytes())
        h.update(b"|")
    return h.hexdigest()[:16]


def stored_intervals(previous: pd.DataFrame | None) -> dict[tuple[str, str], Interval]:
    """{(inputs_sha, statistic): interval} of a stored correlation table (empty without one)."""
    if previous is None or "inputs_sha" not in previous.columns:
        return {}
    cols = ["inputs_sha", "statistic", "estimate", "ci_low", "ci_high", "degenerate_resamples"]
    return {
        (sha, stat): Interval(float(est), float(lo), float(hi), int(deg))
        for sha, stat, est, lo, hi, deg in previous[cols].itertuples(index=False)
    }


def stored_correlation(tables_root: str, warn: Callable[[str], Any] = print) -> pd.DataFrame | None:
    """The stored correlation table whose rows `correlation_table` may reuse; None when there is none or it
    cannot be read (then every row is resampled, and `warn` says why)."""
    from soco_pipeline.storage import TableIntegrityError
    from soco_pipeline.stored_tables import stored_table

    try:
        return stored_table(tables_root, "correlation")
    except FileNotFoundError:
        return None
    except (TableIntegrityError, OSError) as e:
        warn(f"the stored correlation table is not reused, every row is resampled: {e}")
        return None


def rows_reused(table: pd.DataFrame, previous: pd.DataFrame | None) -> int:
    """How many rows of `table` took a stored row's interval (0 without a stored table that has the hashes)."""
    if previous is None or "inputs_sha" not in previous.columns:
        return 0
    return int(table["inputs_sha"].isin(previous["inputs_sha"]).sum())


def _row(subset, bench, bt, bm, task, metric, facts, config, statistic, iv, n, sha) -> dict:
    hb = bool(facts.loc[(task, metric), "higher_better"])
    return {
        "subset": subset,
        "benchmark": bench,
        "benchmark_task": bt,
        "benchmark_metric": bm,
        "task": task,
        "task_display": facts.loc[(task, metric), "task_display"],
        "metric": metric,
        "metric_shown": metric if hb else f"-({metric})",
        "sign_flipped": not hb,
        "headline": config.headline.get(task) == metric,
        "statistic": statistic,
        "estimate": iv.estimate,
        "ci_low": iv.low,
        "ci_high": iv.high,
        "n": int(n),
        "n_resamples": config.n_resamples,
        "confidence": config.confidence,
        "seed": config.seed,
        "degenerate_resamples": iv.degenerate,
        "inputs_sha": sha,
    }


def correlation_table(
    scores: pd.DataFrame, config: AnalysisConfig, previous: pd.DataFrame | None = None
) -> pd.DataFrame:
    """Every pearson / spearman correlation with its CI, plus delta_pearson rows, from combined scores.

    A row whose inputs (`inputs_sha`) are those of a row of `previous`, the stored table, takes that row's
    interval instead of resampling again: a model added without downstream figures changes no row."""
    stored = stored_intervals(previous)
    if scores.empty:
        raise ReferenceDataError("no scores to correlate: the score tables are empty")
    wide, facts = _wide(scores)
    signs = pd.Series({k: (1.0 if facts.loc[k, "higher_better"] else -1.0) for k in facts.index})
    targets = downstream_columns(scores, config)
    benches = {name: key for name, key in config.benchmarks.items() if key in wide.columns}
    rows = []
    for label, subset in config.subsets.items():
        members = select_models(scores, subset, config.source)
        in_subset = wide.index.isin(sorted(members))
        for task, metric in targets:
            y = wide[(task, metric)].to_numpy() * signs[(task, metric)]
            for name, (bt, bm) in benches.items():
                x = wide[(bt, bm)].to_numpy()
                ok = in_subset & np.isfinite(x) & np.isfinite(y)
                n = int(ok.sum())
                if n < config.min_models:
                    continue
                sha = inputs_sha(config, (label, name, task, metric), x[ok], y[ok])
                ivs = {s: stored[(sha, s)] for s in STATISTICS if (sha, s) in stored}
                if len(ivs) < len(STATISTICS):
                    idx = resample_indices(
                        n, config.n_resamples, pair_seed(config.seed, label, name, task, metric)
                    )
                    ivs = bootstrap_correlations(x[ok], y[ok], idx, STATISTICS, config.confidence)
                for stat, iv in ivs.items():
                    rows.append(_row(label, name, bt, bm, task, metric, facts, config, stat, iv, n, sha))
            for a, b in config.deltas:
                if a not in benches or b not in benches:
                    continue
                xa, xb = wide[benches[a]].to_numpy(), wide[benches[b]].to_numpy()
                ok = in_subset & np.isfinite(xa) & np.isfinite(xb) & np.isfinite(y)
                n = int(ok.sum())
                if n < config.min_models:
                    continue
                sha = inputs_sha(config, (label, a, b, task, metric), xa[ok], xb[ok], y[ok])
                iv = stored.get((sha, "delta_pearson"))
                if iv is None:
                    idx = resample_indices(
                        n, config.n_resamples, pair_seed(config.seed, label, a, b, task, metric)
                    )
                    iv = bootstrap_delta(xa[ok], xb[ok], y[ok], idx, "pearson", config.confidence)
                rows.append(
                    _row(label, f"{a}-{b}", "", "", task, metric, facts, config, "delta_pearson", iv, n, sha)
                )
    out = pd.DataFrame(rows, columns=CORRELATION_COLUMNS)
    return out.sort_values(["subset", "statistic", "benchmark", "task", "metric"], kind="stable").reset_index(
        drop=True
    )


def headline_table(table: pd.DataFrame, subset: str = "all", a: str = "soc", b: str = "knn") -> pd.DataFrame:
    """One row per task at its headline metric: r and CI of benchmarks a and b, delta r and its CI, n."""
    h = table[(table["subset"] == subset) & table["headline"]]
    if h.empty:
        return pd.DataFrame()

    def pick(bench, stat, prefix):
        p = h[(h["benchmark"] == bench) & (h["statistic"] == stat)].set_index("task")
        return p[["estimate", "ci_low", "ci_high", "n"]].add_prefix(prefix)

    parts = [
        h.drop_duplicates("task").set_index("task")[["task_display", "metric_shown"]],
        pick(a, "pearson", f"r_{a}_"),
        pick(b, "pearson", f"r_{b}_"),
        pick(f"{a}-{b}", "delta_pearson", "delta_"),
    ]
    return pd.concat(parts, axis=1).reset_index()


def headline_markdown(table: pd.DataFrame, subset: str = "all", a: str = "soc", b: str = "knn") -> str:
    """The headline table as Markdown: task, metric, r_a [CI], r_b [CI], delta r [CI], n."""
    h = headline_table(table, subset, a, b)
    if h.empty:
        return "(no headline rows)\n"

    def ci(r, p):
        v = r[f"{p}estimate"]
        return "" if pd.isna(v) else f"{v:.2f} [{r[f'{p}ci_low']:.2f}, {r[f'{p}ci_high']:.2f}]"

    lines = [
        f"| task | metric | r {a.upper()} [95% CI] | n | r {b} [95% CI] | n | Δr [95% CI] | n | {a.upper()} > {b}? |",
        "|---|---|---:|---:|---:|---:|---:|---:|:---:|",
    ]
    for _, r in h.iterrows():
        win = "yes" if r[f"r_{a}_estimate"] > r[f"r_{b}_estimate"] else "no"
        lines.append(
            f"| {r['task_display']} | {r['metric_shown']} | {ci(r, f'r_{a}_')} | {r[f'r_{a}_n']:.0f} | "
            f"{ci(r, f'r_{b}_')} | {r[f'r_{b}_n']:.0f} | {ci(r, 'delta_')} | {r['delta_n']:.0f} | {win} |"
        )
    return "\n".join(lines) + "\n"


def task_markdown(table: pd.DataFrame, task: str, subset: str = "all", statistic: str = "pearson") -> str:
    """One downstream task's correlations as Markdown (metric, benchmark, r [CI], n)."""
    t = table[(table["subset"] == subset) & (table["task"] == task) & (table["statistic"] == statistic)]
    if t.empty:
        return f"(no {statistic} rows for {task!r} in subset {subset!r}: fewer models than min_models have both)\n"
    lines = [f"| {task} metric | benchmark | {statistic} [95% CI] | n |", "|---|---|---:|---:|"]
    for r in t.sort_values(["metric", "benchmark"], kind="stable").itertuples(index=False):
        lines.append(
            f"| {r.metric_shown} | {r.benchmark} | {r.estimate:.2f} [{r.ci_low:.2f}, {r.ci_high:.2f}] | {r.n} |"
        )
    return "\n".join(lines) + "\n"
