"""The family's items from its configured source (docs/mmvm.md, "Source"): generated, or an official layout as
the test split beside a generated training split; skipped rows go to `<work_root>/skipped_rows.txt`."""

from __future__ import annotations

from collections.abc import Callable

import pandas as pd

from soco_pipeline.storage import join, write_bytes_atomic
from soco_pipeline.tasks.mmvm.config import MmvmConfig
from soco_pipeline.tasks.mmvm.generator import generate
from soco_pipeline.tasks.mmvm.official import import_match_bench, import_vlmevalkit
from soco_pipeline.tasks.mmvm.prompt import ITEM_COLUMNS, build_items

SKIPPED_NAME = "skipped_rows.txt"


def _training_split(cfg: MmvmConfig, root: str) -> dict[str, pd.DataFrame]:
    """The generated training cases only (the reference of an import)."""
    # model_copy skips validation on purpose: test = 0 cases is no valid config, only this call's request
    return generate(cfg.model_copy(update={"cases": cfg.cases.model_copy(update={"test": 0})}), root)


def _imported(cfg: MmvmConfig, work_root: str, log: Callable[[str], None]) -> dict[str, pd.DataFrame]:
    src = cfg.source
    if src.kind == "match_bench":
        tsv = src.tsv if src.tsv is None or "://" in src.tsv else str(src.resolved() / src.tsv)
        return import_match_bench(src.uri(), join(work_root, "imported"), tsv=tsv)
    skipped: list[str] = []
    items = import_vlmevalkit(src.uri(), join(work_root, "imported", "frames"), skipped=skipped)
    write_bytes_atomic(join(work_root, SKIPPED_NAME), "".join(f"{s}\n" for s in skipped).encode())
    if skipped:
        log(
            f"MMVM source {src.uri()}: {len(skipped)} row(s) skipped as VLMEvalKit skips them: "
            + "; ".join(skipped)
        )
    cases = pd.DataFrame(
        {
            "case_id": items["case_id"],
            "split": "test",
            "index": range(len(items)),
            "match_type": items["match_type"],
            "query_absent": items["query_absent"],
            "n_total": items["n_candidates"],
            "family": "",
            "frame0": "mmvm/" + items["case_id"] + "/frame0",
            "frame1": "mmvm/" + items["case_id"] + "/frame1",
            "match_attributes": "{}",
            "data_source": items["data_source"],
        }
    )
    return {"cases": cases, "images": pd.DataFrame(), "objects": pd.DataFrame(), "items": items}


def load_scenes(
    cfg: MmvmConfig, work_root: str, log: Callable[[str], None] = lambda _m: None
) -> dict[str, pd.DataFrame]:
    """{"cases", "images", "objects"} of the configured source (an import is the test split, beside train)."""
    if cfg.source.kind == "generated":
        return generate(cfg, work_root)
    imported = _imported(cfg, work_root, log)
    train = _training_split(cfg, work_root)
    return {
        name: pd.concat([imported[name], train[name]], ignore_index=True)
        for name in ("cases", "images", "objects")
    }


def source_items(
    cfg: MmvmConfig,
    cases: pd.DataFrame,
    objects: pd.DataFrame,
    images: pd.DataFrame,
    marked_root: str,
    work_root: str,
    log: Callable[[str], None] = lambda _m: None,
) -> pd.DataFrame:
    """The items of the configured source: built from generated cases, imported items first."""
    generated = cases["data_source"].astype(str).str.startswith("simulated").to_numpy()
    built = build_items(cases[generated], objects, images, cfg, marked_root)
    if cfg.source.kind == "generated":
        return built
    imported = _imported(cfg, work_root, lambda _m: None)["items"]
    return pd.concat([imported[ITEM_COLUMNS], built], ignore_index=True)
