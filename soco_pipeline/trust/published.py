"""Published figures (assets/reference/published.csv) beside ours: per (family, metric), the published row
whose knobs differ least from ours, naming every knob that still differs."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from soco_pipeline.published_figures import (  # noqa: F401 - the table's names, re-exported for readers here
    KNOBS,
    PUBLISHED_COLUMNS,
    PUBLISHED_PATH,
    PublishedTableError,
    check_reference,
    load_published,
)

COMPARISON_COLUMNS = (
    "model reference family metric ours published difference published_setting differing_knobs "
    "comparison source"
).split()


def differing_knobs(ours: dict[str, str], published: pd.Series) -> list[str]:
    """The knobs where ours and a published row differ ('grid: ours X, published Y'); empty ones skipped."""
    out = []
    for knob in KNOBS:
        theirs, mine = str(published.get(knob, "") or ""), str(ours.get(knob, "") or "")
        if theirs and mine and theirs != mine:
            out.append(f"{knob}: ours {mine}, published {theirs}")
    return out


def closest_published(ours: dict[str, str], rows: pd.DataFrame) -> pd.Series | None:
    """The published row whose knobs differ least from ours (first on a tie, in file order); None when none."""
    if rows.empty:
        return None
    counts = [len(differing_knobs(ours, r)) for _, r in rows.iterrows()]
    return rows.iloc[counts.index(min(counts))]


def compare_to_published(
    ours: pd.DataFrame, references: dict[str, str], knobs: dict[str, dict[str, str]], published: pd.DataFrame
) -> pd.DataFrame:
    """Per model with a reference and (family, metric): ours, the closest published row and the gap."""
    rows = []
    for model, ref in sorted(references.items()):
        mine = ours[ours["model"] == model]
        theirs = published[published["model"] == ref]
        for r in mine.itertuples(index=False):
            cands = theirs[(theirs["family"] == r.family) & (theirs["metric"] == r.metric)]
            if cands.empty or pd.isna(r.value):
                continue
            pub = closest_published(knobs.get(model, {}), cands)
            why = differing_knobs(knobs.get(model, {}), pub)
            knob_names = ", ".join(d.split(":")[0] for d in why)
            text = (
                f"ours {r.value:.1f} ({knobs.get(model, {}).get('grid', '?')}), published {pub['value']:.1f} "
                f"({pub['setting']}): " + (f"{knob_names} differ" if why else "same protocol")
            )
            rows.append(
                {
                    "model": model,
                    "reference": ref,
                    "family": r.family,
                    "metric": r.metric,
                    "ours": float(r.value),
                    "published": float(pub["value"]),
                    "difference": float(r.value) - float(pub["value"]),
                    "published_setting": pub["setting"],
                    "differing_knobs": "; ".join(why),
                    "comparison": text,
                    "source": pub["source"],
                }
            )
    return pd.DataFrame(rows, columns=COMPARISON_COLUMNS)


def backbone_knobs(input_policy: str, input_value: int, layer: object, protocol) -> dict[str, str]:
    """Our resolved correspondence protocol in the published table's vocabulary."""
    grid = f"{input_policy}:{input_value}"
    prediction = (
        "soft_argmax"
        if protocol.soft_argmax
        else {"top_left": "patch_corner"}.get(protocol.prediction_point, protocol.prediction_point)
    )
    return {
        "input_size": grid,
        "grid": grid,
        "layer": "last" if str(layer) in ("-1", "last") else str(layer),
        "alpha": f"{protocol.headline_alpha:g}",
        "reduction": "official",
        "prediction": prediction,
    }


BOARD_LEVELS = ("cc", "soc", "soc_geo", "cross_soc", "cross_cc")


def board_values(board: pd.DataFrame, family: str) -> pd.DataFrame:
    """The backbone leaderboard's headline levels in long form (model, family, metric, value)."""
    name = "model" if "model" in board.columns else "backbone"
    cols = [c for c in BOARD_LEVELS if c in board.columns]
    long = board.melt(id_vars=[name], value_vars=cols, var_name="metric", value_name="value")
    return long.rename(columns={name: "model"}).assign(family=family)[["model", "family", "metric", "value"]]


def spec_references(specs_dir: str | Path, protocol) -> tuple[dict[str, str], dict[str, dict[str, str]]]:
    """{model: published reference} and our knobs per such model, from a folder's loadable specs."""
    from soco_pipeline.backbones.spec import BackboneSpecError, load_spec

    refs, knobs = {}, {}
    for path in sorted(Path(specs_dir).glob("*.yaml")):
        try:
            spec = load_spec(path)
        except (BackboneSpecError, OSError):
            continue
        if spec.reference:
            refs[spec.name] = spec.reference
            layer = dict(spec.options).get("layer", "")
            knobs[spec.name] = backbone_knobs(spec.input.policy, spec.input.value, layer, protocol)
    return refs, knobs


def published_columns(board: pd.DataFrame, comparison: pd.DataFrame, family: str) -> pd.DataFrame:
    """The `family` board with `reference`, `soc_published`, `soc_vs_published` and `published_note`."""
    name = "model" if "model" in board.columns else "backbone"
    soc = comparison[(comparison["family"] == family) & (comparison["metric"] == "soc")].set_index("model")
    out = board.copy()
    out["reference"] = out[name].map(soc["reference"]).fillna("")
    out["soc_published"] = out[name].map(soc["published"])
    out["soc_vs_published"] = out[name].map(soc["difference"])
    out["published_note"] = out[name].map(soc["comparison"]).fillna("")
    return out


BOARD_PUBLISHED = ("reference", "soc_published", "soc_vs_published", "published_note")  # published_columns'


def summary_published(summary: pd.DataFrame, board: pd.DataFrame | None, family: str) -> pd.DataFrame:
    """`model_summary` with `published_columns`' columns of `family`'s board, prefixed with the family."""
    figures = [f"{family}_published", f"{family}_vs_published"]
    renamed = dict(zip(BOARD_PUBLISHED, ["reference", *figures, "published_note"], strict=True))
    if board is not None and "reference" in board.columns:
        name = "model" if "model" in board.columns else "backbone"
        cols = board.drop_duplicates(name).set_index(name)[list(renamed)].rename(columns=renamed)
    else:
        cols = pd.DataFrame(columns=list(renamed.values()))
    out = summary.drop(columns=list(renamed.values()), errors="ignore").join(cols, on="model")
    text = ["reference", "published_note"]
    out[text] = out[text].fillna("").astype(str)
    out[figures] = out[figures].astype(float)
    return out
