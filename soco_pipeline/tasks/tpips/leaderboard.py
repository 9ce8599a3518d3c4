"""The TPIPS leaderboard (agreement per aspect on the OOO test split beside the consensus ceiling) and the
agreement-per-aspect-per-model bar chart (the shape of the paper's Fig. 5)."""

from __future__ import annotations

import io

import numpy as np
import pandas as pd


def leaderboard(scores: pd.DataFrame) -> pd.DataFrame:
    """One row per (model, method): OOO agreement overall and per aspect, consensus, 2AFC per source."""
    cols = ["model", "method", "conditioned", "ooo", "ooo_err", "consensus"]
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
    wide["consensus"] = base.consensus
    afc = ok[ok["eval"].str.startswith("afc:") & (ok.aspect == "all")]
    if len(afc):
        wide = wide.join(
            afc.pivot_table(index=["model", "method", "conditioned"], columns="eval", values="agreement")
        )
    out = wide.reset_index().sort_values("ooo", ascending=False, kind="stable")
    # every per-backbone score asset (frozen baselines, learned metrics) writes the same "not applicable" row
    # for a backbone that cannot see TPIPS images: list each model once
    na = scores[scores.method == "n/a"][["model", "method", "note"]].drop_duplicates("model")
    out = pd.concat([out, na], ignore_index=True)
    first = [c for c in cols if c in out.columns]
    return out[first + [c for c in out.columns if c not in first]].reset_index(drop=True)


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
        top = (
            ooo[ooo.aspect == "all"].sort_values("agreement", ascending=False).name.head(max_models).tolist()
        )
        aspects = sorted(a for a in ooo.aspect.unique() if a != "all") + ["all"]
        width = 0.8 / max(len(top), 1)
        x = np.arange(len(aspects))
        for i, name in enumerate(top):
            g = ooo[ooo.name == name].set_index("aspect").reindex(aspects)
            ax.bar(
                x + i * width - 0.4 + width / 2,
                g.agreement,
                width,
                yerr=g.agreement_err,
                label=name,
                capsize=1,
            )
        cons = ooo[ooo.name == top[0]].set_index("aspect").reindex(aspects).consensus
        ax.scatter(x, cons, marker="_", s=400, color="black", label="consensus (simulated)", zorder=3)
        ax.axhline(100 / 3, color="grey", lw=0.8, ls="--")
        ax.set_xticks(x, aspects, rotation=30)
        ax.set_ylabel("agreement (%)")
        ax.legend(fontsize=6, ncol=3)
        ax.set_title("TPIPS odd-one-out agreement per aspect (simulated judgements)", fontsize=9)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return buf.getvalue()
