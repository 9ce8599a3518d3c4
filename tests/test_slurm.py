"""The Slurm launcher for real on one machine: munged, slurmctld and slurmd from Debian's packages
(soco_pipeline/deploy/slurm.py), feature extraction of backbone partitions and FG-BMK's probe and retrieval
training as Slurm jobs reporting back through Dagster Pipes, compared with the in-process run; and the faults (a job
cancelled, its node gone, a job stuck in the queue) failing with a named error and rerunning identically.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import dagster as dg
import pandas as pd
import pytest

from soco_pipeline.deploy.processes import group_members, start, stop_all, wait_for
from soco_pipeline.deploy.slurm import PARTITION, LocalSlurm, slurm_installed
from soco_pipeline.payloads import table_checksum
from soco_pipeline.payloads.fgbmk_probe import TIMINGS
from soco_pipeline.storage import PROJECT_ROOT, read_parquet
from soco_pipeline.tables import table_for
from tests.core import ORACLES, PER_BACKBONE, materializations
from tests.needs import need
from tests.tiny_families import write_tiny_family_configs

pytestmark = [pytest.mark.stack, pytest.mark.timeout(900)]
RESULT_TABLES = ["feature_manifest", "predictions", "four_choice_predictions", "metrics"]


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    """A single-node Slurm (munged, slurmctld, slurmd) under a temporary folder, SLURM_CONF set for this
    process (sbatch inherits it); every daemon stopped by pid afterwards, and none of ours left running."""
    need(slurm_installed(), "Debian's slurm-wlm and munge")
    need(os.geteuid() == 0, "root (the local Slurm's daemons run as SlurmUser=root)")
    root = tmp_path_factory.mktemp("slurm")
    cluster = LocalSlurm(root)
    t0 = time.monotonic()
    cluster.start()
    print(f"slurm up in {time.monotonic() - t0:.1f} s")
    saved = os.environ.get("SLURM_CONF")
    os.environ.update(cluster.client_env())
    try:
        yield cluster
    finally:
        if saved is None:
            os.environ.pop("SLURM_CONF", None)
        else:
            os.environ["SLURM_CONF"] = saved
        print("slurm stopped:", cluster.stop())
        assert not cluster.leftovers(), cluster.leftovers()
        ours = subprocess.run(["pgrep", "-af", str(root)], capture_output=True, text=True).stdout
        assert not ours.strip(), f"processes of the test's Slurm left running:\n{ours}"


def _launcher(tmp: Path, **kw):
    from soco_pipeline.defs.shared.launchers import StepLauncher

    return StepLauncher(kind="slurm", workdir=str(tmp / "launch"), poll_s=0.5, **kw)


def _materialize(core, launcher, partition: str, assets: list[str], raise_on_error: bool = True):
    from soco_pipeline.defs.definitions import build_definitions

    defs = build_definitions(**core.overrides)
    with core.instance() as instance:
        return dg.materialize(
            list(defs.assets),
            selection=dg.AssetSelection.assets(*assets),
            instance=instance,
            resources={**defs.resources, "launcher": launcher},
            partition_key=partition,
            raise_on_error=raise_on_error,
            run_config={"loggers": {"console": {"config": {"log_level": "WARNING"}}}},
        )


def _forget_features(core, backbone: str) -> None:
    """Delete the partition's feature cache and tables, so that its run extracts every image again."""
    for folder in (core.storage / "features").glob(f"{backbone}*"):
        shutil.rmtree(folder)
    for name in RESULT_TABLES:
        Path(table_for(name).path(str(core.tables), backbone)).unlink(missing_ok=True)


def _table(root: Path, name: str, backbone: str) -> pd.DataFrame:
    return read_parquet(table_for(name).path(str(root), backbone))


def _assert_same(core, reference, backbone: str, tables=RESULT_TABLES) -> None:
    for name in tables:
        a, b = _table(core.tables, name, backbone), _table(reference.tables, name, backbone)
        assert len(a) > 0, (name, backbone)
        if name == "feature_manifest":  # paths are relative to each root; the contents must match
            cols = ["image_id", "checksum", "channels", "grid_h", "grid_w", "spec_hash"]
            a, b = a[cols], b[cols]
        pd.testing.assert_frame_equal(a, b, check_exact=True, obj=f"{name}[{backbone}]")


def _messages(result) -> list[str]:
    return [e.message or "" for e in result.all_events] + [
        str(e.event_specific_data) for e in result.all_events if e.is_step_failure
    ]


