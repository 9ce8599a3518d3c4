"""Faults injected for real, one row each: did the pipeline survive, how many rows were lost, time to recover.

    .venv/bin/python benchmarks/bench_faults.py                 # every fault (about 3-5 minutes on 2 cores)
    .venv/bin/python benchmarks/bench_faults.py --skip-crash    # without the kill -9 of a whole demo run
    .venv/bin/python benchmarks/bench_faults.py --only "class token" --only "disk full"   # some rows only

"rows lost" counts rows of published tables that are missing or extra after the fault and the recovery,
against what a fault-free run publishes (must be 0). "time to recover" is the wall time of the recovery
action (the next write, the re-extraction, the next run ...). Uses the fault helpers of tests/faults.py
(child processes killed by pid, every wait under a deadline).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pandas as pd

PROJECT_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(PROJECT_ROOT))  # tests.faults: the same injections the tests use
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("DAGSTER_DISABLE_TELEMETRY", "1")

from soco_pipeline.report.results_db import ResultsError, query, refresh_views  # noqa: E402
from soco_pipeline.storage import StorageFullError, read_parquet, write_bytes_atomic, write_parquet_atomic  # noqa: E402
from soco_pipeline.tables import table_for  # noqa: E402
from tests.faults import (  # noqa: E402
    BACKBONE,
    crash_env,
    kill,
    kill_during_write,
    kill_session,
    metrics_frame,
    start_demo,
    wait_for_pause,
    without_pause,
)

ROWS: list[tuple[str, bool, int, float, str]] = []


def record(fault: str, survived: bool, lost: int, seconds: float, note: str) -> None:
    ROWS.append((fault, survived, lost, seconds, note))
    print(f"  {fault}: survived={survived} rows_lost={lost} recover={seconds:.2f} s  {note}", flush=True)


def _count(db: Path, view: str) -> int:
    return int(query(db, f"SELECT count(*) AS n FROM {view}").n.iloc[0])


def fault_killed_write(tmp: Path, how: str) -> None:
    """SIGKILL of a table write between write and rename (full) or mid-write (half)."""
    tables, db = tmp / "storage" / "tables", tmp / "storage" / "results.duckdb"
    metrics = table_for("metrics")
    write_parquet_atomic(metrics_frame("a"), metrics.path(str(tables), "a"))
    b = metrics_frame("b", seed=1)
    kill_during_write(metrics.path(str(tables), "b"), b.to_parquet(index=False), how, tmp)
    refresh_views(db, str(tables))
    seen = _count(db, "metrics")  # before recovery: only the published 200 rows
    t0 = time.perf_counter()
    write_parquet_atomic(b, metrics.path(str(tables), "b"))  # the rerun's write removes the dead temp
    refresh_views(db, str(tables))
    seconds = time.perf_counter() - t0
    after = _count(db, "metrics")
    temps = list((tables / "metrics").glob(".tmp-*"))
    record(
        f"kill -9 {'between write and rename' if how == 'full' else 'mid-write'} (metrics table)",
        seen == 200 and not temps,
        abs(after - 400) + abs(seen - 200),
        seconds,
        f"view saw {seen} rows before the rerun, {after} after; {len(temps)} temp files left",
    )


def fault_crash_mid_extraction(tmp: Path) -> None:
    """SIGKILL of a whole demo (all its processes) paused after its first batch of maps; then the next demo
    run (pool limit 1)."""
    env = crash_env(tmp)
    features = Path(env["SOCO_STORAGE"]) / "features" / BACKBONE
    first = start_demo(env)
    try:
        wait_for_pause(env, first, deadline_s=600)
        kill_session(first)
    finally:
        kill(first)
    at_kill = len(list(features.glob("*/*.npy")))
    t0 = time.perf_counter()
    second = start_demo(without_pause(env))
    try:
        out, _ = second.communicate(timeout=900)
    except subprocess.TimeoutExpired:
        out = "(timed out: the next run hung)"
    finally:
        kill(second)
    seconds = time.perf_counter() - t0
    tables = Path(env["SOCO_STORAGE"]) / "tables"
    ok = second.returncode == 0 and "is gone (killed or crashed)" in out
    lost = -1
    if ok:
        images = len(read_parquet(table_for("image_set").path(str(tables))))
        manifest = read_parquet(table_for("feature_manifest").path(str(tables), BACKBONE))
        lost = abs(images - len(manifest))
    record(
        "kill -9 mid-extraction, then the next run",
        ok,
        lost,
        seconds,
        f"{at_kill} maps on disk at the kill; the next demo failed the dead run, freed the gpu slot and "
        f"completed (whole demo: data, pairs, features, matching, summary)",
    )


def _random_images(folder: Path, n: int, width: int, height: int) -> pd.DataFrame:
    """n seeded random PNGs in `folder`, as image_set rows of one category."""
    from PIL import Image

    rng = np.random.default_rng(0)
    rows = []
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        uri = folder / f"car_{i:04d}.png"
        Image.fromarray(rng.integers(0, 256, size=(height, width, 3), dtype=np.uint8)).save(uri)
        rows.append(
            {"image_id": f"car_{i:04d}", "uri": str(uri), "width": width, "height": height, "category": "car"}
        )
    return pd.DataFrame(rows)


def fault_corrupt_cache(tmp: Path) -> None:
    """Random bytes over one cached map (same size): refused on read, only it re-extracted."""

    from soco_pipeline.backbones import build_backbone, parse_spec
    from soco_pipeline.features import FeatureError, FeatureStore, extract_features

    images = _random_images(tmp / "img", 12, width=128, height=96)
    spec = parse_spec(
        {
            "kind": "classical",
            "model": "sift",
            "input": {"nearest_multiple": 64},
            "normalisation": "raw",
            "batch_size": 4,
        },
        "sift_bench",
    )
    cache = str(tmp / "cache")
    manifest = extract_features(spec, images, cache)
    before = {
        r.image_id: np.array(FeatureStore.from_manifest(cache, manifest).get_stored(r.image_id)[0])
        for r in manifest.itertuples()
    }
    path = Path(cache) / manifest.path.iloc[5]
    size = path.stat().st_size
    with open(path, "r+b") as f:
        f.seek(128)
        f.write(np.random.default_rng(1).bytes(size - 128))  # seeded random values over the map
    try:
        FeatureStore.from_manifest(cache, manifest).get_stored(manifest.image_id.iloc[5])
        refused = False
    except FeatureError as e:
        refused = manifest.image_id.iloc[5] in str(e) and "re-extract this backbone" in str(e)
    backbone = build_backbone(spec)
    calls = []
    inner = backbone.extract
    backbone.extract = lambda imgs, recs: calls.append(len(imgs)) or inner(imgs, recs)
    t0 = time.perf_counter()
    fixed = extract_features(spec, images, cache, backbone=backbone)
    seconds = time.perf_counter() - t0
    store = FeatureStore.from_manifest(cache, fixed)
    lost = sum(not np.array_equal(store.get_stored(i)[0], a) for i, a in before.items())
    record(
        "corrupt cached feature map (random bytes, same size)",
        refused and sum(calls) == 1,
        lost,
        seconds,
        f"read refused naming the image; re-extraction recomputed {sum(calls)} of {len(images)} images",
    )


VIT_TINY = {
    "kind": "timm",
    "model": "vit_tiny_patch16_224",
    "input": {"nearest_multiple": 64},
    "batch_size": 4,
    "device": "cpu",
}  # random init: 192-value class tokens


def fault_corrupt_class_token(tmp: Path) -> None:
    """A ViT class token's values overwritten in place (its .npy header intact): refused on read, naming
    the image; the re-extraction the error advises recomputes that image alone."""
    from soco_pipeline.backbones import build_backbone, parse_spec
    from soco_pipeline.features import FeatureError, FeatureStore, extract_features

    images = _random_images(tmp / "img", 8, width=64, height=48)
    spec = parse_spec(VIT_TINY, "vit_cls_bench")
    cache = str(tmp / "cache")
    manifest = extract_features(spec, images, cache)
    bad = manifest.image_id.iloc[2]
    before = FeatureStore.from_manifest(cache, manifest).class_token(bad)
    path = Path(cache) / manifest.cls_path.iloc[2]
    with open(path, "r+b") as f:
        f.seek(128)
        f.write(np.random.default_rng(1).bytes(path.stat().st_size - 128))
    try:
        FeatureStore.from_manifest(cache, manifest).class_token(bad)
        refused = False
    except FeatureError as e:
        refused = bad in str(e) and "re-extract this backbone" in str(e)
    backbone = build_backbone(spec)
    calls: list[int] = []
    inner = backbone.extract
    backbone.extract = lambda imgs, recs, **kw: calls.append(len(imgs)) or inner(imgs, recs, **kw)
    t0 = time.perf_counter()
    fixed = extract_features(spec, images, cache, backbone=backbone)
    seconds = time.perf_counter() - t0
    after = FeatureStore.from_manifest(cache, fixed).class_token(bad)
    record(
        "corrupt class token (values overwritten, header intact)",
        refused and sum(calls) == 1,
        abs(len(fixed) - len(images)) + int(not np.allclose(after, before, atol=2e-3)),
        seconds,
        f"read refused naming the image; re-extraction recomputed {sum(calls)} of {len(images)} images",
    )


def fault_failed_check(tmp: Path) -> None:
    """A re-import whose blocking image_pairs check fails: the previous table must stay."""
    import dagster as dg

    from soco_pipeline.data.soco_export import export_soco_release
    from soco_pipeline.defs.definitions import build_definitions
    from soco_pipeline.taxonomy import load_taxonomy
    from tests.fixtures_data import canonical_tables

    tax = load_taxonomy()
    images, keypoints, pairs, corr = canonical_tables(str(tmp / "data"), tax)
    release = str(tmp / "SOCOv1")
    export_soco_release(images, keypoints, pairs, corr, release, tax)
    tables = tmp / "storage" / "tables"
    write_parquet_atomic(keypoints, table_for("keypoints").path(str(tables)))
    previous = pairs[pairs.evaluated]
    write_parquet_atomic(previous, table_for("image_pairs").path(str(tables)))
    write_parquet_atomic(
        images[images.category != images.category.iloc[0]], table_for("image_set").path(str(tables))
    )
    defs = build_definitions(
        storage_root=str(tmp / "storage"), source="soco_release", soco_release_root=release
    )
    (tmp / "dagster").mkdir()
    with dg.instance_for_test(temp_dir=str(tmp / "dagster")) as instance:
        quiet = {"loggers": {"console": {"config": {"log_level": "CRITICAL"}}}}
        bad = dg.materialize(
            list(defs.assets),
            selection=["taxonomy", "image_pairs"],
            instance=instance,
            resources=defs.resources,
            raise_on_error=False,
            run_config=quiet,
        )
        kept = read_parquet(table_for("image_pairs").path(str(tables)))
        write_parquet_atomic(images, table_for("image_set").path(str(tables)))  # the fix: the full image set
        t0 = time.perf_counter()
        good = dg.materialize(
            list(defs.assets),
            selection=["taxonomy", "image_pairs"],
            instance=instance,
            resources=defs.resources,
            raise_on_error=False,
            run_config=quiet,
        )
        seconds = time.perf_counter() - t0
    published = read_parquet(table_for("image_pairs").path(str(tables)))
    record(
        "failed blocking check (image_pairs re-import)",
        not bad.success and good.success,
        abs(len(kept) - len(previous)) + abs(len(published) - len(previous)),
        seconds,
        "the failing run published nothing (previous table kept); the rerun after the fix published",
    )


@contextlib.contextmanager
def _tiny_tmpfs(tmp: Path, fault: str) -> Iterator[Path | None]:
    """A 256 KiB tmpfs under tmp (real ENOSPC), unmounted on exit; None (and a not-survived row naming
    `fault`) where this machine cannot mount one."""
    mnt = tmp / "tiny"
    mnt.mkdir()
    try:
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mnt)],
            check=True,
            capture_output=True,
            timeout=20,
        )
    except (OSError, subprocess.SubprocessError) as e:
        record(fault, False, -1, 0.0, f"skipped: cannot mount a tmpfs here ({e})")
        yield None
        return
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False, capture_output=True, timeout=20)


def fault_disk_full(tmp: Path) -> None:
    """Writes into a 256 KiB tmpfs (real ENOSPC)."""
    with _tiny_tmpfs(tmp, "disk full (tmpfs)") as mnt:
        if mnt is None:
            return
        try:
            os.environ["SOCO_STORAGE"] = str(mnt)
            small = metrics_frame("a", 100)
            write_parquet_atomic(small, str(mnt / "tables" / "metrics" / "a.parquet"))
            try:
                write_bytes_atomic(str(mnt / "features" / "x.npy"), os.urandom(600_000))
                clear = False
            except StorageFullError as e:
                clear = str(mnt) in str(e) and "600,000 bytes" in str(e)
            orphans = [p for p in mnt.rglob("*") if p.is_file() and p.name != "a.parquet"]
            t0 = time.perf_counter()
            write_bytes_atomic(str(mnt / "features" / "x.npy"), os.urandom(60_000))  # after space is freed
            seconds = time.perf_counter() - t0
            lost = abs(len(read_parquet(str(mnt / "tables" / "metrics" / "a.parquet"))) - 100)
            record(
                "disk full (256 KiB tmpfs, 600 KB write)",
                clear and not orphans,
                lost,
                seconds,
                f"error named the storage root and the bytes; {len(orphans)} orphans",
            )
        finally:
            os.environ.pop("SOCO_STORAGE", None)


def fault_disk_full_extraction(tmp: Path) -> None:
    """ENOSPC in the middle of a feature extraction (SIFT maps of 16 KB into a 256 KiB tmpfs), then more space."""

    from soco_pipeline.backbones import parse_spec, spec_hash
    from soco_pipeline.features import extract_features
    from soco_pipeline.features.layout import feature_dir, read_manifest

    with _tiny_tmpfs(tmp, "disk full mid-extraction (tmpfs)") as mnt:
        if mnt is None:
            return
        images = _random_images(tmp / "img", 40, width=64, height=64)
        spec = parse_spec(
            {
                "kind": "classical",
                "model": "sift",
                "input": {"nearest_multiple": 64},
                "normalisation": "raw",
                "batch_size": 2,
            },
            "sift_full",
        )
        cache = str(mnt / "features")
        try:
            extract_features(spec, images, cache)
            clear = False
        except StorageFullError as e:
            clear = str(mnt) in str(e) and "bytes" in str(e)
        folder = Path(feature_dir(cache, spec.name, spec_hash(spec)))
        listed = set(read_manifest(str(folder)).path.str.rsplit("/", n=1).str[-1])
        on_disk = {p.name for p in folder.glob("*.npy")}
        orphans = len(on_disk - listed) + len(list(folder.glob(".tmp-*")))
        subprocess.run(["mount", "-o", "remount,size=4m", str(mnt)], check=True, timeout=20)
        t0 = time.perf_counter()
        manifest = extract_features(spec, images, cache)
        seconds = time.perf_counter() - t0
        record(
            "disk full mid-extraction (256 KiB tmpfs), then more space",
            clear and orphans == 0,
            abs(len(manifest) - len(images)),
            seconds,
            f"{len(listed)} of {len(images)} maps kept at the fault, {orphans} orphans; the rerun resumed",
        )


def fault_disk_full_vit_extraction(tmp: Path) -> None:
    """ENOSPC while a ViT writes maps and class tokens (48 images into a 256 KiB tmpfs), then more space:
    every class token the manifest lists must still be on disk, and the rerun resumes."""
    import soco_pipeline.features.extract as extract_module
    from soco_pipeline.backbones import parse_spec, spec_hash
    from soco_pipeline.features import FeatureStore, extract_features
    from soco_pipeline.features.layout import feature_dir, read_manifest

    with _tiny_tmpfs(tmp, "disk full mid-ViT-extraction (tmpfs)") as mnt:
        if mnt is None:
            return
        images = _random_images(tmp / "img", 48, width=64, height=48)
        spec = parse_spec(VIT_TINY, "vit_full_bench")
        cache = str(mnt / "features")
        flush, extract_module.FLUSH_SECONDS = extract_module.FLUSH_SECONDS, 0.0  # a manifest per batch
        try:
            try:
                extract_features(spec, images, cache)
                clear = False
            except StorageFullError as e:
                clear = str(mnt) in str(e) and "bytes" in str(e)
            folder = Path(feature_dir(cache, spec.name, spec_hash(spec)))
            manifest = read_manifest(str(folder))
            tokens = set(manifest.cls_path.str.rsplit("/", n=1).str[-1])
            kept = tokens & {p.name for p in folder.glob("*.cls.npy")}
            subprocess.run(["mount", "-o", "remount,size=4m", str(mnt)], check=True, timeout=20)
            t0 = time.perf_counter()
            fixed = extract_features(spec, images, cache)
            seconds = time.perf_counter() - t0
        finally:
            extract_module.FLUSH_SECONDS = flush
        store = FeatureStore.from_manifest(cache, fixed)
        readable = sum(store.class_token(i).shape == (192,) for i in images.image_id)
        record(
            "disk full mid-ViT-extraction (256 KiB tmpfs), then more space",
            clear and len(tokens) > 0 and kept == tokens and readable == len(images),
            abs(len(fixed) - len(images)),
            seconds,
            f"{len(kept)} of {len(tokens)} listed class tokens kept at the fault; the rerun resumed and "
            f"{readable} of {len(images)} class tokens read",
        )


def fault_sql_write(tmp: Path) -> None:
    """`soco sql` tries COPY TO over a published table and reads /etc/passwd."""
    tables, db = tmp / "storage" / "tables", tmp / "storage" / "results.duckdb"
    path = table_for("leaderboard").path(str(tables))
    write_parquet_atomic(metrics_frame("a", 10), path)
    refresh_views(db, str(tables))
    refused = 0
    t0 = time.perf_counter()
    for sql in (
        f"COPY (SELECT 99.9 AS soc) TO '{path}'",
        "SELECT * FROM read_csv('/etc/passwd')",
        f"ATTACH '{tmp / 'x.db'}'",
    ):
        try:
            query(db, sql)
        except ResultsError:
            refused += 1
    seconds = time.perf_counter() - t0
    lost = abs(len(read_parquet(path)) - 10)
    record(
        "soco sql COPY TO / read outside storage / ATTACH",
        refused == 3,
        lost,
        seconds,
        f"{refused} of 3 statements refused; the table is unchanged",
    )


def fault_keypoint_outside(tmp: Path) -> None:
    """An Animal3D keypoint 1 px outside its image, among good records: the data stage runs on."""
    from soco_pipeline.data.imageset import build_image_set
    from soco_pipeline.data.keypoints import aggregate_keypoints
    from soco_pipeline.sources import SourceConfig, read_candidates, read_raw_keypoints
    from soco_pipeline.taxonomy import load_taxonomy
    from tests.fixtures_data import animal_record, write_animal3d

    tax = load_taxonomy()
    recs = [animal_record(f"dog_{i:04d}", seed=i) for i in range(10)]
    recs[3]["keypoint_2d"][3][:2] = [recs[3]["width"] + 1.0, 20.0]
    write_animal3d(str(tmp / "a3d"), recs)
    cfg = SourceConfig(animal3d_root=str(tmp / "a3d"))
    t0 = time.perf_counter()
    kept, rejected = build_image_set(read_candidates(cfg, tax), cfg, tax)
    keypoints, _ = aggregate_keypoints(read_raw_keypoints(cfg, tax), kept, tax, cfg)
    seconds = time.perf_counter() - t0
    ok = list(rejected.reason) == ["keypoint_outside_image"] and len(kept) == 9
    record(
        "Animal3D keypoint 1 px outside the image",
        ok,
        abs(keypoints.image_id.nunique() - 9),
        seconds,
        "that image rejected as keypoint_outside_image; the other 9 kept with their keypoints",
    )


def fault_mmvm_bad_input(tmp: Path) -> None:
    """Issue #38's MMVM rows: a repeated index and a frame that is not an image in MMVMBench.tsv, an empty
    answer cell in a workbook, and a judge answering garbage: each refused or counted, naming the row."""
    import base64

    from soco_pipeline.lvlm.backends import Reply
    from soco_pipeline.lvlm.run import LvlmRunError
    from soco_pipeline.tasks.mmvm.answers import Judge, score_predictions
    from soco_pipeline.tasks.mmvm.official import MmvmFormatError, import_vlmevalkit
    from tests.mmvm_release import jpeg_b64, small_mmvmbench_tsv

    class Garbage:
        max_concurrency, batch_size = 1, 4

        def answer_batch(self, requests):
            return [Reply("the weather is nice", 0.0) for _ in requests]

    t0 = time.perf_counter()
    refused = []
    table = small_mmvmbench_tsv(tmp / "MMVMBench.tsv")
    for change in (
        lambda d: d.assign(index=[0, 1, 2, 1]),
        lambda d: d.assign(
            image=[*d["image"][:3], repr([jpeg_b64(1), base64.b64encode(b"text " * 40).decode()])]
        ),
    ):
        change(table).to_csv(tmp / "bad.tsv", sep="\t", index=False)
        try:
            import_vlmevalkit(str(tmp / "bad.tsv"), str(tmp / "frames"))
        except MmvmFormatError as e:
            refused.append("row" in str(e) or "rows" in str(e))
    workbook = table.drop(columns="image").assign(prediction=["A", "B", "E", "C"], answer=["A", "", "E", "C"])
    try:
        score_predictions(workbook)
    except MmvmFormatError as e:
        refused.append("row 3" in str(e))
    try:
        score_predictions(
            table.drop(columns="image").assign(prediction="the first one"), Judge(Garbage(), "yes_no")
        )
    except LvlmRunError as e:
        refused.append("failed on 4 of 4 rows" in str(e))
    seconds = time.perf_counter() - t0
    record(
        "MMVM bad input (index, frame, answer, judge)",
        refused == [True] * 4,
        0,
        seconds,
        f"{sum(refused)} of 4 refused naming the row (or the judge's failures)",
    )


def _global_cache(tmp: Path, n: int = 8, batch: int = 2):
    """A global-feature cache of n small images written by two runs (a VariantOracle: no model to build)."""
    from PIL import Image

    from soco_pipeline.features import GlobalInputPolicy
    from soco_pipeline.features.global_cache import extract_global
    from soco_pipeline.features.global_extractors import VariantOracle

    rng = np.random.default_rng(0)
    (tmp / "img").mkdir(parents=True, exist_ok=True)
    rows = []
    for i in range(n):
        uri = str(tmp / "img" / f"{i}.png")
        Image.fromarray(rng.integers(0, 256, (18, 20, 3), dtype=np.uint8)).save(uri)
        rows.append({"image_id": f"i/{i}", "uri": uri, "width": 20, "height": 18, "label": i % 2})
    images, ex = pd.DataFrame(rows), VariantOracle("label", 2)
    policy, root = GlobalInputPolicy(resize=20, crop=16, batch_size=batch, threads=1), str(tmp / "cache")
    extract_global(ex, images.iloc[: n // 2], root, policy)
    first = extract_global(ex, images, root, policy)
    return ex, images, root, policy, first, ex.cache_folder(root, policy)


def fault_global_metadata(tmp: Path, what: str) -> None:
    """Damage the global-feature cache's metadata or a shard; the read names the file and the fix, and the
    re-extraction repairs only what is damaged."""
    from soco_pipeline.features.global_cache import extract_global, read_global
    from soco_pipeline.features.layout import FeatureError

    ex, images, root, policy, first, folder = _global_cache(tmp)
    target = {
        "manifest": sorted(Path(folder).glob("manifest*.parquet"))[-1],
        "info": Path(folder) / "info.json",
        "shard": sorted(Path(folder).glob("part-*.npy"))[0],
    }[what]
    if what == "manifest":
        target.write_bytes(os.urandom(target.stat().st_size))
    else:
        target.unlink()
    try:
        read_global(folder, images.image_id)
        named = False
    except FeatureError as e:
        named = str(target) in str(e) and "materialize" in str(e)
    logs: list[str] = []
    t0 = time.perf_counter()
    again = extract_global(ex, images, root, policy, logs.append)
    seconds = time.perf_counter() - t0
    same = np.array_equal(read_global(folder, images.image_id).cls_last, first.cls_last)
    line = next(m for m in logs if "to extract" in m)
    record(
        {
            "manifest": "global cache manifest file (random bytes)",
            "info": "global cache info.json deleted",
            "shard": "global cache shard deleted",
        }[what],
        named and same,
        abs(len(again) - len(images)),
        seconds,
        f"named error with the fix: {named}; re-extraction: {' '.join(line.split()[3:5])}, "
        f"{' '.join(line.split()[-3:])}",
    )


def fault_two_global_writers(tmp: Path, trials: int = 20) -> None:
    """Two writers (threads) of one global-cache folder at once, batch size 1, `trials` times."""
    import threading

    from soco_pipeline.features.global_cache import extract_global, read_global

    ex, images, _, policy, _, _ = _global_cache(tmp, n=16)
    policy = policy.model_copy(update={"batch_size": 1})
    lost, t0 = 0, time.perf_counter()
    for trial in range(trials):
        root = str(tmp / f"two{trial}")
        threads = [
            threading.Thread(target=extract_global, args=(ex, part, root, policy))
            for part in (images.iloc[:8], images.iloc[8:])
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        try:
            lost += 16 - read_global(ex.cache_folder(root, policy)).image_ids.size
        except Exception:  # noqa: BLE001 - a folder that cannot be read lost everything
            lost += 16
    record(
        f"two writers of one global-cache folder ({trials} trials, batch 1)",
        lost == 0,
        lost,
        time.perf_counter() - t0,
        "one manifest file per writer, merged on read",
    )


def fault_vit_crop(tmp: Path) -> None:
    """FG-BMK global_features.crop 200 for a ViT/14: refused before extraction, naming 196 and 210."""
    from soco_pipeline.backbones import list_specs
    from soco_pipeline.features import GlobalInputPolicy, cached_global

    ex, images, *_ = _global_cache(tmp, n=2)
    t0 = time.perf_counter()
    try:
        cached_global(
            list_specs()["vit_small_random"],
            images,
            str(tmp / "vit"),
            GlobalInputPolicy(crop=200),
            {"device": "cpu"},
        )
        named = False
    except ValueError as e:
        named = "196" in str(e) and "210" in str(e)
    shards = list((tmp / "vit").rglob("part-*.npy"))
    record(
        "ViT crop not a multiple of the patch (200 for /14)",
        named and not shards,
        0,
        time.perf_counter() - t0,
        "refused before extraction with the nearest crops 196 / 210",
    )


def fault_tampered_predictions(tmp: Path) -> None:
    """A stored predictions table altered after it was written (footer metadata kept): records, compare and
    re-scoring refuse it."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from soco_pipeline.trust.records import load_backbone_tables

    root = tmp / "tables"
    tiny = pd.DataFrame({"pair_id": ["p0", "p1"], "ok": [True, False]})
    for asset in ("image_set", "keypoints", "image_pairs", "correspondences", "four_choice"):
        write_parquet_atomic(tiny, str(root / f"{asset}.parquet"))
    for asset in ("feature_manifest", "predictions", "four_choice_predictions", "metrics"):
        write_parquet_atomic(tiny, str(root / asset / "b.parquet"))
    path = root / "predictions" / "b.parquet"
    footer, table = pq.read_metadata(path).metadata, pq.read_table(path)
    changed = table.set_column(1, "ok", pa.array([True, True]))
    pq.write_table(changed.replace_schema_metadata(footer), path)
    t0 = time.perf_counter()
    try:
        load_backbone_tables(str(root), "b")
        refused = False
    except ValueError as e:
        refused = "altered" in str(e) and str(path) in str(e)
    record(
        "stored predictions altered after they were written",
        refused,
        0,
        time.perf_counter() - t0,
        "content checksum in the Parquet footer; records / compare / re-scoring refuse the table",
    )


