"""Helpers for fault-injection tests and bench_faults: real child processes, killed by pid, with deadlines."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from soco_pipeline.storage import PROJECT_ROOT

# A child that starts an atomic write of `path` (all of `data.bin`, or its first half), flushes it to the
# temp file, says so on stdout and waits to be killed: SIGKILL then lands between write and rename (full)
# or in the middle of the write (half).
WRITER = """
import sys, time
from soco_pipeline.storage import open_atomic
path, data_file, how = sys.argv[1:4]
data = open(data_file, "rb").read()
with open_atomic(path) as f:
    f.write(data if how == "full" else data[: len(data) // 2])
    f.flush()
    print("ready", flush=True)
    time.sleep(120)
"""


def child_env(**extra: str) -> dict[str, str]:
    """The environment of a child process: this worktree first on the path, offline, plus `extra`."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(PROJECT_ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env.update(HF_HUB_OFFLINE="1", DAGSTER_DISABLE_TELEMETRY="1", **extra)
    return env


def wait_for_line(proc: subprocess.Popen, marker: str, deadline_s: float) -> None:
    """Read the child's stdout until a line contains `marker`; raise with its output past the deadline."""
    end = time.monotonic() + deadline_s
    seen = []
    os.set_blocking(proc.stdout.fileno(), False)
    while time.monotonic() < end:
        line = proc.stdout.readline()
        if line:
            seen.append(line)
            if marker in line:
                return
            continue
        if proc.poll() is not None:
            rest = proc.stdout.read() or ""
            raise RuntimeError(f"child exited ({proc.returncode}) before {marker!r}:\n{''.join(seen)}{rest}")
        time.sleep(0.05)
    raise TimeoutError(f"no {marker!r} from the child within {deadline_s} s:\n{''.join(seen)}")


def kill(proc: subprocess.Popen, deadline_s: float = 10.0) -> None:
    """SIGKILL the child by pid (if still running) and reap it within a deadline."""
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=deadline_s)


def kill_during_write(path: str, data: bytes, how: str, tmp: Path, deadline_s: float = 60.0) -> None:
    """Start an atomic write of `data` to `path` in a child and SIGKILL it at `how` ("full" | "half")."""
    data_file = tmp / f"payload-{how}.bin"
    data_file.write_bytes(data)
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER, path, str(data_file), how],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=child_env(),
    )
    try:
        wait_for_line(proc, "ready", deadline_s)
    finally:
        kill(proc)
    assert proc.returncode == -signal.SIGKILL


BACKBONE = "oracle_paused"
BATCH = 4  # maps on disk when the extraction pauses: exactly one batch


def crash_env(tmp: Path) -> dict[str, str]:
    """Storage, DAGSTER_HOME (the project's dagster.yaml), a pause folder and one oracle spec under `tmp`.

    The child pauses after its first batch of BATCH feature maps is written (SOCO_PAUSE_DIR, see
    soco_pipeline/runtime/pause_points.py) until told to go on, so a kill lands mid-extraction, deterministically.
    """
    from tests.dagster_server import write_instance_yaml
    from tests.tiny_families import tiny_family_env

    storage, home, backbones, pause = tmp / "storage", tmp / "home", tmp / "backbones", tmp / "pause"
    write_instance_yaml(home, storage)
    backbones.mkdir()
    pause.mkdir()
    spec = yaml.safe_load((PROJECT_ROOT / "assets" / "backbones" / "oracle_part.yaml").read_text())
    spec.update(batch_size=BATCH, device="cpu")
    (backbones / f"{BACKBONE}.yaml").write_text(yaml.safe_dump(spec))
    return child_env(
        DAGSTER_HOME=str(home),
        SOCO_STORAGE=str(storage),
        SOCO_BACKBONES_DIR=str(backbones),
        SOCO_CATEGORIES="car,dog",
        SOCO_IMAGES_PER_CATEGORY="6",
        OMP_NUM_THREADS="1",
        SOCO_PAUSE_DIR=str(pause),
        SOCO_DEMO_LVLM="0",  # the crash is in SOCO's extraction; the LVLM block adds a minute, not coverage
        SOCO_DEMO_FAMILIES="none",  # and the families half a minute (measured: the next demo 60 s -> 33 s)
        **tiny_family_env(tmp / "families"),
    )