def _run_logs(core, run_id: str) -> list[str]:
    with core.instance() as instance:
        return [rec.user_message for rec in instance.all_logs(run_id)]


@pytest.fixture
def work(materialized_core, tmp_path):
    """A copy of the shared core (the in-process reference) to materialize on."""
    return materialized_core.copy_to(tmp_path / "core")


# the login node's instance: the queued run coordinator (Dagster's default, named here), whose queue the
# daemon empties; no automation (its sensors would launch runs of their own), at most two runs at once
DAEMON_INSTANCE = """telemetry:
  enabled: false
run_coordinator:
  module: dagster._core.run_coordinator
  class: QueuedRunCoordinator
  config:
    dequeue_interval_seconds: 1
concurrency:
  runs:
    max_concurrent_runs: 2
auto_materialize:
  enabled: false
  use_sensors: false
freshness:
  enabled: false
"""
DEADLINE_S = 600  # every wait on the daemon's runs: the machine may be loaded


def _backfill(work, partitions: list[str], launch_dir: Path) -> list:
    """What a lab's login node does: `dagster-daemon run` stays up, and `dagster job backfill -j
    evaluate_backbone --partitions ...` (the documented command, in a fresh process) queues one run per
    partition; the daemon dequeues and launches them, and with SOCO_LAUNCHER=slurm their payloads run as
    Slurm jobs. The runs once all have ended; the daemon and everything it started (its code server, the
    run workers) are stopped by pid, and none of their processes is left."""
    from tests.core import CATEGORIES, IMAGES_PER_CATEGORY

    home = work.root / "dagster_home"
    env = {
        **os.environ,
        "DAGSTER_HOME": str(home),
        "SOCO_STORAGE": str(work.storage),
        "SOCO_BACKBONES_DIR": str(work.backbones),
        "SOCO_CATEGORIES": ",".join(CATEGORIES),
        "SOCO_IMAGES_PER_CATEGORY": str(IMAGES_PER_CATEGORY),
        "SOCO_LAUNCHER": "slurm",
        "SOCO_LAUNCH_DIR": str(launch_dir),
    }
    # written last thing before the daemon and the command read it (work.instance() rewrites the file:
    # the polls below open the instance with DagsterInstance.from_config, which only reads it)
    (home / "dagster.yaml").write_text(DAEMON_INSTANCE)
    bin_dir = Path(sys.executable).parent
    workspace = str(PROJECT_ROOT / "workspace.yaml")
    daemon, popen = start(
        "daemon",
        [str(bin_dir / "dagster-daemon"), "run", "-w", workspace],
        work.root / "logs" / "daemon.log",
        env,
        cwd=PROJECT_ROOT,
    )

    def daemon_dead() -> str | None:
        return (
            f"dagster-daemon exited with {popen.returncode}; see {daemon.log}"
            if popen.poll() is not None
            else None
        )

    try:
        args = ["job", "backfill", "-j", "evaluate_backbone", "--partitions", ",".join(partitions)]
        out = subprocess.run(
            [str(bin_dir / "dagster"), *args, "-w", workspace, "--noprompt"],
            env=env,
            cwd=PROJECT_ROOT,
            capture_output=True,
            text=True,
            timeout=DEADLINE_S,
        )
        assert out.returncode == 0, out.stderr[-3000:]
        backfill_id = re.search(r"Launched backfill job `(\w+)`", out.stdout).group(1)

        def runs() -> list:
            with dg.DagsterInstance.from_config(str(home)) as instance:
                return instance.get_runs(dg.RunsFilter(tags={"dagster/backfill": backfill_id}))

        wait_for(
            "the daemon to run the backfill's runs",
            lambda: len(runs()) == len(partitions) and all(r.is_finished for r in runs()),
            DEADLINE_S,
            interval=2.0,
            alive=daemon_dead,
        )
    finally:
        stopped = stop_all([daemon], {"daemon": popen})
        print("dagster-daemon:", stopped, Path(daemon.log).read_text()[-2000:])
    assert not daemon.alive(), group_members(daemon.pgid)

    def ours() -> str:  # the code servers and run workers name the instance's folder
        return subprocess.run(["pgrep", "-af", str(home)], capture_output=True, text=True).stdout.strip()

    wait_for("the backfill's processes to exit", lambda: not ours(), DEADLINE_S)
    launched = re.findall(r"QueuedRunCoordinatorDaemon.*Launched (\d+) run", Path(daemon.log).read_text())
    assert sum(map(int, launched)) == len(partitions), f"the daemon launched {launched}; see {daemon.log}"
    return runs()


