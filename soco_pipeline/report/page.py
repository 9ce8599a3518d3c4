"""The static results page: one HTML file under <storage>/report/ with every family's leaderboard and its 95%
CIs (table and error bars), the correlation figure, the per-backbone prediction panels and LVLM examples.

Everything the page shows is a file beside it (PNG), linked relatively, so the folder opens from file://,
copies anywhere and serves as it is (`soco report --serve`, 127.0.0.1 only).
"""

from __future__ import annotations

import html
import io
import json
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pandas as pd

from soco_pipeline.storage import exists, join, read_bytes, read_parquet, write_bytes_atomic

HEADLINE = ["cc", "soc", "soc_geo", "cross_soc", "four_choice", "four_choice_circular"]
LVLM_EXAMPLES = 4
CSS = """
body{font-family:system-ui,sans-serif;margin:2em auto;max-width:1200px;color:#222}
h1{font-size:1.6em}h2{border-bottom:1px solid #ccc;padding-bottom:.2em;margin-top:2em}
table{border-collapse:collapse;font-size:.85em;margin:.5em 0}td,th{border:1px solid #ddd;padding:3px 7px;text-align:right}
th{background:#f4f4f4}td:first-child,th:first-child{text-align:left}.partial{color:#b35900;font-weight:bold}
figure{display:inline-block;margin:.4em;vertical-align:top;max-width:100%}figure img{max-width:100%;border:1px solid #ddd}
figcaption{font-size:.8em;color:#555;max-width:760px}.note{font-size:.85em;color:#555}
"""


def _read(path: str) -> pd.DataFrame | None:
    return read_parquet(path) if exists(path) else None


def _records(storage_root: str, sub: str = "") -> dict[str, dict]:
    """The results records written by the record assets ({model: record}); local storage roots only."""
    folder = Path(join(storage_root, "results", "records", *([sub] if sub else [])))
    return (
        {p.stem: json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))} if folder.is_dir() else {}
    )


def ci_table(records: dict[str, dict], metrics: list[str] | None = None) -> pd.DataFrame:
    """One row per model: each metric as 'value [lo, hi]' (bootstrap over categories) plus the raw numbers."""
    rows = []
    for model, rec in records.items():
        row: dict = {
            "model": model,
            "partial": rec["subset"]["partial"],
            "subset": rec["subset"]["description"],
        }
        for m, r in rec["results"].items():
            if metrics is not None and m not in metrics:
                continue
            lo, hi = r["ci95_boot_category"]
            row[m] = "" if r["value"] is None else f"{r['value']:.1f} [{lo:.1f}, {hi:.1f}]"
        rows.append(row)
    return pd.DataFrame(rows)


def _or_nan(v) -> float:
    return np.nan if v is None else float(v)