def fault_copied_root(tmp: Path) -> None:
    """A storage root copied elsewhere and the original deleted: the copy's image table reads its own images."""
    from soco_pipeline.trust.hashes import image_digests

    a, b = tmp / "a" / "storage", tmp / "b" / "storage"
    images = _random_images(a / "embedded" / "images", 8, 64, 48)
    path = table_for("image_set").path(str(a / "tables"))
    write_parquet_atomic(images, path, storage_root=str(a))  # as the IO manager writes every table
    before = image_digests(images)
    shutil.copytree(a, b)
    shutil.rmtree(a)
    t0 = time.perf_counter()
    try:
        copied = read_parquet(table_for("image_set").path(str(b / "tables")))
        after = image_digests(copied)
        lost = int((after.reindex(before.index) != before).sum())
        inside = bool(copied.uri.str.startswith(f"{b}/").all())
    except FileNotFoundError:
        lost, inside = len(images), False
    record(
        "storage root copied, the original deleted",
        inside and lost == 0,
        lost,
        time.perf_counter() - t0,
        "paths under the storage root stored relative to it; read against the root the table lies in",
    )


def fault_unparsable_lvlm(tmp: Path) -> None:
    """An LVLM server that answers 'I think so' to everything: the run log warns."""
    from soco_pipeline.lvlm.backends.openai import OpenAIBackend
    from soco_pipeline.lvlm.cache import AnswerCache
    from soco_pipeline.lvlm.run import run_model
    from soco_pipeline.lvlm.server import serve
    from tests.lvlm_helpers import openai_spec, small_items

    items = small_items(tmp / "items", items_per_group=2)
    warnings: list[str] = []
    t0 = time.perf_counter()
    with serve(lambda r, b: "I think so") as srv:
        spec = openai_spec(srv.base_url, "vague")
        res = run_model(
            items, spec, OpenAIBackend(spec), AnswerCache(str(tmp / "cache")), warn=warnings.append
        )
    record(
        "LVLM whose every answer is unparsable",
        len(warnings) == 1 and f"{len(res.answers)} of {len(res.answers)}" in warnings[0],
        0,
        time.perf_counter() - t0,
        "the run log warns (count and an example answer)",
    )


