"""TPIPS's declaration (tasks/__init__.py): its config, headline, results record and regression watch."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from soco_pipeline.tasks import SAME_ROWS, FamilySpec
from soco_pipeline.tasks.tpips.config import load_config
from soco_pipeline.trust import family_records as fr
from soco_pipeline.trust.family_watch import FamilyWatch, PairedOn
from soco_pipeline.trust.headline import Headline

TABLES = fr.FamilyTables(
    ("tpips_ooo", "tpips_afc"), ("tpips_baseline_scores", "tpips_learned"), ("tpips_lvlm_answers",)
)
PAIRED = PairedOn(
    table=("tpips_baseline_outcomes", "tpips_learned_outcomes"),
    sample=("triplet_id", "aspect"),
    outcome="agreement",
    samples="tpips_ooo",
    group="aspect",
    cluster="triplet_id",
    method="method",
    prefix="ooo",
    binary=False,
)


def record_parts(model: str, kind: str, t: dict[str, pd.DataFrame], n_boot: int) -> dict[str, Any]:
    """TPIPS: agreement per method on the OOO test split and each 2AFC source (stored aggregates, 2 SE)."""
    names = TABLES.backbone if kind == "backbone" else TABLES.lvlm
    s = pd.concat([t[n] for n in names if n in t], ignore_index=True)
    s = s[(s["method"] != "n/a") & (s["aspect"] == "all")]
    if s.empty:
        raise fr.NotApplicableError(f"{model!r} has no TPIPS score (not applicable, or not materialized)")
    per_aspect = t["tpips_ooo"]["aspect"].nunique()
    intervals = fr.aggregate_rows(
        model,
        s["eval"] + "/" + s["method"],
        s["agreement"],
        se=s["agreement_err"] / 2,
        n_units=s["n"],
        n_categories=np.where(s["eval"] == "ooo", per_aspect, 1),
    )
    ooo = t["tpips_ooo"][t["tpips_ooo"]["split"] == "test"]
    afc = t["tpips_afc"]
    ooo_ids = ooo["triplet_id"].astype(str) + "/" + ooo["aspect"].astype(str)
    o_s, o_t = fr.hash_block(
        "ooo", ooo_ids, fr.row_hashes(ooo, ["triplet_id", "image_0", "image_1", "image_2", "aspect", "votes"])
    )
    a_s, a_t = fr.hash_block(
        "afc", afc["item_id"], fr.row_hashes(afc, ["item_id", "ref", "x0", "x1", "aspect", "votes"])
    )
    first = s.groupby("eval")["n"].max()
    return {
        "intervals": intervals,
        "n_samples": {
            "ooo": {"requested": len(ooo), "evaluated": int(first.get("ooo", 0))},
            "afc": {"requested": len(afc), "evaluated": int(first.get("afc:all", 0))},
        },
        "sample_hashes": {**o_s, **a_s},
        "task_hashes": {**o_t, **a_t},
    }


def input_note(cfg) -> str:
    """TPIPS extracts every backbone at its own input size (the config's `features.input_size`)."""
    size = cfg.features.input_size
    return (
        f"input: TPIPS extracts every backbone at {size} x {size} px (assets/tpips.yaml features.input_size), "
        f"not the spec's `input`: {SAME_ROWS}"
    )


SPEC = FamilySpec(
    "tpips",
    "TPIPS: aspect-conditioned perceptual similarity (OOO agreement)",
    lambda path, settings: load_config(path),
    headline=Headline(
        values=("ooo",),
        label="TPIPS odd-one-out agreement (test split)",
        where="method != 'n/a'",
        best_of="method",
        half_width="ooo_err",
        simulated="judgements",  # the board's marker: simulated for generated data, the source's otherwise
        control="model == 'pixels'",  # the pixel baselines (random, constant, L2, SSIM) are no model
        ceiling="model == 'pixels' and method == 'oracle'",  # the aspect-distance oracle: TPIPS's ceiling
    ),
    record=TABLES,
    parts=record_parts,
    columns=("model", "method", "conditioned", "ooo", "ooo_err", "consensus"),
    input_note=input_note,
    simulated_note="TPIPS triplets and votes (simulated annotators, never people)",
    watch=FamilyWatch(
        family="tpips",
        headline="TPIPS odd-one-out agreement per method (test split)",
        metrics=r"ooo/.+",
        per_model=(
            "tpips_baseline_scores",
            "tpips_learned",
            "tpips_baseline_outcomes",
            "tpips_learned_outcomes",
        ),
        samples=("tpips_ooo", "tpips_afc"),
        paired=PAIRED,
    ),
)
