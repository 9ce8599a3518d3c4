"""The LVLM family on the demo's first screen: loopback reference answerers (lvlm/loopback.py: an oracle and a
seeded random one) behind ordinary `openai` specs, materialized to lvlm_leaderboard and stopped by pid (also
on Ctrl-C); SOCO_DEMO_LVLM=0 skips it, a fresh selection (cli/freshness) is reported cached."""

from __future__ import annotations

import time

import dagster as dg
import pandas as pd

from soco_pipeline.settings import variable

EXPECTED = "expected: oracle 100 / 100, random ~25 / ~0.39 (average / circular accuracy)"


def lvlm_demo_enabled() -> bool:
    """False when SOCO_DEMO_LVLM=0 (skip the LVLM block of the demo)."""
    return variable("SOCO_DEMO_LVLM") != "0"


def run_lvlm_demo(instance: dg.DagsterInstance, log=print, **overrides) -> pd.DataFrame:
    """Evaluate the loopback answerers through Dagster and return the LVLM leaderboard table."""
    from soco_pipeline.cli.freshness import SETTINGS_TAG, Freshness, observe_sources, settings_fingerprint
    from soco_pipeline.defs.definitions import build_definitions
    from soco_pipeline.defs.shared.resources import SocoSettings
    from soco_pipeline.lvlm.loopback import loopback_answerers
    from soco_pipeline.storage import join, read_parquet
    from soco_pipeline.trust.roles import demo_lvlm_specs

    soco = SocoSettings(**overrides)
    settings = soco.settings()
    specs_dir = demo_lvlm_specs(settings.storage_root)  # the summary reads their roles there
    with loopback_answerers(settings.tables_root, specs_dir, seed=settings.seed) as lb:
        defs = build_definitions(**{**overrides, "lvlms_dir": str(specs_dir)})
        known = set(instance.get_dynamic_partitions("lvlms"))
        instance.add_dynamic_partitions("lvlms", [m for m in lb.models if m not in known])
        observe_sources(instance, defs.resources["soco"])  # an edited template is a new spec version
        freshness = Freshness(defs, instance)
        # The block's runs carry the demo's settings fingerprint (its settings without the folder override):
        # the folder is demo_lvlm_specs(storage root), which the fingerprint holds, and each spec in it is
        # versioned by lvlm_spec. So the demo's summary stage, which this block makes again, is fresh next time.
        freshness.fingerprint = settings_fingerprint(dg.Definitions(resources={"soco": soco}))

        def mat(selection, partition=None):
            keys = [dg.AssetKey(k) for k in selection]
            label = f"LVLM {partition or ', '.join(selection)}"
            if freshness.fresh(keys, partition):
                log(f"  {label}: cached, skipped")
                return
            result = dg.materialize(
                list(defs.assets),
                selection=dg.AssetSelection.assets(*keys),
                instance=instance,
                resources=defs.resources,
                partition_key=partition,
                tags={SETTINGS_TAG: freshness.fingerprint},
                run_config={"loggers": {"console": {"config": {"log_level": "WARNING"}}}},
            )
            assert result.success

        t0 = time.perf_counter()
        log(f"LVLM reference answerers at {lb.base_url} (pid {lb.pid}) ...")
        mat(["lvlm_items"])
        for m in lb.models:
            mat(["lvlm_answers", "lvlm_metrics", "lvlm_results_record"], m)
        # the SQL views, the summary and the results page gain the LVLM board and examples
        mat(["lvlm_leaderboard", "model_headlines", "model_summary", "results_database", "results_report"])
        log(f"  done in {time.perf_counter() - t0:.1f} s ({lb.requests()} model calls)")
    return read_parquet(join(settings.tables_root, "lvlm_leaderboard.parquet"))