def fault_disk_full_mount(tmp: Path) -> None:
    """A 256 KiB tmpfs mounted inside the storage root: the error names that mount and its free space."""
    with _tiny_tmpfs(tmp, "disk full (mount inside the storage root)") as mnt:
        if mnt is None:
            return
        try:
            os.environ["SOCO_STORAGE"] = str(tmp)
            t0 = time.perf_counter()
            try:
                write_bytes_atomic(str(mnt / "x.npy"), os.urandom(400_000))
                named = False
            except StorageFullError as e:
                free = int(str(e).split(" has ", 1)[1].split(" bytes free", 1)[0].replace(",", ""))
                named = f"mount {mnt}" in str(e) and free <= 256 * 1024
            record(
                "disk full on a mount inside the storage root",
                named,
                0,
                time.perf_counter() - t0,
                "the error names the full mount and its free space, not the storage root's",
            )
        finally:
            os.environ.pop("SOCO_STORAGE", None)


def fault_orphan_step(tmp: Path) -> None:
    """kill -9 of only the demo's main process while a feature step is paused: the step process dies too."""
    import signal

    env = crash_env(tmp)
    demo = start_demo(env)
    try:
        step = wait_for_pause(env, demo, deadline_s=600)
        os.kill(demo.pid, signal.SIGKILL)
        demo.wait(timeout=10)
        t0 = time.perf_counter()
        while _running(step) and time.perf_counter() - t0 < 30:
            time.sleep(0.1)
        seconds = time.perf_counter() - t0
        record(
            "kill -9 of the demo's main process only",
            not _running(step),
            0,
            seconds,
            "the paused step process died with it (no orphan publishing later)",
        )
    finally:
        kill_session(demo)


