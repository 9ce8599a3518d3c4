"""The three task families' share of `make demo`: their runs, timed, on a fresh storage and instance.

Set-up: the demo's own run loop (`soco_pipeline.cli.demo.run_families`, one Dagster run per stage through an
instance, as `make demo` launches them) over every backbone spec in assets/backbones/, on an empty
storage under a temporary folder; no SOCO stage runs first (the families render their own images and
extract through their own caches). Prints each stage's wall time, each family's total, the sum against
the wave-3 target (under 180 s for all three), `nproc` and the load average before and after.

    .venv/bin/python benchmarks/bench_families.py [--families mmvm,fgbmk,tpips]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

TARGET_S = 180.0


def main() -> None:
    """Run the families' demo stages on a fresh storage and print their times."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--families", default="mmvm,fgbmk,tpips")
    args = parser.parse_args()
    wanted = args.families.split(",")
    with tempfile.TemporaryDirectory(prefix="soco-bench-families-") as tmp:
        home, storage = Path(tmp) / "dagster", Path(tmp) / "storage"
        home.mkdir(parents=True)
        root = Path(__file__).resolve().parent.parent
        (home / "dagster.yaml").write_text(
            (root / "dagster.yaml").read_text().replace("@STORAGE@", str(storage))
        )
        os.environ["DAGSTER_HOME"] = str(home)
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        import dagster as dg

        from soco_pipeline.backbones.spec_files import scan_specs
        from soco_pipeline.cli.demo import LOCATION, Runner, families, run_families
        from soco_pipeline.defs.definitions import build_definitions

        overrides = {"storage": str(storage)}
        defs = build_definitions(**overrides)
        soco = defs.resources["soco"]
        backbones = sorted(scan_specs(Path(soco.backbones_dir))[0])
        exclude = [f.name for f in families(defs) if f.name not in wanted]
        print(
            f"nproc {os.cpu_count()}; load average {' '.join(f'{x:.2f}' for x in os.getloadavg())} before; "
            f"backbones {backbones}; families {wanted}"
        )
        times: list[tuple[str, float]] = []
        last = [time.perf_counter()]

        def log(message: str) -> None:
            if message.endswith(" ..."):
                last[0] = time.perf_counter()
                times.append((message[:-4], float("nan")))
            elif message.strip().startswith(("done in", "FAILED")):
                times[-1] = (times[-1][0], time.perf_counter() - last[0])
            print(message, flush=True)

        with dg.DagsterInstance.get() as instance:
            instance.add_dynamic_partitions("backbones", backbones)
            runner = Runner(defs, instance, overrides, LOCATION, log)
            t0 = time.perf_counter()
            run_families(defs, runner, backbones, lvlms=[], exclude=exclude)
            total = time.perf_counter() - t0
        per_family = {name: sum(t for label, t in times if label.split(" ")[0] == name) for name in wanted}
        for name, t in per_family.items():
            print(f"{name:>6}: {t:6.1f} s")
        verdict = "under" if total < TARGET_S else "over"
        print(
            f"{' + '.join(wanted)}: {total:.1f} s wall ({verdict} the {TARGET_S:.0f} s target for all three); "
            f"failed: {runner.failed or 'none'}"
        )
        print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())} after")


if __name__ == "__main__":
    main()
