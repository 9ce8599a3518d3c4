"""What a sweep over one model's knobs costs (issue 53): copies of a spec that change only `layer` or only
`input` against a copy with another seed, which nothing can reuse.

Set-up: a fresh storage and Dagster instance under a temporary folder; a warm-up `soco run` of
oracle_concept materializes the data, pairs and every family's items on the demo set. Then `soco run` of
the base spec (`--spec`, default the nearly free random ViT-Ti/16 of bench_model_cost.py), and of each copy
in a process of its own, one after the other: `layer` -4 and -7, `input` 128, `normalisation` raw, and
`seed` 1 (the control). A layer or input copy reuses FG-BMK's and TPIPS's rows and SOCO's global features;
the normalisation copy reuses FG-BMK's and the global features (docs/results.md, "What a per-model table is
cached by"); the seed copy computes every family.

Prints, per copy, the `soco run` wall time, the seconds of its partition's steps per family, and the
families whose rows `soco run` reported as reused; then `nproc` and the load average before and after.

    .venv/bin/python benchmarks/bench_sweep.py [--spec benchmarks/specs/vit_tiny_random.yaml] [--keep DIR]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import tempfile
import time
from pathlib import Path

import yaml
from bench_model_cost import NEAR_FREE, ROOT, bench_storage, load_average, soco_run, soco_run_output, split

COPIES = {
    "layer -4": {"layer": -4},
    "layer -7": {"layer": -7},
    "input 128": {"input": {"nearest_multiple": 128}},
    "norm raw": {
        "normalisation": "raw"
    },  # FG-BMK normalises with its policy's preset; TPIPS reads the spec's
}
CONTROL = {"seed 1": {"seed": 1}}
FAMILIES = "soco,mmvm,fgbmk,tpips"


def reused_families(out: str) -> list[str]:
    """The families whose step line says `rows reused from <model>`."""
    return sorted(set(re.findall(r"\] (\w+) / backbone \S+: rows reused from", out)))


def line(label: str, wall: float, cost: dict, out: str) -> str:
    """One copy's figures as a line."""
    fams = " ".join(f"{f} {r['forward'] + r['other']:.1f}" for f, r in sorted(cost["families"].items()))
    return f"  {label:10s} soco run {wall:5.1f} s; steps per family (s): {fams}; reused: {', '.join(reused_families(out)) or 'none'}"


def main() -> None:
    """Warm up, run the base spec, then each copy; print a line per copy."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spec", default=NEAR_FREE, help="the base spec (a path)")
    parser.add_argument("--keep", help="use (and keep) this folder instead of a temporary one")
    args = parser.parse_args()
    tmp = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="soco-bench-sweep-"))
    try:
        home, specs, env = bench_storage(tmp)
        print(f"nproc {os.cpu_count()}; load average {load_average()} before")
        warm = specs / "oracle_concept.yaml"
        shutil.copy(ROOT / "assets" / "backbones" / "oracle_concept.yaml", warm)
        print(f"warm-up (oracle_concept: data, pairs, items): {soco_run(env, warm, FAMILIES):.1f} s")
        base = yaml.safe_load((ROOT / args.spec).read_text())
        print(f"base {args.spec}, then copies of it that change one knob, each in a soco run of its own:")
        for label, edit in {"base": {}, **COPIES, **CONTROL}.items():
            spec = specs / f"sweep_{re.sub(r'[^a-z0-9]+', '_', label)}.yaml"
            spec.write_text(yaml.safe_dump({**base, **edit}))
            since = time.time()
            wall, out = soco_run_output(env, spec, FAMILIES)
            print(line(label, wall, split(home, spec.stem, since), out))
        print(f"load average {load_average()} after")
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