# --- reliability round 5 (issue 58): each row injects the fault its test in tests/ injects -------------------


def fault_damaged_snapshot(tmp: Path, damage: str) -> None:
    """An earlier snapshot of the regression watch damaged (its JSON truncated, or its scores Parquet): the
    watch says "not comparable" (a WARN check, never a pass) naming `soco drop-snapshot`, which repairs it."""
    from soco_pipeline.trust import history
    from tests.test_watch_faults import three_versions

    folder = three_versions(str(tmp))
    name = "v1.json" if damage == "json" else "v1.parquet"
    (folder / name).write_bytes((folder / name).read_bytes()[:40])
    t0 = time.perf_counter()
    blind = history.watch(str(tmp), "mmvm", "m", "v2", reduction="pooled")
    history.drop_snapshot(str(tmp), "mmvm", "m", "v1")  # the named command's body
    after = history.watch(str(tmp), "mmvm", "m", "v2", reduction="pooled")
    kept = (folder / "dropped" / name).exists()
    record(
        f"earlier regression-watch snapshot damaged ({'JSON truncated' if damage == 'json' else 'scores Parquet'})",
        blind.not_comparable != ""
        and blind.message == ""
        and "soco drop-snapshot mmvm m v1" in blind.not_comparable
        and after.previous == "v0"
        and "75.0 -> 0.0" in after.message,
        0 if kept else 1,
        time.perf_counter() - t0,
        "not comparable (WARN) naming the file and `soco drop-snapshot`; after it the watch compares with v0 and "
        "fails on the 75-point drop; the dropped files kept in dropped/",
    )


