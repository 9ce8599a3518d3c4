"""A figure like the SOCO paper's Fig. 4: per-task Pearson r with CI bars for two benchmarks side by side
(SOC and ImageNet kNN by default), and the delta-r panel with its paired-bootstrap CI."""

from __future__ import annotations

import hashlib
import io

import numpy as np
import pandas as pd

from soco_pipeline.analysis.correlation import headline_table
from soco_pipeline.storage import exists, read_bytes, write_bytes_atomic

FORMATS = ("png", "svg")
# Bumped whenever the drawing changes: a stored figure is reused only under the same version.
FIGURE_VERSION = "1"

DISPLAY = {"soc": "SOC", "cc": "CC", "knn": "ImageNet kNN top-1 (k=20)"}


def correlation_figure(table: pd.DataFrame, subset: str = "all", a: str = "soc", b: str = "knn"):
    """The matplotlib Figure of the headline rows of `table` for one subset (a clear error if none)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    h = headline_table(table, subset, a, b)
    if h.empty or f"r_{a}_estimate" not in h.columns:
        raise ValueError(
            f"no headline correlations of {a!r} for subset {subset!r}: check `headline` and `benchmarks` in "
            f"assets/analysis.yaml and that the score tables have both"
        )
    h = h.sort_values(f"r_{a}_estimate", ascending=False)
    labels = [f"{d}\n{m}" for d, m in zip(h["task_display"], h["metric_shown"], strict=True)]
    y = np.arange(len(h))
    fig, (ax1, ax2) = plt.subplots(
        1, 2, figsize=(12, 0.6 * len(h) + 1.8), sharey=True, gridspec_kw={"width_ratios": [3, 2]}
    )
    for off, bench, color in ((-0.18, a, "tab:blue"), (0.18, b, "tab:orange")):
        est = h.get(f"r_{bench}_estimate")
        if est is None:
            continue
        err = np.vstack([est - h[f"r_{bench}_ci_low"], h[f"r_{bench}_ci_high"] - est])
        n = h[f"r_{bench}_n"]
        ax1.errorbar(
            est,
            y + off,
            xerr=np.nan_to_num(err),
            fmt="o",
            color=color,
            capsize=3,
            label=f"{DISPLAY.get(bench, bench)} (n = {int(n.min())}-{int(n.max())})",
        )
    ax1.axvline(0, color="grey", lw=0.8)
    ax1.set_xlim(-1, 1)
    ax1.set_xlabel("Pearson r with 95% bootstrap CI")
    ax1.set_yticks(y, labels, fontsize=8)
    ax1.invert_yaxis()
    ax1.legend(loc="lower left", fontsize=8)
    ax1.set_title(f"Correlation with downstream tasks ({subset} models)")
    d = h["delta_estimate"]
    derr = np.vstack([d - h["delta_ci_low"], h["delta_ci_high"] - d])
    ax2.barh(y, d, color=np.where(d > 0, "tab:green", "tab:red"), alpha=0.6)
    ax2.errorbar(d, y, xerr=np.nan_to_num(derr), fmt="none", color="black", capsize=3)
    ax2.axvline(0, color="grey", lw=0.8)
    ax2.set_xlabel(f"Δr = r_{a} − r_{b} (paired bootstrap 95% CI)")
    ax2.set_title("Δr")
    for ax in (ax1, ax2):
        ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    return fig


def figure_bytes(fig, fmt: str) -> bytes:
    """The figure rendered as PNG or SVG bytes."""
    buf = io.BytesIO()
    fig.savefig(buf, format=fmt, dpi=120)
    return buf.getvalue()


def save_correlation_figure(
    table: pd.DataFrame, path_stem: str, subset: str = "all", a: str = "soc", b: str = "knn"
) -> dict[str, bytes]:
    """Write `<path_stem>.png` and `<path_stem>.svg` atomically; returns {'png': bytes, 'svg': bytes}."""
    import matplotlib.pyplot as plt

    fig = correlation_figure(table, subset, a, b)
    try:
        out = {fmt: figure_bytes(fig, fmt) for fmt in FORMATS}
    finally:
        plt.close(fig)
    for fmt, data in out.items():
        write_bytes_atomic(f"{path_stem}.{fmt}", data)
    return out


def headline_sha(table: pd.DataFrame, subset: str = "all", a: str = "soc", b: str = "knn") -> str:
    """A hash of what the figure of `subset` draws: its headline rows (`headline_table`), with the drawing's
    version and matplotlib's."""
    from importlib.metadata import version

    h = headline_table(table, subset, a, b)
    drawing = (FIGURE_VERSION, version("matplotlib"), DISPLAY)
    digest = hashlib.sha256(repr((drawing, subset, a, b, list(h.columns))).encode())
    digest.update(pd.util.hash_pandas_object(h, index=True).to_numpy().tobytes())
    return digest.hexdigest()[:16]


def file_sha(data: bytes) -> str:
    """The sha256 of a figure file's bytes (hex)."""
    return hashlib.sha256(data).hexdigest()


def stored_figure(path_stem: str, recorded: dict[str, str]) -> dict[str, bytes] | None:
    """The figure files `<path_stem>.png|svg` when each one's sha256 is the one `recorded` ({fmt: sha});
    None when a file is missing or differs (a later failed run may have overwritten it)."""
    out = {}
    for fmt in FORMATS:
        path = f"{path_stem}.{fmt}"
        if not recorded.get(fmt) or not exists(path):
            return None
        out[fmt] = read_bytes(path)
        if file_sha(out[fmt]) != recorded[fmt]:
            return None
    return out