def _launched_by_daemon(work, run_id: str) -> bool:
    """Whether the run went through the queue: enqueued by the command, launched (STARTING) after that;
    only the daemon launches a queued run (its log counts them, see the test)."""
    with work.instance() as instance:
        kinds = [rec.dagster_event.event_type for rec in instance.all_logs(run_id) if rec.dagster_event]
    queued, starting = dg.DagsterEventType.RUN_ENQUEUED, dg.DagsterEventType.RUN_STARTING
    return queued in kinds and starting in kinds[kinds.index(queued) :]


@pytest.mark.timeout(1800)  # the command and the daemon's runs have 600 s each, on a loaded machine
def test_backfill_as_slurm_jobs_matches_in_process(slurm, work, materialized_core, tmp_path):
    """A backfill of both oracle partitions (`dagster job backfill`) with the Slurm launcher, run by a
    `dagster-daemon` as on a lab's login node: each run queued by the command and launched by the daemon,
    its features extracted by a Slurm job; the feature checksums, predictions, metrics and the SOCO board
    equal the in-process run's; the job's stdout and Pipes log reach the run's log, the manifest's checksum
    comes back through Pipes."""
    for backbone in ORACLES:
        _forget_features(work, backbone)
    runs = _backfill(work, ORACLES, tmp_path / "launch")
    assert sorted(r.tags["dagster/partition"] for r in runs) == sorted(ORACLES)
    for run in runs:
        backbone = run.tags["dagster/partition"]
        assert run.status == dg.DagsterRunStatus.SUCCESS, _run_logs(work, run.run_id)[-20:]
        assert _launched_by_daemon(work, run.run_id), "the run did not go through the daemon's queue"
        _assert_same(work, materialized_core, backbone)
        logs = _run_logs(work, run.run_id)
        job = next(m for m in logs if m.startswith("submitted Slurm job ")).split()[3]
        assert any(m.startswith(f"[slurm job {job} stdout] payload features on ") for m in logs), logs
        assert any(f"[{backbone}]" in m and "to extract" in m for m in logs), "the payload's Pipes log"
        with work.instance() as instance:
            meta = materializations(instance, "feature_manifest", backbone, limit=1)[0]
            meta = meta.asset_materialization.metadata
        reference = _table(materialized_core.tables, "feature_manifest", backbone)
        assert meta["checksum"].value == table_checksum(reference, "image_id", "checksum")
        assert meta["launcher"].value == "slurm" and meta["slurm_job_id"].value == job
    # the SOCO board over both partitions
    from soco_pipeline.analysis.leaderboard import leaderboard

    boards = [
        leaderboard(pd.concat([_table(c.tables, "metrics", b) for b in ORACLES], ignore_index=True))
        for c in (work, materialized_core)
    ]
    assert len(boards[0]) == len(ORACLES)
    pd.testing.assert_frame_equal(boards[0], boards[1], check_exact=True)


def _paused_job(pause: Path, deadline_s: float = 300.0) -> str:
    """The id of the job whose payload waits at the features_written pause point."""
    wait_for("payload at features_written", (pause / "features_written.paused").exists, deadline_s)
    out = subprocess.run(["squeue", "-h", "-o", "%i", "-t", "R"], capture_output=True, text=True, check=True)
    (job,) = out.stdout.split()
    return job


def _fault_run(work, tmp_path, action, monkeypatch):
    """Run feature_manifest[oracle_part] as a Slurm job held at the features_written pause point while
    `action(job_id)` runs in a thread; the failed result."""
    pause = tmp_path / "pause"
    pause.mkdir()
    monkeypatch.setenv("SOCO_PAUSE_DIR", str(pause))
    errors: list[BaseException] = []

    def act() -> None:
        try:
            action(_paused_job(pause))
        except BaseException as e:  # noqa: BLE001 - reported by the test below
            errors.append(e)

    t = threading.Thread(target=act)
    t.start()
    try:
        result = _materialize(work, _launcher(tmp_path), "oracle_part", ["feature_manifest"], False)
    finally:
        t.join(timeout=120)
        monkeypatch.delenv("SOCO_PAUSE_DIR")
    assert not errors, errors
    assert not result.success
    return result