def fault_fgbmk_not_an_image(tmp: Path) -> None:
    """An FG-BMK official source listing a file that is not an image: the error names the CSV line and file."""
    from soco_pipeline.tasks.fgbmk.readers import FgbmkFormatError, items_from_dataset, read_machine_dataset
    from tests.test_input_faults import fgbmk_folder

    folder = fgbmk_folder(tmp)
    (folder / "imgs" / "train_1_1.jpg").write_bytes(b"<html>404</html>")
    t0 = time.perf_counter()
    try:
        items_from_dataset(read_machine_dataset(str(folder)))
        named = False
    except FgbmkFormatError as e:
        named = str(e).startswith(f"{folder}/train.csv:5: ") and "remove line 5" in str(e)
    record(
        "FG-BMK official source lists a file that is not an image",
        named,
        0,
        time.perf_counter() - t0,
        "FgbmkFormatError naming train.csv:5, the file, its first bytes and the fix",
    )


def fault_workbook_encodings(tmp: Path) -> None:
    """`soco score-workbook` inputs: UTF-16 with a BOM and an xlsx named .tsv read; Latin-1 refused clearly."""
    from soco_pipeline.sources.table_files import TableFileError
    from soco_pipeline.tasks.mmvm.official import read_prediction_workbook
    from tests.test_input_faults import WORKBOOK

    frame = pd.read_excel(WORKBOOK, dtype=str)
    frame.loc[0, "question"] = "Où " + frame.loc[0, "question"]
    (tmp / "u16.tsv").write_bytes(frame.to_csv(sep="\t", index=False).encode("utf-16"))
    (tmp / "xlsx.tsv").write_bytes(WORKBOOK.read_bytes())
    (tmp / "l1.tsv").write_bytes(frame.to_csv(sep="\t", index=False).encode("latin-1"))
    t0 = time.perf_counter()
    read = [len(read_prediction_workbook(tmp / n)) for n in ("u16.tsv", "xlsx.tsv")]
    try:
        read_prediction_workbook(tmp / "l1.tsv")
        named = False
    except TableFileError as e:
        named = f"{tmp / 'l1.tsv'}:2: not UTF-8" in str(e) and "Save it as UTF-8" in str(e)
    record(
        "score-workbook on UTF-16, an xlsx named .tsv, Latin-1",
        read == [42, 42] and named,
        abs(84 - sum(read)),
        time.perf_counter() - t0,
        "UTF-16 (BOM) and the renamed xlsx read in full; Latin-1 refused naming file:line, byte and the fix",
    )


