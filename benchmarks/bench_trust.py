"""Figures of the trust tooling (docs/results.md) on a small embedded set with the two oracles: headline
values with both 95% CIs beside the concept oracle's theory value, the paired comparison, the time the
record (hashing, bootstrap) takes, and the record's size.

    .venv/bin/python benchmarks/bench_trust.py [--categories car,bus,chair,dog,horse,tractor] [--images 6]
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path

import dagster as dg
import pandas as pd

from soco_pipeline.defs.definitions import build_definitions
from soco_pipeline.evaluation import stats
from soco_pipeline.evaluation.protocol import load_protocol
from soco_pipeline.storage import PROJECT_ROOT
from tests.soco_theory import expected_concept_oracle_soc

ORACLES = ["oracle_part", "oracle_concept"]
QUIET = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--categories", default="car,bus,tractor,chair,dog,horse")
    ap.add_argument("--images", type=int, default=6)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        (tmp / "backbones").mkdir()
        for b in ORACLES:
            shutil.copy(PROJECT_ROOT / "assets" / "backbones" / f"{b}.yaml", tmp / "backbones")
        (tmp / "home").mkdir()
        with dg.instance_for_test(temp_dir=str(tmp / "home")) as instance:
            instance.add_dynamic_partitions("backbones", ORACLES)
            defs = build_definitions(
                storage_root=str(tmp / "storage"),
                backbones_dir=str(tmp / "backbones"),
                categories=args.categories.split(","),
                images_per_category=args.images,
                device="cpu",
            )

            def mat(keys, partition=None):
                sel = dg.AssetSelection.assets(*keys) if isinstance(keys, list) else keys
                assert dg.materialize(
                    list(defs.assets),
                    selection=sel,
                    instance=instance,
                    resources=defs.resources,
                    partition_key=partition,
                    run_config=QUIET,
                ).success

            mat(dg.AssetSelection.groups("data", "pairs"))
            for b in ORACLES:
                mat(["feature_manifest", "predictions", "four_choice_predictions", "metrics"], b)
                t0 = time.perf_counter()
                mat(["results_record"], b)
                rec_path = tmp / "storage" / "results" / "records" / f"{b}.json"
                print(
                    f"{b}: results_record {time.perf_counter() - t0:.1f} s (Dagster run included), "
                    f"{rec_path.stat().st_size / 1024:.0f} KiB"
                )
            t = tmp / "storage" / "tables"
            read = pd.read_parquet
            pairs = read(t / "image_pairs.parquet")
            common = [
                read(t / "correspondences.parquet"),
                read(t / "keypoints.parquet"),
                read(t / "image_set.parquet"),
            ]
            theory = expected_concept_oracle_soc(common[0], pairs, common[1], common[2], alpha=0.1)
            scores = {
                b: stats.backbone_scores(
                    read(t / "predictions" / f"{b}.parquet"),
                    read(t / "four_choice_predictions" / f"{b}.parquet"),
                    *common,
                    pairs,
                    load_protocol(),
                )
                for b in ORACLES
            }
            for b in ORACLES:
                ci = stats.intervals(scores[b]).set_index("metric")
                for m in ("cc", "soc", "soc_geo", "cross_soc", "four_choice"):
                    r = ci.loc[m]
                    print(
                        f"{b:15s} {m:12s} {r.value:6.1f}  boot_category [{r.ci95_lo_boot_category:5.1f}, "
                        f"{r.ci95_hi_boot_category:5.1f}]  cluster_image_logit [{r.ci95_lo_cluster_image_logit:5.1f}, "
                        f"{r.ci95_hi_cluster_image_logit:5.1f}]  pairs {r.n_units}"
                    )
            print(f"concept oracle SOC theory (tests/soco_theory.py): {theory:.1f}")
            overall, _ = stats.compare(scores["oracle_part"], scores["oracle_concept"])
            print(
                json.dumps(
                    overall.set_index("metric")[
                        ["delta", "ci95_lo_boot_category", "ci95_hi_boot_category", "sign_test_p"]
                    ]
                    .round(4)
                    .to_dict("index"),
                    indent=1,
                )
            )


if __name__ == "__main__":
    main()
