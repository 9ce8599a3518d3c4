"""Why two backbone specs that differ only in input size get identical rows on some boards: FG-BMK and TPIPS
extract every backbone at their own input policy (their config), never at the spec's `input`. The boards
(terminal, results page) print this once, with the sizes in use."""

from __future__ import annotations

import os

SAME_ROWS = "two specs that differ only in `input` get identical rows here"


def family_input_notes(scale: str | None = None) -> dict[str, str]:
    """{family: the note} for the families whose input policy replaces the spec's, from their configs
    ($SOCO_FGBMK_CONFIG or assets/fgbmk.yaml at `scale`, assets/tpips.yaml); a family whose config does not load has no note."""
    notes = {}
    try:
        from soco_pipeline.tasks.fgbmk.config import load_config as fgbmk_config

        path = os.environ.get("SOCO_FGBMK_CONFIG") or None  # as defs/fgbmk reads it
        g = fgbmk_config(path, scale if scale in ("demo", "full") else None).global_features
        dense = f", dense-only backbones at {g.dense_input} px" if g.dense_input else ""
        notes["fgbmk"] = (
            f"input: FG-BMK's own policy for every backbone (resize {g.resize}, centre crop {g.crop}"
            f"{dense}; assets/fgbmk.yaml global_features), not the spec's `input`: {SAME_ROWS}"
        )
    except (ImportError, OSError, ValueError):
        pass
    try:
        from soco_pipeline.tasks.tpips.config import load_config as tpips_config

        size = tpips_config(os.environ.get("SOCO_TPIPS_CONFIG") or None).features.input_size  # as defs/tpips
        notes["tpips"] = (
            f"input: TPIPS extracts every backbone at {size} x {size} px (assets/tpips.yaml features.input_size), "
            f"not the spec's `input`: {SAME_ROWS}"
        )
    except (ImportError, OSError, ValueError):
        pass
    return notes