def fault_formula_cells(tmp: Path) -> None:
    """Formula cells in a workbook: neutralised in the CSV the command writes."""
    from soco_pipeline.report.csv_safe import FORMULA_START, PLAIN_NUMBER, safe_csv

    cells = ['=HYPERLINK("http://x","A")', "+1+1", "-1+cmd", "@SUM(1)", "\tA", "\r=1", "-3", "ok"]
    t0 = time.perf_counter()
    back = pd.read_csv(io.StringIO(safe_csv(pd.DataFrame({"c": cells}))), dtype=str)["c"]
    live = [c for c in back if c.startswith(FORMULA_START) and not re.fullmatch(PLAIN_NUMBER, c)]
    record(
        "formula cells in a workbook (OWASP CSV injection)",
        live == [] and len(back) == len(cells),
        abs(len(back) - len(cells)),
        time.perf_counter() - t0,
        "every cell starting = + - @ tab CR prefixed with ' in --out CSV (plain numbers kept)",
    )


def fault_vanished_board(tmp: Path) -> None:
    """A family board materialized but whose file is gone: a warning naming it (summary and page)."""
    from soco_pipeline.trust.headline import vanished_boards

    tables = tmp / "tables"
    write_parquet_atomic(pd.DataFrame({"model": ["a"], "score": [1.0]}), str(tables / "leaderboard.parquet"))
    when = pd.Timestamp("2026-01-01", tz="UTC")
    t0 = time.perf_counter()
    gone = vanished_boards(
        {"leaderboard": when, "mmvm_leaderboard": when, "tpips_leaderboard": None}, str(tables)
    )
    record(
        "family board file vanished",
        list(gone) == ["mmvm_leaderboard"] and "re-materialize mmvm_leaderboard" in gone["mmvm_leaderboard"],
        0,
        time.perf_counter() - t0,
        "model_headlines / model_summary / results_report warn (log + missing_boards); the page shows it",
    )