def _count_materializations(work) -> int:
    with work.instance() as instance:
        return len(materializations(instance, "feature_manifest", "oracle_part"))


def test_scancel_fails_named_and_reruns_identically(slurm, work, materialized_core, tmp_path, monkeypatch):
    """scancel of the running job: the step fails with "Slurm job N was cancelled", no manifest is
    published, and a rerun completes with the in-process results."""
    _forget_features(work, "oracle_part")
    before = _count_materializations(work)
    cancelled: list[str] = []

    def scancel(job: str) -> None:
        cancelled.append(job)
        subprocess.run(["scancel", job], check=True)

    result = _fault_run(work, tmp_path, scancel, monkeypatch)
    text = "\n".join(_messages(result))
    assert f"Slurm job {cancelled[0]} was cancelled" in text, text[-3000:]
    assert _count_materializations(work) == before
    assert not Path(table_for("feature_manifest").path(str(work.tables), "oracle_part")).exists()
    rerun = _materialize(work, _launcher(tmp_path), "oracle_part", PER_BACKBONE)
    assert rerun.success
    _assert_same(work, materialized_core, "oracle_part")


def test_slurmd_killed_fails_named_and_reruns_identically(
    slurm, work, materialized_core, tmp_path, monkeypatch
):
    """slurmd killed -9 while the job runs: slurmctld marks the node down (SlurmdTimeout) and the job
    NODE_FAIL; the step fails with "its node ... went down", nothing is published; with slurmd started
    again the rerun completes with the in-process results."""
    _forget_features(work, "oracle_part")
    before = _count_materializations(work)
    killed: list[str] = []

    def kill_slurmd(job: str) -> None:
        killed.append(job)
        os.kill(slurm.daemon("slurmd").pid, signal.SIGKILL)

    try:
        result = _fault_run(work, tmp_path, kill_slurmd, monkeypatch)
    finally:
        slurm.restart_slurmd()  # the new slurmd also ends the orphaned job step of the killed one
    text = "\n".join(_messages(result))
    assert f"Slurm job {killed[0]}: its node" in text and "went down" in text, text[-3000:]
    assert _count_materializations(work) == before
    assert not Path(table_for("feature_manifest").path(str(work.tables), "oracle_part")).exists()
    rerun = _materialize(work, _launcher(tmp_path), "oracle_part", PER_BACKBONE)
    assert rerun.success
    _assert_same(work, materialized_core, "oracle_part")


def test_job_stuck_in_queue_fails_named(slurm, work, tmp_path):
    """With the partition down, the job waits in the queue; past the launcher's deadline it is cancelled
    and the step fails with a named error."""
    _forget_features(work, "oracle_part")
    subprocess.run(["scontrol", "update", f"PartitionName={PARTITION}", "State=DOWN"], check=True)
    try:
        result = _materialize(
            work, _launcher(tmp_path, queue_deadline_s=3.0), "oracle_part", ["feature_manifest"], False
        )
    finally:
        subprocess.run(["scontrol", "update", f"PartitionName={PARTITION}", "State=UP"], check=True)
    assert not result.success
    text = "\n".join(_messages(result))
    assert "was still pending after 3 s (reason PartitionDown)" in text, text[-3000:]
    left = subprocess.run(["squeue", "-h", "-t", "PD,R"], capture_output=True, text=True, check=True)
    assert not left.stdout.strip(), f"the stuck job was not cancelled: {left.stdout}"