def ci_plot(records: dict[str, dict], metrics: list[str], path: str) -> str | None:
    """Bars with 95% CI error bars (bootstrap over categories) per metric and model, as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    models = list(records)
    metrics = [m for m in metrics if any(m in r["results"] for r in records.values())]
    if not models or not metrics:
        return None
    fig, ax = plt.subplots(figsize=(max(6, 1.6 * len(metrics) * max(1, len(models)) / 2), 4))
    width = 0.8 / len(models)
    x = np.arange(len(metrics))
    for i, model in enumerate(models):
        res = records[model]["results"]
        val = np.array([_or_nan(res.get(m, {}).get("value")) for m in metrics], dtype=float)
        lo = np.array(
            [(res.get(m, {}).get("ci95_boot_category") or [np.nan, np.nan])[0] for m in metrics], float
        )
        hi = np.array(
            [(res.get(m, {}).get("ci95_boot_category") or [np.nan, np.nan])[1] for m in metrics], float
        )
        label = model + (" (partial)" if records[model]["subset"]["partial"] else "")
        ax.bar(x + i * width, np.nan_to_num(val), width, label=label)
        # the interval itself, from lo to hi (not value +- a length): it is drawn as computed
        ok = np.isfinite(lo) & np.isfinite(hi)
        ax.errorbar(
            (x + i * width)[ok],
            ((lo + hi) / 2)[ok],
            yerr=((hi - lo) / 2)[ok],
            fmt="none",
            ecolor="black",
            capsize=3,
            linewidth=1,
        )
    ax.set_xticks(x + width * (len(models) - 1) / 2, metrics)
    ax.set_ylim(0, 105)
    ax.set_ylabel("0-100; error bars: 95% CI, bootstrap over categories")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    plt.close(fig)
    write_bytes_atomic(path, buf.getvalue())
    return path


def _table_html(df: pd.DataFrame | None, name_col: str | None = None) -> str:
    if df is None or df.empty:
        return '<p class="note">(not materialized yet)</p>'
    shown = df.copy()
    if name_col and "partial" in shown.columns:
        mark = shown["partial"].fillna(False).astype(bool)
        shown[name_col] = [
            f'{html.escape(str(n))} <span class="partial">[partial: {html.escape(str(s))}]</span>'
            if p
            else html.escape(str(n))
            for n, p, s in zip(shown[name_col], mark, shown.get("subset", [""] * len(shown)), strict=True)
        ]
    return shown.to_html(index=False, escape=False, na_rep="", float_format=lambda v: f"{v:.1f}", border=0)


def _figure(src: str, caption: str, alt: str) -> str:
    return (
        f'<figure><img src="{html.escape(src)}" alt="{html.escape(alt)}">'
        f"<figcaption>{html.escape(caption)}</figcaption></figure>"
    )


def lvlm_examples(answers: pd.DataFrame, items: pd.DataFrame, n: int, seed: int) -> pd.DataFrame:
    """A seeded sample of n answered rows (one wrong first when any) with their rendered images."""
    cols = ["setting", "index", "src_render", "trg_render", "question"]
    a = answers.merge(items[cols], on=["setting", "index"], how="left")
    if a.empty:
        return a
    rng = np.random.default_rng(seed)
    pick = list(rng.choice(len(a), size=min(n, len(a)), replace=False))
    wrong = np.flatnonzero(~a["correct"].astype(bool).to_numpy())
    if len(wrong) and not set(pick) & set(wrong):
        pick[-1] = int(rng.choice(wrong))
    return a.iloc[sorted(pick)].reset_index(drop=True)


def build_report(settings, out_dir: str | None = None, seed: int = 0) -> str:
    """Write <storage>/report/index.html (or out_dir/index.html) and the images it shows; returns its path."""
    root = settings.storage_root
    out = Path(out_dir or join(root, "report"))
    out.mkdir(parents=True, exist_ok=True)
    tables = settings.tables_root
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'><title>SOCO results</title>",
        f"<style>{CSS}</style></head><body><h1>SOCO pipeline results</h1>",
        '<p class="note">Values 0-100. CIs: 95%, bootstrap over categories (pair groups); records in '
        "results/records/ hold the cluster-robust (by target image) intervals too. A row marked partial "
        "scored a subset only.</p>",
    ]

    # --- backbones
    board = _read(join(tables, "leaderboard.parquet"))
    records = _records(root)
    parts.append('<h2 id="backbones">Backbones: zero-shot correspondence (PCK@0.1)</h2>')
    parts.append(_table_html(board, "backbone"))
    if records:
        parts.append("<h3>95% confidence intervals</h3>")
        parts.append(_table_html(ci_table(records, HEADLINE), "model"))
        plot = ci_plot(records, HEADLINE, str(out / "backbone_ci.png"))
        if plot:
            parts.append(
                _figure(
                    "backbone_ci.png",
                    "Headline metrics with 95% CIs (bootstrap over categories)",
                    "backbone leaderboard with error bars",
                )
            )

    # --- correlation figure
    figs = sorted(Path(join(root, "figures")).glob("correlation_*.png")) if not str(root).count("://") else []
    if figs:
        parts.append('<h2 id="correlation">SOC vs global-feature metrics</h2>')
        for f in figs:
            shutil.copyfile(f, out / f.name)
            parts.append(_figure(f.name, f.stem.replace("_", " "), f.stem))

    # --- LVLMs
    lboard = _read(join(tables, "lvlm_leaderboard.parquet"))
    lrecords = _records(root, "lvlm")
    parts.append('<h2 id="lvlms">LVLMs: four-choice SOCO-LVLM (average / circular accuracy)</h2>')
    parts.append(
        _table_html(lboard.drop(columns=["source"], errors="ignore") if lboard is not None else None, "model")
    )
    if lrecords:
        parts.append(_table_html(ci_table(lrecords), "model"))
        lm = sorted({m for r in lrecords.values() for m in r["results"]})
        if ci_plot(lrecords, lm, str(out / "lvlm_ci.png")):
            parts.append(
                _figure(
                    "lvlm_ci.png",
                    "LVLM accuracies with 95% CIs (bootstrap over categories)",
                    "LVLM leaderboard with error bars",
                )
            )

    # --- every other family's leaderboard (tables/<family>_leaderboard.parquet)
    others = sorted(Path(tables).glob("*leaderboard*.parquet")) if "://" not in str(tables) else []
    for f in others:
        if f.stem in ("leaderboard", "lvlm_leaderboard"):
            continue
        parts.append(f'<h2 id="{html.escape(f.stem)}">{html.escape(f.stem.replace("_", " "))}</h2>')
        first = read_parquet(str(f))
        parts.append(_table_html(first, first.columns[0] if len(first.columns) else None))

    # --- panels
    panel_root = Path(join(root, "report", "panels"))
    if panel_root.is_dir():
        parts.append('<h2 id="panels">What the backbones did (seeded sample of queries)</h2>')
        parts.append(
            '<p class="note">Left: source and query (red). Middle: target, ground truth (green), '
            "prediction (blue). Right: cosine similarity of the query over the target.</p>"
        )
        for bdir in sorted(p for p in panel_root.iterdir() if p.is_dir()):
            parts.append(f"<h3>{html.escape(bdir.name)}</h3>")
            for png in sorted(bdir.glob("*.png")):
                dest = out / "panels" / bdir.name / png.name
                if dest.resolve() != png.resolve():
                    dest.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copyfile(png, dest)
                pair, _, kp = png.stem.partition("__")
                parts.append(_figure(f"panels/{bdir.name}/{png.name}", f"{pair} / {kp}", f"panel {png.stem}"))

    # --- LVLM examples
    items = _read(join(tables, "lvlm_items.parquet"))
    folder = Path(join(tables, "lvlm_answers"))
    if items is not None and folder.is_dir():
        parts.append('<h2 id="lvlm-examples">What the LVLMs answered</h2>')
        for f in sorted(folder.glob("*.parquet")):
            ex = lvlm_examples(read_parquet(str(f)), items, LVLM_EXAMPLES, seed)
            parts.append(f"<h3>{html.escape(f.stem)}</h3>")
            for r in ex.itertuples(index=False):
                imgs = []
                for kind, p in (("src", r.src_render), ("trg", r.trg_render)):
                    if isinstance(p, str) and p and exists(p):
                        name = f"lvlm/{f.stem}/{r.setting}_{r.index}_{kind}.jpg"
                        write_bytes_atomic(str(out / name), read_bytes(p))
                        imgs.append(f'<img src="{name}" alt="{kind} image" style="max-height:220px">')
                verdict = "right" if r.correct else "wrong"
                parts.append(
                    f"<figure>{''.join(imgs)}<figcaption><b>{html.escape(r.setting)}</b> item {r.index}: answer "
                    f"{html.escape(str(r.answer))}, parsed <b>{html.escape(str(r.parsed) or '-')}</b> ({verdict})"
                    f"<br>raw: <code>{html.escape(str(r.raw_answer)[:300])}</code></figcaption></figure>"
                )
    parts.append("</body></html>\n")
    index = out / "index.html"
    write_bytes_atomic(str(index), "\n".join(parts).encode())
    return str(index)


@contextmanager
def report_server(folder: str | Path, port: int = 0) -> Iterator[str]:
    """Serve the report folder on http://127.0.0.1:port (0: a free one) in a thread; yields the URL and
    stops the server when the block exits."""
    import functools
    import threading
    from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

    class Quiet(SimpleHTTPRequestHandler):
        def log_message(self, format: str, *args) -> None:  # noqa: A002 - http.server's naming
            return

    httpd = ThreadingHTTPServer(("127.0.0.1", port), functools.partial(Quiet, directory=str(folder)))
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/"
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=10)


def serve_report(folder: str | Path, port: int = 0, ready=print) -> None:
    """`soco report --serve`: serve the report folder on 127.0.0.1 until Ctrl-C."""
    import threading

    with report_server(folder, port) as url:
        ready(f"serving the results page at {url} (Ctrl-C stops)")
        try:
            threading.Event().wait()
        except KeyboardInterrupt:
            pass


def error_bar_markdown(index: str) -> dict[str, str]:
    """The leaderboards' CI error-bar figures beside a built page, as Markdown with embedded PNGs
    ({"backbone_ci": ..., "lvlm_ci": ...}, only those that exist), for the UI's metadata."""
    import base64

    out = {}
    for name in ("backbone_ci", "lvlm_ci"):
        png = Path(index).parent / f"{name}.png"
        if png.exists():
            out[name] = f"![{name}](data:image/png;base64,{base64.b64encode(png.read_bytes()).decode()})"
    return out
