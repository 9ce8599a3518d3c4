"""`soco export-results MODEL OUT --format record [--family F | --lvlm]`: MODEL's record in any declared
family (`all_specs()`), rebuilt from the stored tables by one route, `record_for`."""

from __future__ import annotations

import importlib
from pathlib import Path

from soco_pipeline.settings import Settings


def model_spec(settings: Settings, kind: str, model: str) -> tuple[dict, str]:
    """(the spec as a dict, its hash) of a backbone or LVLM spec file."""
    if kind == "backbone":
        from soco_pipeline.backbones import load_spec, spec_hash

        spec = load_spec(Path(settings.backbones_dir) / f"{model}.yaml")
    else:
        from soco_pipeline.lvlm.specs import load_spec, spec_hash

        spec = load_spec(Path(settings.lvlms_dir) / f"{model}.yaml")
    return spec.to_dict(), spec_hash(spec)


def record_for(
    settings: Settings, family: str, model: str, lvlm: bool = False, protocol_path: str | None = None
) -> dict:
    """The validated results record of `model` in `family`, rebuilt from its stored tables."""
    from soco_pipeline.tasks.core import LVLM_FAMILY, SOCO, all_specs
    from soco_pipeline.trust.family_records import config_hash, family_record, load_family_tables

    specs = all_specs()
    declared = LVLM_FAMILY if lvlm and family == SOCO.name else specs.get(family)
    if declared is None or not (declared.rebuild or (declared.record and declared.parts)):
        raise ValueError(f"no results record of family {family!r}: use {', '.join(specs)}")
    if declared.rebuild:
        module, _, function = declared.rebuild.partition(":")
        rebuild = getattr(importlib.import_module(module), function)
        return rebuild(settings, declared.record_name or declared.name, model, protocol_path)
    kind, tables = load_family_tables(settings.tables_root, family, declared.record, model)
    spec, spec_hash = model_spec(settings, kind, model)
    cfg = declared.config(settings)
    record = family_record(
        family=declared.record_name or family,
        parts=declared.parts,
        model=model,
        kind=kind,
        tables=tables,
        spec=spec,
        spec_hash=spec_hash,
        config=cfg.model_dump(mode="json"),
        config_hash=config_hash(cfg),
    )
    reused = reused_tables(family, model) if kind == "backbone" else {}
    if reused:  # docs/results.md "What a per-model table is cached by"
        record["reused_from"] = reused
    return record


def reused_tables(family: str, model: str) -> dict[str, str]:
    """{table: the model whose rows it reused} of `model`'s tables in `family`."""
    from soco_pipeline.settings import env_value, variable

    if not (variable("DAGSTER_HOME") and env_value("storage_root")):
        return {}  # no project instance to read (the `soco` command always has one)
    import dagster as dg

    from soco_pipeline.cli.project import prepare_instance
    from soco_pipeline.tasks import family_specs

    prepare_instance()  # DAGSTER_HOME: the Makefile's default has its dagster.yaml
    out = {}
    with dg.DagsterInstance.get() as instance:
        for table in family_specs()[family].record.backbone:
            records = instance.fetch_materializations(
                dg.AssetRecordsFilter(asset_key=dg.AssetKey(table), asset_partitions=[model]), limit=1
            ).records
            meta = records[0].event_log_entry.asset_materialization.metadata if records else {}
            source = getattr(meta.get("reused_from"), "value", None)
            if source and source != model:
                out[table] = str(source)
    return out
