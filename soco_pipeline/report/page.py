"""The static results page under <storage>/report/: autoescaped HTML (report/templates/results.html.j2) with
its PNGs linked relatively, so the folder opens from file:// and copies anywhere."""

from __future__ import annotations

import io
import json
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import quote

import numpy as np
import pandas as pd

from soco_pipeline.storage import PROJECT_ROOT, exists, join, read_bytes, read_parquet, write_bytes_atomic
from soco_pipeline.tasks import family_input_notes, family_specs
from soco_pipeline.tasks.core import LVLM_FAMILY, SOCO, all_specs
from soco_pipeline.trust.headline import simulated_rows

HEADLINE = ["cc", "soc", "soc_geo", "cross_soc", "four_choice", "four_choice_circular"]
LVLM_EXAMPLES = 4


def _read(path: str) -> pd.DataFrame | None:
    return read_parquet(path) if exists(path) else None


def _records(storage_root: str, sub: str = "") -> dict[str, dict]:
    """The results records written by the record assets ({model: record}); local storage roots only."""
    folder = Path(join(storage_root, "results", "records", *([sub] if sub else [])))
    return (
        {p.stem: json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))} if folder.is_dir() else {}
    )


def ci_plot(records: dict[str, dict], metrics: list[str], path: str) -> str | None:
    """Bars with 95% CI error bars (bootstrap over categories) per metric and model, as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    models = list(records)
    metrics = [m for m in metrics if any(m in r["results"] for r in records.values())]
    if not models or not metrics:
        return None
    # 1,200 x 500 px shown at its own size on the page (no downscaling): 12-13 px text at 100% zoom
    fig, ax = plt.subplots(figsize=(12, 5), dpi=100)
    width = 0.8 / len(models)
    x = np.arange(len(metrics))
    for i, model in enumerate(models):
        res = records[model]["results"]
        val = np.array([res.get(m, {}).get("value") for m in metrics], dtype=float)  # None -> NaN
        ci = np.array([res.get(m, {}).get("ci95_boot_category") or [np.nan, np.nan] for m in metrics], float)
        lo, hi = ci[:, 0], ci[:, 1]
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
    ax.set_xticks(x + width * (len(models) - 1) / 2, metrics, fontsize=13)
    ax.tick_params(axis="y", labelsize=12)
    ax.set_ylim(0, 105)
    ax.set_ylabel("score (0-100)", fontsize=13)
    ax.set_title("error bars: 95% CI, bootstrap over categories", fontsize=12, loc="left")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=12, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    plt.close(fig)
    write_bytes_atomic(path, buf.getvalue())
    return path


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


def page_table(
    df: pd.DataFrame | None, columns: list[str] | None = None, name_col: str | None = None, hoist: bool = True
) -> dict | None:
    """A table for the template: columns, rows of cells ({text, partial}) and notes."""
    from soco_pipeline.report.console import NOTE_COLUMNS, column_text, is_number

    if df is None or df.empty:
        return None
    df = df.reset_index(drop=True)
    cols = [c for c in (columns or list(df.columns)) if c in df.columns and c not in ("partial",)]
    notes = []
    if hoist:
        for col in [c for c in cols if c in NOTE_COLUMNS]:
            values = pd.Series(column_text(df[col]))
            if values.nunique() == 1:
                notes.append(f"{col}: {values.iat[0]}")
                cols.remove(col)
    partial = (
        [
            str(s) if bool(p) else ""
            for p, s in zip(df["partial"].fillna(False), df.get("subset", ""), strict=False)
        ]
        if name_col and "partial" in df.columns
        else [""] * len(df)
    )
    text = {c: column_text(df[c]) for c in cols}
    rows = [
        [{"text": text[c][i], "partial": partial[i] if c == name_col else ""} for c in cols]
        for i in range(len(df))
    ]
    columns_out = [{"name": str(c), "num": is_number(df[c])} for c in cols]
    return {"columns": columns_out, "rows": rows, "notes": notes}


def _figure(src: str, caption: str, alt: str, width: int | None = None) -> dict:
    return {"src": src, "caption": caption, "alt": alt, "width": width}


def git_commit() -> str:
    """The checkout's commit (short hash, '+ uncommitted changes' when the tree is dirty), or why not known."""
    import subprocess

    from soco_pipeline.trust.provenance import git

    try:
        head = git(PROJECT_ROOT, "rev-parse", "--short=12", "HEAD")
        dirty = git(PROJECT_ROOT, "status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.SubprocessError) as e:
        return f"unknown ({type(e).__name__})"
    if head.returncode != 0:
        return "unknown (not a git checkout)"
    return head.stdout.strip() + (" + uncommitted changes" if dirty.stdout.strip() else "")


def machine() -> str:
    """Host, architecture, CPUs, Python and torch versions, in one line."""
    import os
    import platform
    from importlib.metadata import PackageNotFoundError, version

    try:
        torch = version("torch")
    except PackageNotFoundError:
        torch = "not installed"
    return (
        f"{platform.node()} ({platform.machine()}, {os.cpu_count()} CPUs), Python {platform.python_version()}, "
        f"torch {torch}"
    )


def simulated_parts(settings, boards: dict[str, pd.DataFrame]) -> list[str]:
    """What on the page comes from simulated data, one phrase per part."""
    parts = []
    if settings.source == "embedded":
        parts.append(
            "SOCO images, keypoints and annotator clicks (the embedded generator: procedural objects, three "
            "simulated annotators), not the released SOCO set"
        )
    for name, board in boards.items():
        if board is None or board.empty:
            continue
        if (
            "data_source" in board.columns
            and board["data_source"].astype(str).str.startswith("simulated").any()
        ):
            parts.append(f"{name.upper()} items ({board['data_source'].astype(str).iat[0]})")
        elif "simulated" in board.columns and board["simulated"].fillna(False).astype(bool).any():
            parts.append(f"{name.upper()} data (generated; rows flagged `simulated`)")
        elif (spec := family_specs().get(name)) and spec.simulated_note:  # a marker that follows the data
            if simulated_rows(spec.headline, board, False).any():
                parts.append(spec.simulated_note)
    return parts


CORRELATION_NOTE = (
    "Source: the published OmniProbe results (GenIntel/OmniProbe results page, stored as "
    "reference/omniprobe_results.csv) and its downstream tasks: the models are the page's, not this run's "
    "backbones. A backbone of this run enters only where the name map pairs it with a published model."
)


def _headlines(settings, boards: dict[str, pd.DataFrame], roles: dict[str, str]) -> pd.DataFrame:
    """The model_headlines table when materialized, else one built from the boards (`roles`: the checks)."""
    from soco_pipeline.report.console import headlines_from_boards

    stored = _read(join(settings.tables_root, "model_headlines.parquet"))
    embedded = settings.source == "embedded"
    return stored if stored is not None else headlines_from_boards(boards, roles, embedded)


def build_report(settings, out_dir: str | None = None, missing_boards: dict[str, str] | None = None) -> str:
    """Write the results page and its images; returns its path. `missing_boards`: shown at the summary."""
    import datetime as dt

    from soco_pipeline.analysis.leaderboard import console_board
    from soco_pipeline.report.console import headline_columns, summary_frame
    from soco_pipeline.report.single_file import safe_name
    from soco_pipeline.trust.roles import ROLE_NOTE, spec_roles

    root = settings.storage_root
    out = Path(out_dir or join(root, "report"))
    out.mkdir(parents=True, exist_ok=True)
    tables = settings.tables_root
    local = "://" not in str(tables)

    board = _read(join(tables, f"{SOCO.headline.board}.parquet"))
    boards: dict[str, pd.DataFrame] = {SOCO.name: board} if board is not None else {}
    others = sorted(Path(tables).glob("*_leaderboard.parquet")) if local else []
    order = list(all_specs())[1:]  # SOCO's LVLM track, then the declared families, then any other board
    names = sorted(
        (f.stem.removesuffix("_leaderboard") for f in others),
        key=lambda n: (n not in order, order.index(n) if n in order else 0, n),
    )
    for name in names:
        boards[name] = read_parquet(join(tables, f"{name}_leaderboard.parquet"))

    # --- SOCO
    records = _records(root)
    core: dict = {"headline": None, "full": None, "ci_figure": None}
    if board is not None:
        shown = console_board(board)  # a partial row's name says so ('[partial: <rule>]')
        cols = [c for c in headline_columns(SOCO.name, shown) if c not in ("subset", "partial", "simulated")]
        core["headline"] = page_table(shown, cols)
        core["full"] = page_table(board, name_col="backbone")
    if records and ci_plot(records, HEADLINE, str(out / "backbone_ci.png")):
        caption = "SOCO headline metrics of this run's backbones, with 95% CIs (bootstrap over categories)."
        core["ci_figure"] = _figure("backbone_ci.png", caption, "backbone leaderboard with error bars")

    # --- beside the published figures (the models whose spec names one: trust/published.py)
    comparison = _read(join(tables, "published_comparison.parquet"))
    if comparison is not None and board is not None and "gap_note" in board.columns:  # the gap's sentence
        notes = board.drop_duplicates("backbone").set_index("backbone")["gap_note"]
        comparison = comparison.assign(why_it_differs=comparison["model"].map(notes).fillna(""))
    pub_cols = (
        "model reference metric ours published difference published_setting differing_knobs why_it_differs"
    )
    published = page_table(comparison, pub_cols.split(), name_col="model", hoist=False)

    # --- the protocol-sensitivity atlas (analysis/protocol_atlas.py): rankings under single-knob changes
    atlas = {"table": None, "figure": None}
    atlas_table = _read(join(tables, "protocol_atlas.parquet"))
    if atlas_table is not None and len(atlas_table):
        from soco_pipeline.analysis.protocol_atlas import atlas_figure_png

        atlas_cols = "family metric knob n_models tau tau_low tau_high flipped_pairs largest_change"
        atlas["table"] = page_table(atlas_table, atlas_cols.split(), hoist=False)
        if atlas_table["tau"].notna().any():
            write_bytes_atomic(str(out / "protocol_atlas.png"), atlas_figure_png(atlas_table))
            caption = (
                "Kendall tau between the ranking under the shipped protocol and under each single-knob change, "
                "with 95% bootstrap CIs over the family's unit (SOCO: categories; MMVM: match types); oracles "
                "left out (controls)."
            )
            atlas["figure"] = _figure(
                "protocol_atlas.png", caption, "protocol sensitivity: Kendall tau per knob"
            )

    # --- the families
    input_notes, specs, families = family_input_notes(settings), all_specs(), []
    for name in names:
        fam_board = boards[name]
        fam = {
            "id": name,
            "name": name,
            "title": getattr(specs.get(name), "title", name.replace("_", " ")),
            "notes": [input_notes[name]] if name in input_notes else [],
            "figures": [],
            "findings": None,
        }
        fam["headline"] = page_table(fam_board, headline_columns(name, fam_board), "model")
        fam["full"] = page_table(fam_board, name_col="model")
        if name == LVLM_FAMILY.name:
            lrecords = _records(root, "lvlm")
            if lrecords:
                fam["notes"].append(
                    "95% CIs of each evaluated LVLM (bootstrap over categories) in the chart below."
                )
                lm = sorted({m for r in lrecords.values() for m in r["results"]})
                if ci_plot(lrecords, lm, str(out / "lvlm_ci.png")):
                    caption = "LVLM accuracies with 95% CIs (bootstrap over categories)."
                    fam["figures"].append(_figure("lvlm_ci.png", caption, "LVLM CIs"))
        if getattr(specs.get(name), "findings", None):
            table, cols = specs[name].findings
            fam["findings"] = page_table(_read(join(tables, f"{table}.parquet")), list(cols), hoist=False)
        families.append(fam)

    # --- summary
    heads = _headlines(settings, boards, spec_roles(settings.backbones_dir, settings.lvlms_dir, root))
    summary = page_table(summary_frame(heads), name_col="model") if len(heads) else None
    checks = len(heads) and "role" in heads.columns and (heads["role"].fillna("model") != "model").any()
    summary_roles = ROLE_NOTE if checks else ""

    # --- correlation figure (published OmniProbe figures)
    correlation = []
    figs = sorted(Path(join(root, "figures")).glob("correlation_*.png")) if local else []
    for f in figs:
        shutil.copyfile(f, out / f.name)
        subset = f.stem.removeprefix("correlation_")
        caption = (
            f"Subset '{subset}': Pearson r of SOC and of ImageNet kNN top-1 with each downstream task, with "
            "95% bootstrap CIs, over the models published by OmniProbe (not this run's backbones)."
        )
        correlation.append(_figure(f.name, caption, f"correlation {subset}"))

    # --- panels
    panels = []
    panel_root = Path(join(root, "report", "panels"))
    if panel_root.is_dir():
        for bdir in sorted(p for p in panel_root.iterdir() if p.is_dir()):
            group = {"backbone": bdir.name, "figures": []}
            for png in sorted(bdir.glob("*.png")):
                rel = f"panels/{safe_name(bdir.name)}/{safe_name(png.name)}"  # no colons in file names
                dest = out / rel
                if dest.parent.resolve() == png.parent.resolve():
                    # the page built in place beside the panels (storage/report): no renamed copy beside each
                    # panel (a second file per panel), the panel's own name, URL-quoted (pair ids hold colons)
                    rel = f"panels/{quote(bdir.name)}/{quote(png.name)}"
                elif dest.resolve() != png.resolve():
                    dest.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copyfile(png, dest)
                pair, _, kp = png.stem.partition("__")
                caption = f"pair {pair}, query keypoint {kp}"
                group["figures"].append(_figure(rel, caption, f"panel {png.stem}"))
            panels.append(group)

    # --- LVLM examples
    lvlm_groups = []
    items = _read(join(tables, "lvlm_items.parquet"))
    folder = Path(join(tables, "lvlm_answers"))
    if items is not None and folder.is_dir():
        for f in sorted(folder.glob("*.parquet")):
            examples = []
            for r in lvlm_examples(read_parquet(str(f)), items, LVLM_EXAMPLES, 0).itertuples(index=False):
                imgs = []
                for kind, p in (("src", r.src_render), ("trg", r.trg_render)):
                    if isinstance(p, str) and p and exists(p):
                        name = f"lvlm/{safe_name(f.stem)}/{safe_name(f'{r.setting}_{r.index}_{kind}')}.jpg"
                        write_bytes_atomic(str(out / name), read_bytes(p))
                        imgs.append({"src": name, "alt": f"{kind} image"})
                examples.append(
                    {
                        "images": imgs,
                        "setting": str(r.setting),
                        "index": str(r.index),
                        "answer": str(r.answer),
                        "parsed": str(r.parsed) or "-",
                        "verdict": "right" if r.correct else "wrong",
                        "raw": str(r.raw_answer)[:300],
                    }
                )
            lvlm_groups.append({"model": f.stem, "examples": examples})

    sim = simulated_parts(settings, boards)
    header = {
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": git_commit(),
        "machine": machine(),
        "data": f"source {settings.source}, size {settings.dataset_size}"
        + (f", categories {', '.join(settings.categories)}" if settings.categories else ""),
        "simulated": "; ".join(sim) if sim else "nothing (every table comes from real data)",
    }
    html = _template().render(
        header=header,
        summary=summary,
        summary_roles=summary_roles,
        missing_boards=list((missing_boards or {}).values()),
        soco=core,
        published=published,
        atlas=atlas,
        families=families,
        correlation=correlation,
        correlation_note=CORRELATION_NOTE,
        panels=panels,
        lvlm_examples=lvlm_groups,
    )
    index = out / "index.html"
    write_bytes_atomic(str(index), html.encode())
    return str(index)


def _template():
    """The page's Jinja2 template, autoescaped (every value is text, never markup)."""
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.PackageLoader("soco_pipeline.report", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    return env.get_template("results.html.j2")


@contextmanager
def report_server(folder: str | Path, port: int = 0) -> Iterator[str]:
    """Serve the report folder on 127.0.0.1:port (0: free) in a thread; yields the URL."""
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
    """The boards' CI figures beside a built page as Markdown with embedded PNGs, for the UI."""
    import base64

    out = {}
    for name in ("backbone_ci", "lvlm_ci"):
        png = Path(index).parent / f"{name}.png"
        if png.exists():
            out[name] = f"![{name}](data:image/png;base64,{base64.b64encode(png.read_bytes()).decode()})"
    return out
