"""`soco export-results MODEL OUT --format record --family mmvm|fgbmk|tpips`: a task family's results record
(evaluation/family_records.py), rebuilt from the stored tables; MODEL is a backbone or an LVLM spec."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from soco_pipeline.settings import Settings


def family_config(settings: Settings, family: str) -> Any:
    """The family config the run used (the same files and variables as the family's assets read)."""
    if family == "mmvm":
        from soco_pipeline.tasks.mmvm.config import load_config

        return load_config(settings.mmvm_config_path)
    if family == "fgbmk":
        from soco_pipeline.tasks.fgbmk.config import load_config

        scale = settings.dataset_size if settings.dataset_size in ("demo", "full") else None
        return load_config(os.environ.get("SOCO_FGBMK_CONFIG") or None, scale)
    from soco_pipeline.tasks.tpips.config import load_config

    return load_config(os.environ.get("SOCO_TPIPS_CONFIG") or None)


def model_spec(settings: Settings, kind: str, model: str) -> tuple[dict, str]:
    """(the spec as a dict, its hash) of a backbone or LVLM spec file."""
    if kind == "backbone":
        from soco_pipeline.backbones import load_spec, spec_hash

        spec = load_spec(Path(settings.backbones_dir) / f"{model}.yaml")
    else:
        from soco_pipeline.lvlm.specs import load_spec, spec_hash

        spec = load_spec(Path(settings.lvlms_dir) / f"{model}.yaml")
    return spec.to_dict(), spec_hash(spec)


def record_for_family(settings: Settings, family: str, model: str) -> dict:
    """The results record of `model` in `family`, from its stored tables (validated against the schema)."""
    from soco_pipeline.evaluation.family_records import config_hash, family_record, load_family_tables

    kind, tables = load_family_tables(settings.tables_root, family, model)
    spec, spec_hash = model_spec(settings, kind, model)
    cfg = family_config(settings, family)
    return family_record(
        family=family,
        model=model,
        kind=kind,
        tables=tables,
        spec=spec,
        spec_hash=spec_hash,
        config=cfg.model_dump(mode="json"),
        config_hash=config_hash(cfg),
    )