def fault_storage_moved(tmp: Path) -> None:
    """The storage root moved while a run writes into it: no write re-creates it at the old path."""
    from soco_pipeline.cli.project import write_instance_yaml
    from soco_pipeline.storage import StorageMovedError

    storage = tmp / "storage"
    write_instance_yaml(storage / "dagster", str(storage), PROJECT_ROOT)
    saved = {k: os.environ.get(k) for k in ("SOCO_STORAGE", "DAGSTER_HOME")}
    os.environ.update(SOCO_STORAGE=str(storage), DAGSTER_HOME=str(storage / "dagster"))
    try:
        write_bytes_atomic(str(storage / "tables" / "a.bin"), b"x")
        storage.rename(tmp / "moved")
        t0 = time.perf_counter()
        try:
            write_bytes_atomic(str(storage / "features" / "b.npy"), b"y")
            refused = False
        except StorageMovedError as e:
            refused = "point SOCO_STORAGE (and DAGSTER_HOME) at the new place" in str(e)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    record(
        "storage root moved mid-run",
        refused and not storage.exists() and (tmp / "moved" / "tables" / "a.bin").exists(),
        0,
        time.perf_counter() - t0,
        "StorageMovedError, no half tree at the old path; make demo stops with one line (tests: a real demo)",
    )