def without_pause(env: dict[str, str]) -> dict[str, str]:
    """`env` without the pause point: the next child runs straight through."""
    return {k: v for k, v in env.items() if k != "SOCO_PAUSE_DIR"}


def wait_for_pause(
    env: dict[str, str], proc: subprocess.Popen, name: str = "features_written", deadline_s: float = 300.0
) -> int:
    """Wait until a process of `proc`'s session stops at pause point `name`; return that process's pid."""
    flag = Path(env["SOCO_PAUSE_DIR"]) / f"{name}.paused"
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if flag.exists() and flag.read_text():
            return int(flag.read_text())
        if proc.poll() is not None:
            raise RuntimeError(
                f"child exited ({proc.returncode}) before pause point {name!r}:\n"
                f"{proc.stdout.read() if proc.stdout else ''}"
            )
        time.sleep(0.05)
    raise TimeoutError(f"no pause at {name!r} within {deadline_s} s")


def kill_session(proc: subprocess.Popen, deadline_s: float = 10.0) -> None:
    """SIGKILL every process of `proc`'s session (started with start_new_session), as a power loss would,
    and reap `proc` within a deadline."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(timeout=deadline_s)


def materialize_feature_inputs(env: dict[str, str]) -> None:
    """The inputs of BACKBONE's feature step, materialized in this process into `env`'s storage and instance:
    a test of the feature step needs no CLI child for them (a Python start and a preload)."""
    import dagster as dg

    from soco_pipeline.defs.definitions import build_definitions

    defs = build_definitions(
        storage_root=env["SOCO_STORAGE"],
        backbones_dir=env["SOCO_BACKBONES_DIR"],
        categories=env["SOCO_CATEGORIES"].split(","),
        images_per_category=int(env["SOCO_IMAGES_PER_CATEGORY"]),
    )
    upstream = dg.AssetSelection.assets(
        "embedded_dataset", "taxonomy", "source_images", "image_set", "rejected_images"
    )
    with dg.DagsterInstance.from_config(env["DAGSTER_HOME"]) as instance:
        done = dg.materialize(
            list(defs.assets), selection=upstream, instance=instance, resources=defs.resources
        )
        assert done.success
        instance.add_dynamic_partitions("backbones", [BACKBONE])


def feature_step_cli() -> list[str]:
    """`dagster asset materialize` of BACKBONE's feature step: a run on the definitions' own executor (Dagster's
    multiprocess executor, steps forked from the preloaded forkserver), as the UI launches one."""
    return [
        sys.executable,
        "-m",
        "dagster",
        "asset",
        "materialize",
        "-m",
        "soco_pipeline.defs.definitions",
        "--select",
        "feature_manifest",
        "--partition",
        BACKBONE,
    ]


def start_demo(env: dict[str, str]) -> subprocess.Popen:
    """`python -m soco_pipeline.cli.demo` in its own session, stdout and stderr piped together."""
    return start_child([sys.executable, "-u", "-m", "soco_pipeline.cli.demo"], env)


def start_child(cmd: list[str], env: dict[str, str]) -> subprocess.Popen:
    """`cmd` in the checkout, in its own session (so a kill can take all its processes), output piped."""
    return subprocess.Popen(
        cmd,
        cwd=PROJECT_ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


def metrics_frame(backbone: str, rows: int = 200, seed: int = 0) -> pd.DataFrame:
    """A metrics-like table of `rows` rows for one backbone (deterministic values)."""
    rng = np.random.default_rng(seed)
    return pd.DataFrame(
        {
            "backbone": backbone,
            "metric": [f"m{i}" for i in range(rows)],
            "value": rng.random(rows) * 100,
        }
    )
