"""The TPIPS leaderboard (agreement per aspect on the OOO test split beside the rater agreement and ceiling),
its Markdown printout and the agreement-per-aspect bar chart (the shape of the paper's Fig. 5)."""

from __future__ import annotations

import io
import warnings

import numpy as np
import pandas as pd


def leaderboard(scores: pd.DataFrame) -> pd.DataFrame:
    """One row per (model, method): OOO agreement overall and per aspect, rater agreement, ceiling, 2AFC."""
    cols = ["model", "method", "conditioned", "ooo", "ooo_err", "rater_agreement", "ceiling", "judgements"]
    if scores.empty:
        return pd.DataFrame(columns=cols)
    ok = scores[scores.method != "n/a"]
    ooo = ok[ok["eval"] == "ooo"]
    wide = ooo.pivot_table(
        index=["model", "method", "conditioned"], columns="aspect", values="agreement"
    ).add_prefix("ooo_")
    base = ooo[ooo.aspect == "all"].set_index(["model", "method", "conditioned"])
    wide = wide.rename(columns={"ooo_all": "ooo"})
    wide["ooo_err"] = base.agreement_err
    wide["rater_agreement"] = base.rater_agreement
    wide["ceiling"] = base.ceiling
    wide["judgements"] = base.judgements
    afc = ok[ok["eval"].str.startswith("afc:") & (ok.aspect == "all")]
    if len(afc):
        wide = wide.join(
            afc.pivot_table(index=["model", "method", "conditioned"], columns="eval", values="agreement")
        )
    out = wide.reset_index().sort_values("ooo", ascending=False, kind="stable")
    # every per-backbone score asset (frozen baselines, learned metrics) writes the same "not applicable" row
    # for a backbone that cannot see TPIPS images: list each model once
    na = scores[scores.method == "n/a"][["model", "method", "judgements", "note"]].drop_duplicates("model")
    out = pd.concat([out, na], ignore_index=True)
    first = [c for c in cols if c in out.columns]
    return out[first + [c for c in out.columns if c not in first]].reset_index(drop=True)


def board_notes(cfg) -> list[str]:
    """The board's notes: what an official source's reader skipped, and whether the seed is a design seed."""
    from .config import DESIGN_SEEDS, REPORT_SEEDS
    from .source import source_note

    notes = [n for n in [source_note(cfg)] if n]
    if cfg.source.kind == "generated" and cfg.seed in DESIGN_SEEDS:
        notes.append(
            f"data seed {cfg.seed} is a design seed (design {DESIGN_SEEDS[0]}-{DESIGN_SEEDS[-1]}, report "
            f"{REPORT_SEEDS[0]}-{REPORT_SEEDS[-1]}; docs/tpips.md): the learned heads' figures are design figures"
        )
    return notes


def board_markdown(board: pd.DataFrame, notes: list[str] | tuple[str, ...] = ()) -> str:
    """The board as Markdown: the judgements marker once, the `notes`, then the table without that column."""
    if board.empty:
        return "\n".join(["empty", *notes])
    marks = sorted(board.judgements.dropna().unique()) if "judgements" in board else []
    what = {"simulated": "simulated (a noisy-observer model, not people)", "human": "human"}
    head = "judgements: " + (", ".join(what.get(m, m) for m in marks) if marks else "unknown")
    shown = board.drop(columns=["judgements"], errors="ignore")
    if "note" in shown and shown.note.isna().all():  # no not-applicable model: nothing to note
        shown = shown.drop(columns="note")
    body = shown.round(1).to_markdown(index=False)
    return "\n".join([head, *notes]) + f"\n\n{body}"


def agreement_figure(scores: pd.DataFrame, max_models: int = 8) -> bytes:
    """PNG: grouped bars of OOO agreement per aspect for the best models, the consensus as black ticks."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(10, 3.6), dpi=90)
    ooo = (
        scores[(scores.get("eval", pd.Series(dtype=str)) == "ooo") & (scores.get("method") != "n/a")]
        if not scores.empty
        else scores
    )
    if ooo.empty:
        ax.text(0.5, 0.5, "no scores yet", ha="center")
    else:
        ooo = ooo.assign(name=ooo.model + " " + ooo.method)
        best = ooo[ooo.aspect == "all"].sort_values("agreement", ascending=False)
        top = best.name.head(max_models).tolist()
        aspects = sorted(a for a in ooo.aspect.unique() if a != "all") + ["all"]
        width = 0.8 / max(len(top), 1)
        x = np.arange(len(aspects))
        for i, name in enumerate(top):
            g = ooo[ooo.name == name].set_index("aspect").reindex(aspects)
            left = x + i * width - 0.4 + width / 2
            ax.bar(left, g.agreement, width, yerr=g.agreement_err, label=name, capsize=1)
        first = ooo[ooo.name == top[0]].set_index("aspect").reindex(aspects)
        marks = ", ".join(sorted(ooo.judgements.dropna().unique())) if "judgements" in ooo else "?"
        ax.scatter(
            x, first.rater_agreement, marker="_", s=400, color="black", label="rater agreement Σy²", zorder=3
        )
        ax.scatter(x, first.ceiling, marker="_", s=400, color="red", label="ceiling max y", zorder=3)
        ax.axhline(100 / 3, color="grey", lw=0.8, ls="--")
        ax.set_xticks(x, aspects, rotation=30)
        ax.set_ylabel("agreement (%)")
        ax.legend(fontsize=6, ncol=3)
        ax.set_title(f"TPIPS odd-one-out agreement per aspect (judgements: {marks})", fontsize=9)
    buf = io.BytesIO()
    with warnings.catch_warnings():  # a released set's factor names in scripts the bundled font lacks: boxes
        warnings.filterwarnings("ignore", r"Glyph \d+ .* missing from font", UserWarning)
        fig.tight_layout()
        fig.savefig(buf, format="png")
    plt.close(fig)
    return buf.getvalue()