def fault_long_model_name(tmp: Path) -> None:
    """A 230-character model name: refused when the spec is read, naming the file and the fix."""
    from soco_pipeline.backbones.spec import BackboneSpecError, load_spec

    spec = tmp / f"{'m' * 230}.yaml"
    spec.write_text((PROJECT_ROOT / "assets" / "backbones" / "oracle_part.yaml").read_text())
    t0 = time.perf_counter()
    try:
        load_spec(spec)
        refused = False
    except BackboneSpecError as e:
        refused = "230 bytes long; at most 200 fit" in str(e)
    record(
        "230-character model name",
        refused,
        0,
        time.perf_counter() - t0,
        "refused when the spec is read (add-backbone, the spec sensor, soco run), before any extraction",
    )


def fault_copied_instance(tmp: Path) -> None:
    """A `cp -a` copy of a project: its dagster.yaml is rewritten for the copy, so no run reaches the original."""
    from soco_pipeline.cli.project import instance_storage, write_instance_yaml

    a = tmp / "a"
    write_instance_yaml(a / "storage" / "dagster", str(a / "storage"), PROJECT_ROOT)
    subprocess.run(["cp", "-a", str(a), str(tmp / "b")], check=True, timeout=60)
    b = tmp / "b"
    t0 = time.perf_counter()
    rewritten = write_instance_yaml(b / "storage" / "dagster", str(b / "storage"), PROJECT_ROOT)
    named = instance_storage((b / "storage" / "dagster" / "dagster.yaml").read_text())
    record(
        "cp -a copy of a clone (dagster.yaml naming the original)",
        rewritten and named == str(b / "storage"),
        0,
        time.perf_counter() - t0,
        "rewritten for the copy (make and soco do it); tests/test_copied_instance.py runs Dagster in both",
    )


def _running(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--skip-crash", action="store_true", help="leave out the kill -9 of a whole demo run")
    ap.add_argument(
        "--only",
        action="append",
        default=[],
        metavar="NAME",
        help="run only the faults whose short name contains NAME (repeatable), e.g. 'class token'",
    )
    args = ap.parse_args()
    faults: list[tuple[str, Callable[[Path], None]]] = [
        ("killed write (full)", lambda t: fault_killed_write(t, "full")),
        ("killed write (half)", lambda t: fault_killed_write(t, "half")),
        ("corrupt cache", fault_corrupt_cache),
        ("failed check", fault_failed_check),
        ("disk full", fault_disk_full),
        ("disk full extraction", fault_disk_full_extraction),
        ("corrupt class token", fault_corrupt_class_token),
        ("disk full vit", fault_disk_full_vit_extraction),
        ("sql", fault_sql_write),
        ("keypoint outside", fault_keypoint_outside),
        ("mmvm bad input", fault_mmvm_bad_input),
        ("global manifest", lambda t: fault_global_metadata(t, "manifest")),
        ("global info", lambda t: fault_global_metadata(t, "info")),
        ("global shard", lambda t: fault_global_metadata(t, "shard")),
        ("global writers", fault_two_global_writers),
        ("vit crop", fault_vit_crop),
        ("tampered predictions", fault_tampered_predictions),
        ("unparsable lvlm", fault_unparsable_lvlm),
        ("disk full mount", fault_disk_full_mount),
        ("copied root", fault_copied_root),
        ("damaged snapshot json", lambda t: fault_damaged_snapshot(t, "json")),
        ("damaged snapshot parquet", lambda t: fault_damaged_snapshot(t, "parquet")),
        ("fgbmk not an image", fault_fgbmk_not_an_image),
        ("workbook encodings", fault_workbook_encodings),
        ("formula cells", fault_formula_cells),
        ("vanished board", fault_vanished_board),
        ("storage moved", fault_storage_moved),
        ("long model name", fault_long_model_name),
        ("copied instance", fault_copied_instance),
    ]
    if not args.skip_crash:
        faults.append(("crash", fault_crash_mid_extraction))
        faults.append(("orphan step", fault_orphan_step))
    if args.only:
        faults = [(n, fn) for n, fn in faults if any(o in n for o in args.only)]
    for name, fn in faults:
        tmp = Path(tempfile.mkdtemp(prefix=f"bench-faults-{name.split()[0]}-"))
        try:
            fn(tmp)
        except Exception as e:  # a fault that breaks the bench is a row that did not survive
            record(name, False, -1, 0.0, f"raised {type(e).__name__}: {str(e)[:200]}")
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    print("\n| fault | survived | rows lost | time to recover |\n|---|---|---|---|")
    for fault, survived, lost, seconds, _ in ROWS:
        print(f"| {fault} | {'yes' if survived else 'NO'} | {lost} | {seconds:.2f} s |")
    return 0 if all(s and lost == 0 for _, s, lost, _, _ in ROWS) else 1


if __name__ == "__main__":
    sys.exit(main())
