"""Run configs of a subset run, recorded in the materialization metadata (`subset`), and stage timings."""

import dagster as dg

from soco_pipeline.evaluation.subsets import SubsetRule


class EvalRunConfig(dg.Config):
    """Run config of a backbone's predictions: a deterministic subset (partial run) and prediction panels."""

    limit: int | None = None  # pairs per category (pair group); None = every evaluated pair
    pair_ids: list[str] = []  # explicit pair ids (intersected with `limit`)
    seed: int = 0  # order of the pairs `limit` keeps
    panels: int = 4  # prediction panels drawn for a seeded sample of pairs (0 = none)

    def rule(self) -> SubsetRule:
        """The subset rule of this config."""
        return SubsetRule(limit=self.limit, pair_ids=tuple(self.pair_ids), seed=self.seed)


class LvlmRunConfig(dg.Config):
    """Run config of an LVLM's answers: a deterministic subset of the items (a partial run)."""

    items_per_setting: int | None = None  # item groups (all four rotations) per setting; None = all
    item_ids: list[int] = []  # explicit item g_index values
    seed: int = 0

    def rule(self) -> SubsetRule:
        """The subset rule of this config."""
        return SubsetRule(
            items_per_setting=self.items_per_setting, item_ids=tuple(self.item_ids), seed=self.seed
        )


def latest_materialization(instance: dg.DagsterInstance, asset: str, partition: str):
    """The latest materialization record of one partition of `asset` (None when there is none)."""
    records = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=dg.AssetKey(asset), asset_partitions=[partition]), limit=1
    ).records
    return records[0] if records else None


def recorded_rule(instance: dg.DagsterInstance, asset: str, partition: str) -> SubsetRule:
    """The subset rule the latest materialization of `asset` for `partition` ran with (full when none)."""
    rec = latest_materialization(instance, asset, partition)
    if rec is None or rec.asset_materialization is None:
        return SubsetRule()
    value = rec.asset_materialization.metadata.get("subset")
    return SubsetRule.from_json(value.value if value is not None else "")


def recorded_subset(instance: dg.DagsterInstance, backbone: str) -> SubsetRule:
    """The subset rule the latest `predictions` materialization of `backbone` ran with (full when none)."""
    return recorded_rule(instance, "predictions", backbone)


def recorded_lvlm_subset(instance: dg.DagsterInstance, model: str) -> SubsetRule:
    """The subset rule the latest `lvlm_answers` materialization of `model` ran with (full when none)."""
    return recorded_rule(instance, "lvlm_answers", model)


def stage_timing(instance: dg.DagsterInstance, partition: str, stages) -> dict:
    """Wall time and GPU time (`gpu_s`, or null with `gpu_s_reason`) of each stage's latest step."""
    from soco_pipeline.runtime.gpu_time import stage_timing_entry

    out = {}
    for asset in stages:
        rec = latest_materialization(instance, asset, partition)
        if rec is None:
            continue
        stats = instance.get_run_step_stats(rec.run_id, step_keys=[asset])
        wall = (stats[0].end_time - stats[0].start_time) if stats and stats[0].end_time else None
        meta = rec.asset_materialization.metadata if rec.asset_materialization is not None else {}
        gpu = {k: meta[k].value for k in ("gpu_s", "gpu_s_reason") if k in meta}
        out[asset] = stage_timing_entry(wall, gpu, rec.run_id)
    return {"stages": out, "source": "dagster step stats (latest materialization of each stage)"}