def test_soco_cluster_engine_slurm_starts_and_stops_by_pid(tmp_path):
    """`soco cluster start|status|stop --engine slurm` through the console script, each in a fresh process:
    the node answers `sinfo` idle with the written slurm.env, and after the stop no process of it is left."""
    need(slurm_installed(), "Debian's slurm-wlm and munge")
    need(os.geteuid() == 0, "root (the local Slurm's daemons run as SlurmUser=root)")
    soco = str(Path(sys.executable).parent / "soco")
    root = tmp_path / "slurm"

    def cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [soco, "cluster", *args, "--dir", str(root)], capture_output=True, text=True, timeout=300
        )

    try:
        started = cli("start", "--engine", "slurm")
        assert started.returncode == 0, started.stderr[-2000:]
        assert "slurm up: node idle" in started.stdout
        env_file = (root / "slurm.env").read_text()
        assert (
            f"export SLURM_CONF={root.resolve() / 'slurm.conf'}" in env_file
            and "SOCO_LAUNCHER=slurm" in env_file
        )
        status = cli("status")
        assert status.returncode == 0 and "node: idle" in status.stdout, status.stdout
        sinfo = subprocess.run(
            ["sinfo", "-h", "-o", "%T"],
            env={**os.environ, "SLURM_CONF": str(root / "slurm.conf")},
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert sinfo.stdout.strip() == "idle"
    finally:
        try:
            stopped = cli("stop")
        finally:  # a start or stop that failed or timed out leaves no daemon behind either
            if (root / "slurm.json").exists() and LocalSlurm.attach(root).leftovers():
                LocalSlurm.attach(root).stop()
    assert stopped.returncode == 0, stopped.stderr[-2000:]
    assert {line.split(":")[0] for line in stopped.stdout.splitlines()} == {"munged", "slurmctld", "slurmd"}
    assert not LocalSlurm.attach(root).leftovers()
    ours = subprocess.run(["pgrep", "-af", str(root)], capture_output=True, text=True).stdout
    assert not ours.strip(), ours


def test_a_failing_payload_fails_the_step_with_its_stderr(slurm, work, tmp_path):
    """A payload that raises (a spec whose model the oracle kind does not know) ends its job FAILED: the
    step's error names the job, its state and the end of its stderr, where the spec error names the file."""
    text = (
        (work.backbones / "oracle_part.yaml").read_text().replace("model: oracle_part", "model: oracle_nope")
    )
    (work.backbones / "oracle_broken.yaml").write_text(text)
    with work.instance() as instance:
        instance.add_dynamic_partitions("backbones", ["oracle_broken"])
    result = _materialize(work, _launcher(tmp_path), "oracle_broken", ["feature_manifest"], False)
    assert not result.success
    text = "\n".join(_messages(result))
    assert "ended FAILED (exit code 1:0" in text and "oracle_broken" in text, text[-3000:]
    assert not Path(table_for("feature_manifest").path(str(work.tables), "oracle_broken")).exists()


def test_global_features_as_a_slurm_job_match_in_process(slurm, work, tmp_path):
    """global_feature_manifest[oracle_part] in-process, then again as a Slurm job after its cache folder is
    deleted: the same table and the same features' checksum (reported through Pipes)."""
    from soco_pipeline.defs.shared.launchers import StepLauncher

    def run(launcher) -> tuple[pd.DataFrame, dict]:
        result = _materialize(work, launcher, "oracle_part", ["global_feature_manifest"])
        assert result.success
        with work.instance() as instance:
            rec = materializations(instance, "global_feature_manifest", "oracle_part", limit=1)[0]
        meta = {k: v.value for k, v in rec.asset_materialization.metadata.items()}
        return _table(work.tables, "global_feature_manifest", "oracle_part"), meta

    ref, ref_meta = run(StepLauncher(kind="inprocess"))
    shutil.rmtree(ref_meta["folder"])  # the shared cache folder: the job extracts every image again
    got, meta = run(_launcher(tmp_path))
    pd.testing.assert_frame_equal(got, ref, check_exact=True)
    assert (meta["launcher"], ref_meta["launcher"]) == ("slurm", "inprocess")
    assert meta["checksum"] == ref_meta["checksum"] and meta["rows"] == len(ref) > 0


def test_an_interrupted_step_cancels_its_job(slurm, work, tmp_path, monkeypatch):
    """SIGINT to the run's process while its job runs (Dagster turns it into the interrupt a terminated run
    gets): the step fails interrupted, the job ends CANCELLED, and nothing is published."""
    pause = tmp_path / "pause"
    pause.mkdir()
    monkeypatch.setenv("SOCO_PAUSE_DIR", str(pause))
    _forget_features(work, "oracle_part")
    jobs: list[str] = []

    def interrupt() -> None:
        jobs.append(_paused_job(pause))
        os.kill(os.getpid(), signal.SIGINT)

    t = threading.Thread(target=interrupt)
    t.start()
    try:
        result = _materialize(work, _launcher(tmp_path), "oracle_part", ["feature_manifest"], False)
    finally:
        t.join(timeout=120)
    (job,) = jobs
    assert not result.success
    assert "DagsterExecutionInterruptedError" in "\n".join(_messages(result))
    wait_for(
        f"job {job} cancelled",
        lambda: (
            "JobState=CANCELLED"
            in subprocess.run(["scontrol", "show", "job", "-o", job], capture_output=True, text=True).stdout
        ),
        300,
    )
    assert not Path(table_for("feature_manifest").path(str(work.tables), "oracle_part")).exists()


VIT_TINY = (
    "kind: timm\nmodel: vit_tiny_patch16_224\nweights: none\ninput: {nearest_multiple: 224}\n"
    "normalisation: clip\ndevice: cpu\nseed: 0\n"
)
# per family: its training payload, the backbone (spec text), the unpartitioned tables and the partition's
# upstream tables materialized in-process first, the payload's tables, and a line of its Pipes log
TRAINING = {
    "fgbmk_probe": (
        "vit_tiny",
        VIT_TINY,
        ["fgbmk_items"],
        ["fgbmk_global_features"],
        ["fgbmk_metrics", "fgbmk_probe_predictions"],
        "[vit_tiny] FG-BMK probes and retrieval heads on",
    ),
    "tpips_heads": (
        "dense_sift",
        (PROJECT_ROOT / "assets" / "backbones" / "dense_sift.yaml").read_text(),
        ["tpips_images", "tpips_triplets", "tpips_afc_items", "tpips_ooo", "tpips_afc"],
        ["tpips_features"],
        ["tpips_learned", "tpips_learned_outcomes"],
        "[dense_sift] TPIPS head mid: training on the OOO train split",
    ),
}


@pytest.mark.parametrize("payload", list(TRAINING))
def test_training_as_a_slurm_job_matches_in_process(slurm, tmp_path, payload):
    """A family's training step (FG-BMK's linear probes and retrieval heads, TPIPS's learned heads; the tiny
    family configs) in-process, then again as a Slurm job after its stored tables are deleted: the same rows
    in every table the step writes (but for wall-clock training times), and the same checksum reported
    through Pipes; the job's stdout and the payload's Pipes log reach the run's log."""
    from soco_pipeline.defs.definitions import build_definitions
    from soco_pipeline.defs.shared.launchers import StepLauncher

    backbone, spec, data, upstream, trained, pipes_line = TRAINING[payload]
    backbones, storage, tables = tmp_path / "backbones", tmp_path / "storage", tmp_path / "storage" / "tables"
    backbones.mkdir()
    (backbones / f"{backbone}.yaml").write_text(spec)
    defs = build_definitions(
        storage_root=str(storage),
        backbones_dir=str(backbones),
        device="cpu",
        **write_tiny_family_configs(tmp_path / "configs"),
    )
    (tmp_path / "home").mkdir()
    with dg.instance_for_test(temp_dir=str(tmp_path / "home")) as instance:
        instance.add_dynamic_partitions("backbones", [backbone])

        def run(keys: list[str], launcher, partition: str | None = backbone) -> tuple[str, dict]:
            result = dg.materialize(
                list(defs.assets),
                selection=dg.AssetSelection.assets(*keys),
                instance=instance,
                resources={**defs.resources, "launcher": launcher},
                partition_key=partition,
                run_config={"loggers": {"console": {"config": {"log_level": "WARNING"}}}},
            )
            assert result.success
            if partition is None:
                return result.run_id, {}
            rec = materializations(instance, trained[0], backbone, limit=1)[0]
            return result.run_id, {k: v.value for k, v in rec.asset_materialization.metadata.items()}

        run(data, StepLauncher(kind="inprocess"), None)
        _, ref_meta = run([*upstream, *trained], StepLauncher(kind="inprocess"))
        ref = {t: _table(tables, t, backbone) for t in trained}
        for t in trained:  # else the step reuses its stored rows (nothing it reads changed)
            Path(table_for(t).path(str(tables), backbone)).unlink()
        run_id, meta = run(trained, _launcher(tmp_path))
        logs = [rec.user_message for rec in instance.all_logs(run_id)]
    for t in trained:  # every column but FG-BMK's wall-clock training times
        got, want = (
            df.drop(columns=TIMINGS, errors="ignore") for df in (_table(tables, t, backbone), ref[t])
        )
        assert len(got) > 0, t
        pd.testing.assert_frame_equal(got, want, check_exact=True, obj=t)
    assert (meta["launcher"], ref_meta["launcher"]) == ("slurm", "inprocess")
    assert meta["checksum"] == ref_meta["checksum"]
    job = str(meta["slurm_job_id"])
    assert any(m.startswith(f"[slurm job {job} stdout] payload {payload} on ") for m in logs), logs
    assert any(pipes_line in m for m in logs), "the payload's Pipes log"
