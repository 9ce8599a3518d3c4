"""Benchmark the LVLM harness against the loopback chat-completions server with a fixed answer delay.

Prints items (requests) per second at concurrency 1 and 8 and their ratio; target: >= 6x at
concurrency 8 with a 50 ms answer delay (the harness must keep eight requests in flight, with
image reading, hashing, base64, JSON, caching and parsing in the way; best of 3 runs each, as this
shared machine's speed varies). The server runs in a child
process (as a real model server would; it reads each request but decodes nothing, so that its CPU
time does not count against the harness on a small machine), started here and stopped by its pid; the images are two
768 px JPEG photos per item (crops of scikit-image's bundled photographs).

    .venv/bin/python benchmarks/bench_lvlm.py [--items 160] [--delay-ms 50] [--seed 0]
"""

from __future__ import annotations

import argparse
import io
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
from PIL import Image

from soco_pipeline.lvlm.backends.openai import OpenAIBackend
from soco_pipeline.lvlm.cache import AnswerCache
from soco_pipeline.lvlm.run import run_model
from soco_pipeline.lvlm.server import HttpReply, serve
from soco_pipeline.lvlm.specs import parse_spec
from soco_pipeline.storage import write_bytes_atomic


def synthetic_items(root: Path, n: int, seed: int) -> pd.DataFrame:
    """n vis-setting rows with two 768 px JPEG photos each (distinct seeded crops, like rendered items)."""
    from skimage import data

    rng = np.random.default_rng(seed)
    photos = [Image.fromarray(f()).convert("RGB") for f in (data.astronaut, data.coffee, data.chelsea)]
    paths = []
    for i in range(2 * n):
        photo = photos[i % len(photos)]
        w, h = photo.size
        x0, y0 = int(rng.integers(0, w // 4)), int(rng.integers(0, h // 4))
        img = photo.crop((x0, y0, x0 + 3 * w // 4, y0 + 3 * h // 4)).resize(
            (768, 576), Image.Resampling.LANCZOS
        )
        buf = io.BytesIO()
        img.save(buf, format="JPEG", quality=95)
        p = str(root / f"img_{i:05d}.jpg")
        write_bytes_atomic(p, buf.getvalue())
        paths.append(p)
    return pd.DataFrame(
        {
            "setting": "vis",
            "index": np.arange(n),
            "g_index": np.arange(n) // 4,
            "qid": [f"q{i // 4}" for i in range(n)],
            "rotation": np.arange(n) % 4,
            "pair_id": "p",
            "level": "intra",
            "pair_group": "car",
            "supercategory": "transportation",
            "src_keypoint": "k",
            "question": "Which candidate point corresponds to the red keypoint?",
            "A": "Point A",
            "B": "Point B",
            "C": "Point C",
            "D": "Point D",
            "answer": rng.choice(list("ABCD"), n),
            "src_render": paths[0::2],
            "trg_render": paths[1::2],
        }
    )


def serve_forever(delay: float) -> None:
    """The child: serve a fixed answer after `delay` seconds; print the URL; run until killed."""

    def answer(request, body):
        return HttpReply(200, b'{"choices": [{"message": {"content": "B"}}]}', delay_s=delay)

    with serve(answer, decode=False) as srv:  # a model server runs elsewhere: spend no CPU decoding
        print(srv.base_url, flush=True)
        while True:
            time.sleep(3600)


def main() -> None:
    """Run the harness at concurrency 1 and 8 against a server that answers after a fixed delay."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--items", type=int, default=160)
    ap.add_argument("--delay-ms", type=float, default=50.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeats", type=int, default=3, help="best of this many runs per concurrency")
    ap.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    delay = args.delay_ms / 1000
    if args.serve:
        serve_forever(delay)
        return

    child = subprocess.Popen(
        [sys.executable, __file__, "--serve", "--delay-ms", str(args.delay_ms)],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ},
    )
    try:
        base_url = child.stdout.readline().strip()
        if not base_url.startswith("http://127.0.0.1:"):
            raise RuntimeError(f"the server child did not start (said {base_url!r})")
        run_bench(base_url, args.items, args.seed, delay, args.repeats)
    finally:
        os.kill(child.pid, signal.SIGTERM)
        child.wait(timeout=30)


def run_bench(base_url: str, n_items: int, seed: int, delay: float, repeats: int = 3) -> None:
    """Time the harness at concurrency 1 and 8 and print the figures."""
    with tempfile.TemporaryDirectory() as tmp:
        items = synthetic_items(Path(tmp), n_items, seed)
        rates = {}
        for conc in (1, 8):
            spec = parse_spec(
                {
                    "backend": "openai",
                    "model": "bench",
                    "base_url": base_url,
                    "max_concurrency": conc,
                    "settings": ["vis"],
                },
                f"bench_c{conc}",
            )
            times = []
            for rep in range(repeats):  # a fresh cache each time: every item is asked
                cache = AnswerCache(str(Path(tmp) / f"cache_{conc}_{rep}"))
                t0 = time.perf_counter()
                res = run_model(items, spec, OpenAIBackend(spec), cache)
                times.append(time.perf_counter() - t0)
                assert res.errors == 0 and res.sent == len(items)
            dt = min(times)
            rates[conc] = len(items) / dt
            print(
                f"concurrency {conc}: {len(items)} items in {dt:.2f} s (best of {repeats}) = {rates[conc]:.1f} "
                f"items/s (ideal {conc / delay:.1f})",
                flush=True,
            )
        ratio = rates[8] / rates[1]
        print(
            f"speed-up at concurrency 8: {ratio:.2f}x (target >= 6x) {'OK' if ratio >= 6 else 'BELOW TARGET'}"
        )


if __name__ == "__main__":
    main()
