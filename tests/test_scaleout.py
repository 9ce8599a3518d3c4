"""Scale-out for real on one machine: Redis, Postgres, SeaweedFS (S3), code server, daemon, webserver and
Celery workers (2 on the default queue, 1 on `gpu`), all on free loopback ports, stopped by pid.

The data and pair tables are materialized in-process into the cluster's instance and bucket; a backfill
of 2 cheap backbone partitions (a classical extractor and an oracle) then runs through the queued run coordinator and dagster-celery. The
results must equal an in-process run's exactly; a worker process killed with -9 mid-run fails its run
cleanly, and re-executing it gives the same results with nothing half-written in the bucket.
"""

from __future__ import annotations

import io
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
import requests

from soco_pipeline.deploy.processes import group_members, signal_group, wait_for
from soco_pipeline.deploy.stack import BUCKET, LocalStack
from soco_pipeline.runtime.pause_points import pause_key
from soco_pipeline.storage import PROJECT_ROOT
from tests.needs import need

# the whole distributed stack starts in the first test's setup
pytestmark = [pytest.mark.stack, pytest.mark.timeout(2400)]  # a hang guard: every wait has its own deadline


@pytest.fixture(autouse=True, scope="module")
def _servers_installed():
    """Skipped without Debian's redis-server and postgresql; under CI=true that is a failure (tests/needs.py)."""
    need(bool(shutil.which("redis-server")), "Debian's redis-server")
    need(bool(list(Path("/usr/lib/postgresql").glob("*/bin/initdb"))), "Debian's postgresql")


CATEGORIES = ["car", "bus", "chair"]
BACKFILL = ["dense_sift", "oracle_part"]  # two runs: held workers overlap their steps by construction
KILLED = "dense_sift_again"  # a fifth partition (dense_sift under another name): a feature step to kill
LOST = "dense_sift_lost"  # a sixth one: its whole gpu worker is killed mid-step
# Seconds a worker holding a step may miss pings (the daemon's sensor ticks every 5 s): several ticks, so a
# live worker slow to answer on a loaded machine is never taken for lost; the lost one is failed after it.
LOST_GRACE_S = 20
# Generous deadlines for every wait (a loaded machine is slow, never stuck): a wait ends on its condition.
DEADLINE_S = 300
# The feature steps the kill tests stop at a pause point (soco_pipeline/runtime/pause_points.py) in the gpu worker:
# the kill lands mid-extraction whatever the load, and no other step of the cluster pauses.
PAUSED = {b: pause_key("features_written", b) for b in (KILLED, LOST)}
PER_BACKBONE = ["feature_manifest", "predictions", "four_choice_predictions", "metrics"]
RESULT_TABLES = ["feature_manifest", "predictions", "four_choice_predictions", "metrics"]


def _specs(folder: Path) -> None:
    folder.mkdir()
    src = PROJECT_ROOT / "assets" / "backbones"
    for b in BACKFILL:
        shutil.copy(src / f"{b}.yaml", folder / f"{b}.yaml")
    shutil.copy(src / "dense_sift.yaml", folder / f"{KILLED}.yaml")
    shutil.copy(src / "dense_sift.yaml", folder / f"{LOST}.yaml")


def _cli(*args: str, env: dict[str, str] | None = None, timeout: float) -> subprocess.CompletedProcess:
    """`soco cluster ...` in its own process, as a user runs it."""
    return subprocess.run(
        [sys.executable, "-m", "soco_pipeline.cli.soco", "cluster", *args],
        env=env,
        cwd=PROJECT_ROOT,
        timeout=timeout,
        capture_output=True,
        text=True,
    )


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """`soco cluster start` in a subprocess; the test attaches to it through its state file and stops it
    with `soco cluster stop` from another process: by the pids recorded there. The services' logs are
    kept in pytest's temporary folder (`cluster-logs*`), the rest is removed."""
    import copy

    import fsspec.config

    root = Path(tempfile.mkdtemp(prefix="soco-cluster-"))
    root.chmod(0o755)  # Postgres runs as the postgres user and must enter its data folder below
    _specs(root / "backbones")
    (root / "pause").mkdir()
    env = {
        **os.environ,
        # every service of the stack (the workers among them) stops at the pause points PAUSED only
        "SOCO_PAUSE_DIR": str(root / "pause"),
        "SOCO_PAUSE_AT": ",".join(PAUSED.values()),
        "SOCO_BACKBONES_DIR": str(root / "backbones"),
        "SOCO_CATEGORIES": ",".join(CATEGORIES),
        "SOCO_IMAGES_PER_CATEGORY": "4",
        "PYTHONPATH": os.pathsep.join(x for x in (str(PROJECT_ROOT), os.environ.get("PYTHONPATH")) if x),
    }
    saved, saved_conf = dict(os.environ), copy.deepcopy(fsspec.config.conf)
    stack_dir = root / "stack"
    t0 = time.monotonic()
    try:
        started = _cli(
            "start",
            "--dir",
            str(stack_dir),
            "--workers",
            "2",
            "--gpu-workers",
            "1",
            "--max-concurrent-runs",
            "4",
            "--no-automation",
            "--timeout",
            str(DEADLINE_S),
            "--lost-worker-grace",
            str(LOST_GRACE_S),
            env=env,
            timeout=3 * DEADLINE_S,
        )
        print(started.stdout)
        assert started.returncode == 0, started.stderr[-3000:]
        print(f"stack up in {time.monotonic() - t0:.0f} s")
        stack = LocalStack.attach(stack_dir)
        os.environ.update(
            {k: env[k] for k in ("SOCO_BACKBONES_DIR", "SOCO_CATEGORIES", "SOCO_IMAGES_PER_CATEGORY")}
        )
        os.environ.update(stack.client_env())
        fsspec.config.set_conf_env(fsspec.config.conf)  # the S3 endpoint for this process too
        yield stack
    finally:
        os.environ.clear()
        os.environ.update(saved)
        fsspec.config.conf.clear()
        fsspec.config.conf.update(saved_conf)
        t1 = time.monotonic()
        try:
            stopped = _cli("stop", "--dir", str(stack_dir), env=env, timeout=DEADLINE_S)
            print(
                f"stopped in {time.monotonic() - t1:.0f} s:",
                stopped.stdout.replace("\n", "; "),
                stopped.stderr[-2000:],
            )
        except subprocess.TimeoutExpired:
            print(f"`soco cluster stop` still running after {DEADLINE_S} s")
        services = LocalStack.attach(stack_dir).services if (stack_dir / "stack.json").exists() else []
        leftovers = {s.name: group_members(s.pgid) for s in services if group_members(s.pgid)}
        for s in services:  # whatever the stop left is killed here, so no test run leaves a stack behind
            signal_group(s.pgid, signal.SIGKILL)
        if (stack_dir / "logs").exists():
            kept = tmp_path_factory.mktemp("cluster-logs")
            shutil.copytree(stack_dir / "logs", kept, dirs_exist_ok=True)
            print(f"the services' logs: {kept}")
        shutil.rmtree(root, ignore_errors=True)
        assert not leftovers, f"processes left behind: {leftovers}"


def _overrides(stack: LocalStack, prefix: str) -> dict:
    return dict(
        storage_root=f"s3://{BUCKET}/{prefix}",
        backbones_dir=os.environ["SOCO_BACKBONES_DIR"],
        categories=CATEGORIES,
        images_per_category=4,
    )


def _materialize(instance, overrides: dict, selection, partition_key=None) -> None:
    import dagster as dg

    from soco_pipeline.defs.definitions import build_definitions

    defs = build_definitions(**overrides)
    result = dg.materialize(
        list(defs.assets),
        selection=selection,
        instance=instance,
        resources=defs.resources,
        partition_key=partition_key,
        raise_on_error=True,
        run_config={"loggers": {"console": {"config": {"log_level": "WARNING"}}}},
    )
    assert result.success


def _graphql(stack: LocalStack, query: str, variables: dict) -> dict:
    """POST a GraphQL query to the webserver; on an error, what it said (the body names the Python error
    that a 500 stands for) and the tail of its log."""
    r = requests.post(
        f"http://127.0.0.1:{stack.ports['webserver']}/graphql",
        json={"query": query, "variables": variables},
        timeout=120,
    )
    log = Path(stack.root) / "logs" / "webserver.log"
    tail = log.read_text(errors="replace")[-4000:] if log.exists() else "(no webserver log)"
    assert r.ok, f"HTTP {r.status_code} from the webserver: {r.text[-6000:]}\nwebserver log:\n{tail}"
    body = r.json()
    assert not body.get("errors"), body["errors"]
    return body["data"]


def _wait_runs(instance, run_ids: list[str], timeout: float) -> dict[str, str]:
    import dagster as dg

    done = {"SUCCESS", "FAILURE", "CANCELED"}

    def finished() -> bool:
        runs = instance.get_runs(dg.RunsFilter(run_ids=run_ids))
        return len(runs) == len(run_ids) and all(r.status.value in done for r in runs)

    wait_for(f"runs {run_ids}", finished, timeout, interval=1.0)
    return {r.run_id: r.status.value for r in instance.get_runs(dg.RunsFilter(run_ids=run_ids))}


def _steps(instance, run_id: str) -> list[dict]:
    """Per step of a run: worker (Celery node name), start and end time, and whether it succeeded."""
    from dagster import DagsterEventType

    steps: dict[str, dict] = {}
    for rec in instance.all_logs(run_id):
        ev = rec.dagster_event
        if ev is None or rec.step_key is None:
            continue
        s = steps.setdefault(rec.step_key, {"step": rec.step_key, "run_id": run_id})
        if (
            ev.event_type == DagsterEventType.ENGINE_EVENT
            and ev.engine_event_data
            and "Celery worker" in ev.engine_event_data.metadata
        ):
            s["worker"] = ev.engine_event_data.metadata["Celery worker"].value.split("@")[0]
        elif ev.event_type == DagsterEventType.STEP_START:
            s["start"] = rec.timestamp
        elif ev.event_type in (DagsterEventType.STEP_SUCCESS, DagsterEventType.STEP_FAILURE):
            s["end"] = rec.timestamp
            s["ok"] = ev.event_type == DagsterEventType.STEP_SUCCESS
    return list(steps.values())


def _assert_same_results(stack: LocalStack, backbone: str, ref_prefix: str) -> None:
    from soco_pipeline.storage import read_parquet
    from soco_pipeline.tables import table_for

    dist, ref = (f"s3://{BUCKET}/{p}/tables" for p in (stack.storage_prefix, ref_prefix))
    for name in RESULT_TABLES:
        a = read_parquet(table_for(name).path(dist, backbone))
        b = read_parquet(table_for(name).path(ref, backbone))
        assert len(a) > 0, (name, backbone)
        pd.testing.assert_frame_equal(a, b, check_exact=True, obj=f"{name}[{backbone}]")


@pytest.fixture(scope="module")
def data(cluster):
    """Data and pair tables in the cluster's bucket and instance; a copy of them under `reference/`."""
    import dagster as dg

    from soco_pipeline.defs.shared.partitions import backbones_partitions

    t0 = time.monotonic()
    with dg.DagsterInstance.get() as instance:
        assert type(instance.run_storage).__name__ == "PostgresRunStorage"
        _materialize(
            instance, _overrides(cluster, cluster.storage_prefix), dg.AssetSelection.groups("data", "pairs")
        )
        existing = set(instance.get_dynamic_partitions(backbones_partitions.name))
        instance.add_dynamic_partitions(
            backbones_partitions.name, [b for b in [*BACKFILL, KILLED, LOST] if b not in existing]
        )
    fs = cluster.s3fs()
    for sub in ("tables", "embedded"):
        fs.copy(f"{BUCKET}/{cluster.storage_prefix}/{sub}", f"{BUCKET}/reference/{sub}", recursive=True)
    print(f"data and pairs in {time.monotonic() - t0:.0f} s")
    return "reference"


def _reference(cluster: LocalStack, ref_prefix: str, backbones: list[str]) -> None:
    """The same partitions in-process (Dagster's in-process executor, a throwaway instance)."""
    import dagster as dg

    from soco_pipeline.defs.shared.partitions import backbones_partitions

    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions(backbones_partitions.name, backbones)
        for b in backbones:
            _materialize(
                instance, _overrides(cluster, ref_prefix), dg.AssetSelection.assets(*PER_BACKBONE), b
            )


def test_stack_services_answer(cluster):
    status = cluster.status()
    assert set(status) == {
        "redis",
        "postgres",
        "seaweedfs",
        "code_server",
        "daemon",
        "webserver",
        "worker-1",
        "worker-2",
        "gpu-worker-1",
    }
    assert all(status.values()), status
    # A ping's reply may come late on a loaded machine: every worker answers within the deadline.
    expected = ["gpu-worker-1", "worker-1", "worker-2"]
    assert _eventually(lambda: cluster.worker_names() == expected), cluster.worker_names()
    # Every service runs in its own session, so a stop by process group reaches its children. The pids come
    # from the state file: a `soco cluster restart` run by another test (another process) records new ones.
    for svc in LocalStack.attach(cluster.root).services:
        assert os.getsid(svc.pid) == svc.pid, svc.name


def _backfill_runs(instance, backfill_id: str) -> list:
    import dagster as dg

    return instance.get_runs(dg.RunsFilter(tags={"dagster/backfill": backfill_id}))


@pytest.fixture(scope="module")
def backfill_features(cluster, data):
    """The backfill of BACKFILL launched through GraphQL as the UI does, up to every run's feature step done
    on the gpu worker while the two default-queue workers were held; with the in-process reference of the
    same partitions under `data`, computed meanwhile. The workers go on before it returns."""
    import dagster as dg

    t0 = time.monotonic()
    launch = """
    mutation Backfill($p: LaunchBackfillParams!) {
      launchPartitionBackfill(backfillParams: $p) {
        __typename ... on LaunchBackfillSuccess { backfillId } ... on PythonError { message stack }
      }
    }"""
    params = {
        "selector": {
            "partitionSetName": "evaluate_backbone_partition_set",
            "repositorySelector": {
                "repositoryLocationName": "soco_pipeline",
                "repositoryName": "__repository__",
            },
        },
        "partitionNames": BACKFILL,
    }
    # The default-queue workers are held (SIGSTOP) until every run's feature step is done, so that when they
    # go on the queue holds the next steps of every run: two workers that each take the next step as
    # soon as they finish one then run steps of different runs at the same time by construction, whatever
    # the machine's load (left to timing, four runs started ~10 s apart under load never overlapped).
    held = [svc for svc in LocalStack.attach(cluster.root).services if svc.name in ("worker-1", "worker-2")]
    assert len(held) == 2, [svc.name for svc in LocalStack.attach(cluster.root).services]
    with dg.DagsterInstance.get() as instance:

        def steps() -> list[dict]:
            return [s for r in _backfill_runs(instance, backfill_id) for s in _steps(instance, r.run_id)]

        def features_done() -> bool:
            done = [s for s in steps() if s["step"] == "feature_manifest" and s.get("ok")]
            return len(done) == len(BACKFILL)

        for svc in held:
            os.killpg(svc.pgid, signal.SIGSTOP)
        try:
            res = _graphql(cluster, launch, {"p": params})["launchPartitionBackfill"]
            assert res["__typename"] == "LaunchBackfillSuccess", res
            backfill_id = res["backfillId"]
            # In-process reference while the cluster works (this process is otherwise idle). The backfill
            # daemon picks the backfill up on its next 30 s tick (Dagster's fixed interval).
            t1 = time.monotonic()
            _reference(cluster, data, BACKFILL)
            print(f"in-process reference of {len(BACKFILL)} partitions: {time.monotonic() - t1:.0f} s")
            wait_for(
                "the backfill runs",
                lambda: len(_backfill_runs(instance, backfill_id)) == len(BACKFILL),
                DEADLINE_S,
                interval=1.0,
            )
            wait_for("every feature step on the gpu worker", features_done, DEADLINE_S, interval=1.0)
            while_held = steps()
        finally:
            for svc in held:
                os.killpg(svc.pgid, signal.SIGCONT)
    print(f"feature steps of {len(BACKFILL)} partitions done {time.monotonic() - t0:.0f} s after launch")
    return {"backfill_id": backfill_id, "steps_while_held": while_held}


@pytest.fixture(scope="module")
def backfill(backfill_features):
    """The backfill finished (every run SUCCESS): its steps, and the partition of each run: what several
    tests inspect, in whatever order they run."""
    import dagster as dg

    t0 = time.monotonic()
    with dg.DagsterInstance.get() as instance:
        runs = _backfill_runs(instance, backfill_features["backfill_id"])
        statuses = _wait_runs(instance, [r.run_id for r in runs], timeout=DEADLINE_S)
        assert set(statuses.values()) == {"SUCCESS"}, statuses
        steps = [s for r in runs for s in _steps(instance, r.run_id)]
        partition = {r.run_id: r.tags["dagster/partition"] for r in runs}
    print(
        f"backfill of {len(BACKFILL)} partitions done {time.monotonic() - t0:.0f} s after its workers went on"
    )
    return {"steps": steps, "partition": partition}


def test_a_backfill_runs_one_run_per_partition_and_extracts_on_the_gpu_worker(backfill_features):
    """While the default workers were held, each partition's run had started its feature step on the gpu
    worker (tagged for the `gpu` queue) and finished it there, and no other step had started."""
    steps = backfill_features["steps_while_held"]
    assert len({s["run_id"] for s in steps}) == len(BACKFILL), steps
    started = [s for s in steps if "start" in s]
    assert sorted(s["step"] for s in started) == ["feature_manifest"] * len(BACKFILL), started
    assert all(s.get("ok") and s["worker"] == "gpu-worker-1" for s in started), started


def test_backfill_on_celery_workers_equals_in_process(cluster, data, backfill):
    steps, partition = backfill["steps"], backfill["partition"]
    t_first = min(s["start"] for s in steps)
    for s in sorted(steps, key=lambda s: s["start"]):
        print(
            f"  {s['worker']:13s} {s['start'] - t_first:6.1f} {s['end'] - t_first:6.1f} "
            f"{partition[s['run_id']]:18s} {s['step']}"
        )
    assert len(steps) == len(BACKFILL) * len(PER_BACKBONE)
    assert all(s.get("ok") and "worker" in s for s in steps), steps
    # Feature extraction (the `gpu` pool, tagged for the `gpu` queue) only on the gpu worker, the rest never.
    for s in steps:
        on_gpu = s["worker"].startswith("gpu-worker")
        assert on_gpu == (s["step"] == "feature_manifest"), s
    # Steps of different partitions overlapped in time on both default workers (the fixture held the two
    # workers until every run's next steps were queued).
    default = [s for s in steps if not s["worker"].startswith("gpu-worker")]
    assert {s["worker"] for s in default} == {"worker-1", "worker-2"}
    overlaps = [
        (a["step"], partition[a["run_id"]], b["step"], partition[b["run_id"]])
        for a in default
        for b in default
        if a["worker"] == "worker-1"
        and b["worker"] == "worker-2"
        and a["run_id"] != b["run_id"]
        and a["start"] < b["end"]
        and b["start"] < a["end"]
    ]
    assert overlaps, sorted((s["worker"], s["start"], s["end"], s["step"]) for s in default)
    for b in BACKFILL:
        _assert_same_results(cluster, b, data)


def _pool_child(svc) -> int:
    """The Celery pool process of a worker (the one that executes the step): the grandchild of the
    `dagster-celery worker start` process we started (it runs `celery worker`, which forks the pool)."""

    def ppid(pid: int) -> int:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return int(stat[stat.rindex(")") + 2 :].split()[1])

    members = group_members(svc.pgid)
    celery_main = [p for p in members if ppid(p) == svc.pid]
    pool = [p for p in members if ppid(p) in celery_main]
    assert len(celery_main) == 1 and len(pool) == 1, (celery_main, pool)
    return pool[0]


def _assert_nothing_half_written(cluster: LocalStack, backbone: str) -> None:
    from soco_pipeline.storage import filesystem, is_temporary, list_published, read_bytes, read_parquet

    root = f"s3://{BUCKET}/{cluster.storage_prefix}"
    published = list_published(f"{root}/features/{backbone}")
    manifest_path = next(p for p in published if p.endswith("manifest.parquet"))
    manifest = read_parquet(f"s3://{manifest_path}")
    folder = manifest_path.rsplit("/", 1)[0]
    npys = sorted(p for p in published if p.endswith(".npy"))
    assert len(npys) == len(manifest) == 4 * len(CATEGORIES)
    by_path = dict(zip(manifest.path, manifest.checksum, strict=True))
    from soco_pipeline.features.layout import checksum_matches

    for p in npys:
        data = read_bytes(f"s3://{p}")
        rel = p[len(folder.rsplit("/", 2)[0]) + 1 :]
        assert checksum_matches(data, by_path[rel]), p
        np.load(io.BytesIO(data), allow_pickle=False)  # whole, with its .npy header
    for p in list_published(f"{root}/tables"):
        if p.endswith(".parquet"):
            read_parquet(f"s3://{p}")  # every published table reads
    fs, folder_path = filesystem(f"{root}/features/{backbone}")
    leftovers = [p for p in fs.find(folder_path) if is_temporary(p)]
    # A killed writer may leave a `.tmp-` object beside (never under) a final key; listers skip it.
    assert set(fs.find(folder_path)) - set(leftovers) == set(published)
    print(
        f"{len(published)} published objects of {backbone}, all whole; {len(leftovers)} temporary leftovers"
    )


def _launch(cluster: LocalStack, partition: str) -> str:
    """Launch one evaluate_backbone run of `partition` through GraphQL, as the UI does; its run id."""
    launch = """
    mutation Launch($p: ExecutionParams!) {
      launchPipelineExecution(executionParams: $p) {
        __typename ... on LaunchRunSuccess { run { runId } } ... on PythonError { message stack }
      }
    }"""
    selector = {
        "repositoryLocationName": "soco_pipeline",
        "repositoryName": "__repository__",
        "pipelineName": "evaluate_backbone",
    }
    params = {
        "selector": selector,
        "mode": "default",
        "runConfigData": "{}",
        "executionMetadata": {"tags": [{"key": "dagster/partition", "value": partition}]},
    }
    res = _graphql(cluster, launch, {"p": params})["launchPipelineExecution"]
    assert res["__typename"] == "LaunchRunSuccess", res
    return res["run"]["runId"]


def _paused_step(cluster: LocalStack, instance, partition: str, run_id: str) -> int:
    """Until the feature step of run `run_id` (of `partition`) waits at its pause point, after its first
    batch of tensors is written: the pid of the process that runs it."""
    import dagster as dg

    flag = Path(cluster.root).parent / "pause" / f"{PAUSED[partition]}.paused"

    def run_ended() -> str | None:
        run = instance.get_run_by_id(run_id)
        ended = run is not None and run.status in (dg.DagsterRunStatus.SUCCESS, dg.DagsterRunStatus.FAILURE)
        return f"run {run_id} ended {run.status.value} before its pause point" if ended else None

    wait_for(
        f"the feature step of {partition} at its pause point",
        lambda: flag.exists() and flag.read_text().strip().isdigit(),
        DEADLINE_S,
        interval=0.2,
        alive=run_ended,
    )
    fs = cluster.s3fs()
    feats = f"{BUCKET}/{cluster.storage_prefix}/features/{partition}"
    assert any(p.endswith(".npy") for p in fs.find(feats)), f"no tensor of {partition} in the bucket yet"
    return int(flag.read_text())


def _resume(cluster: LocalStack, partition: str) -> None:
    """Let the pause point of `partition` go on, now and in every later pass (the re-execution's)."""
    (Path(cluster.root).parent / "pause" / f"{PAUSED[partition]}.resume").write_text("")


def _eventually(check, timeout: float = DEADLINE_S) -> bool:
    """Whether `check()` comes true within `timeout` seconds (polled each second)."""
    try:
        wait_for("condition", check, timeout, interval=1.0)
    except TimeoutError:
        return False
    return True


def _reexecute_from_failure(cluster: LocalStack, instance, partition: str, run_id: str, data: str) -> None:
    """Re-execute the failed run `run_id` (of `partition`) from failure: it must succeed with the in-process
    results and nothing half-written."""
    reexec = """
    mutation Re($p: ReexecutionParams!) {
      launchPipelineReexecution(reexecutionParams: $p) {
        __typename ... on LaunchRunSuccess { run { runId } } ... on PythonError { message stack }
      }
    }"""
    res = _graphql(cluster, reexec, {"p": {"parentRunId": run_id, "strategy": "FROM_FAILURE"}})
    res = res["launchPipelineReexecution"]
    assert res["__typename"] == "LaunchRunSuccess", res
    child = res["run"]["runId"]
    _reference(cluster, data, [partition])
    statuses = _wait_runs(instance, [child], timeout=DEADLINE_S)
    assert set(statuses.values()) == {"SUCCESS"}, statuses
    _assert_same_results(cluster, partition, data)
    _assert_nothing_half_written(cluster, partition)


def _gpu_worker(cluster: LocalStack):
    return next(s for s in LocalStack.attach(cluster.root).services if s.name == "gpu-worker-1")


@pytest.fixture(scope="module")
def pool_killed(cluster, data, backfill):
    """A run of KILLED whose feature step's Celery pool process was SIGKILLed mid-extraction (the OOM
    killer): what the run and the gpu worker did next, once the worker runs a new pool process. After the
    backfill, so that no other run shares the workers."""
    import dagster as dg

    gpu = _gpu_worker(cluster)
    with dg.DagsterInstance.get() as instance:
        run_id = _launch(cluster, KILLED)
        victim = _paused_step(cluster, instance, KILLED, run_id)
        assert victim == _pool_child(gpu), "the feature step runs in the gpu worker's pool process"
        os.kill(victim, signal.SIGKILL)
        _resume(cluster, KILLED)
        status = _wait_runs(instance, [run_id], timeout=DEADLINE_S)[run_id]
        feature_steps = [s for s in _steps(instance, run_id) if s["step"] == "feature_manifest"]
        wait_for(
            "the gpu worker replaced its pool process",
            lambda: cluster.worker_names().count("gpu-worker-1") == 1 and _pool_child(gpu) != victim,
            DEADLINE_S,
            interval=1.0,
        )
    return {"run_id": run_id, "status": status, "feature_steps": feature_steps}


def test_kill_9_of_a_worker_pool_process_fails_its_run(pool_killed):
    """Celery fails the task of a dead pool process itself (WorkerLostError), so the run fails cleanly at
    its feature step; the worker goes on with a new pool process (the fixture waited for it)."""
    assert pool_killed["status"] == "FAILURE", pool_killed
    # its feature step started and never succeeded (Celery's WorkerLostError fails the run; the step itself
    # may have no failure event)
    steps = pool_killed["feature_steps"]
    assert len(steps) == 1 and "start" in steps[0] and not steps[0].get("ok"), steps


def test_a_run_failed_by_a_killed_pool_process_reexecutes_from_failure(cluster, data, pool_killed):
    """Re-executing it from failure (its feature step on the new pool process) gives the in-process results
    with nothing half-written in the bucket."""
    import dagster as dg

    with dg.DagsterInstance.get() as instance:
        _reexecute_from_failure(cluster, instance, KILLED, pool_killed["run_id"], data)


@pytest.fixture(scope="module")
def worker_lost(cluster, data, backfill):
    """A run of LOST whose whole gpu worker (main process and pool, as with a lost machine) was SIGKILLed
    mid-extraction: what the broker, the run and its events showed, and `soco cluster restart` of the
    worker after. After the backfill, so that no other run shares the workers."""
    import dagster as dg
    from dagster import DagsterEventType

    from soco_pipeline.deploy.lost_workers import celery_app, taken_tasks

    gpu = _gpu_worker(cluster)
    env = cluster.client_env()
    app = celery_app(env["SOCO_CELERY_BROKER"], env["SOCO_CELERY_BACKEND"])

    def engine_texts() -> list[str]:
        return [
            r.dagster_event.message or ""
            for r in instance.all_logs(run_id, of_type=DagsterEventType.ENGINE_EVENT)
        ]

    def sensor_said() -> bool:
        return any("stopped answering pings" in t and "feature_manifest" in t for t in engine_texts())

    with dg.DagsterInstance.get() as instance:
        run_id = _launch(cluster, LOST)
        pid = _paused_step(cluster, instance, LOST, run_id)
        assert pid == _pool_child(gpu), "the feature step runs in the gpu worker's pool process"
        # Held at the pause point, the step has taken its message and cannot have acked it (acks_late).
        unacked = [t.step_keys for t in taken_tasks(app) if t.run_id == run_id]
        signal_group(gpu.pgid, signal.SIGKILL)
        _resume(cluster, LOST)
        t_kill = time.monotonic()
        wait_for("the gpu worker's processes gone", lambda: not gpu.alive(), DEADLINE_S, interval=0.2)
        status = _wait_runs(instance, [run_id], timeout=DEADLINE_S)[run_id]
        print(f"run failed {time.monotonic() - t_kill:.0f} s after its whole worker was killed")
        # The sensor stores the task's failure (which fails the run), then takes the message off the
        # broker and writes its engine event: both may land after the run's failure.
        left_unacked = not _eventually(lambda: not any(t.run_id == run_id for t in taken_tasks(app)))
        _eventually(sensor_said)
        texts = engine_texts()
        run_failures = len(instance.all_logs(run_id, of_type=DagsterEventType.RUN_FAILURE))
    restarted = _cli(
        "restart",
        "--dir",
        str(cluster.root),
        "--service",
        "gpu-worker-1",
        "--timeout",
        str(DEADLINE_S),
        env={**os.environ},
        timeout=DEADLINE_S + 60,
    )
    # The restarting shell has none of the stack's SOCO_* settings; the new worker must have them all.
    new_gpu = _gpu_worker(cluster)
    environ = Path(f"/proc/{new_gpu.pid}/environ").read_bytes().split(b"\0")
    return {
        "restarted_settings": {
            k: v for k, _, v in (e.decode().partition("=") for e in environ) if k.startswith("SOCO_PAUSE")
        },
        "run_id": run_id,
        "unacked_at_kill": unacked,
        "status": status,
        "engine_texts": texts,
        "run_failures": run_failures,
        "unacked_after": left_unacked,
        "restarted": restarted,
    }


def test_kill_9_of_a_whole_worker_is_failed_by_the_sensor(cluster, worker_lost):
    """Nobody acks or fails the dead worker's task, so the lost-worker sensor must fail the step after the
    grace period, and take its message off the broker; `soco cluster restart` brings the worker back."""
    lost = worker_lost
    assert lost["unacked_at_kill"] == [("feature_manifest",)], "the killed step's message is unacked"
    assert lost["status"] == "FAILURE", lost["status"]
    texts = lost["engine_texts"]
    assert any("stopped answering pings" in t and "feature_manifest" in t for t in texts), texts[-5:]
    assert lost["run_failures"] >= 1, "a RUN_FAILURE event ends it"
    assert not lost["unacked_after"], "no message left to redeliver"
    assert lost["restarted"].returncode == 0, lost["restarted"].stderr[-3000:]
    assert lost["restarted_settings"].get("SOCO_PAUSE_AT") == ",".join(PAUSED.values()), lost[
        "restarted_settings"
    ]
    assert _eventually(lambda: "gpu-worker-1" in cluster.worker_names()), cluster.worker_names()


def test_a_run_failed_by_the_sensor_reexecutes_on_the_restarted_worker(cluster, data, worker_lost):
    """After the restart, re-executing the run from failure gives the in-process results with nothing
    half-written in the bucket."""
    import dagster as dg

    assert worker_lost["restarted"].returncode == 0, worker_lost["restarted"].stderr[-3000:]
    with dg.DagsterInstance.get() as instance:
        _reexecute_from_failure(cluster, instance, LOST, worker_lost["run_id"], data)


def test_tables_and_features_live_in_the_bucket(cluster, data, backfill):
    fs = cluster.s3fs()
    listing = fs.find(f"{BUCKET}/{cluster.storage_prefix}")
    print(f"{len(listing)} objects in s3://{BUCKET}/{cluster.storage_prefix}, e.g. {listing[:3]}")
    tables = [p for p in listing if "/tables/" in p and p.endswith(".parquet")]
    features = [p for p in listing if "/features/" in p and p.endswith(".npy")]
    assert any(p.endswith("tables/image_set.parquet") for p in tables)
    for b in BACKFILL:
        assert any(p.endswith(f"tables/metrics/{b}.parquet") for p in tables), b
        assert sum(f"/features/{b}/" in p for p in features) == 4 * len(CATEGORIES), b
    # `soco sql` with the cluster's environment queries the tables in the bucket (no local results file).
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "soco_pipeline.cli.soco",
            "sql",
            "SELECT DISTINCT backbone FROM metrics ORDER BY 1",
        ],
        env={**os.environ},
        cwd=PROJECT_ROOT,
        timeout=DEADLINE_S,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert set(BACKFILL) <= set(done.stdout.split()), done.stdout


def test_a_copied_bucket_prefix_reads_its_own_images(cluster, data):
    """`data` copied the storage prefix's tables and images to `reference/`: its image table names the copy's
    images (paths stored relative to the storage root, issue 38), with the same contents."""
    from soco_pipeline.storage import read_parquet
    from soco_pipeline.tables import table_for
    from soco_pipeline.trust.hashes import image_digests

    raw = pq.read_table(cluster.s3fs().open(f"{BUCKET}/{data}/tables/image_set.parquet", "rb"))
    assert not any(u.startswith("s3://") for u in raw.column("uri").to_pylist())  # stored relative
    copy, original = (
        read_parquet(table_for("image_set").path(f"s3://{BUCKET}/{p}/tables"))
        for p in (data, cluster.storage_prefix)
    )
    assert copy.uri.str.startswith(f"s3://{BUCKET}/{data}/embedded/").all()
    assert original.uri.str.startswith(f"s3://{BUCKET}/{cluster.storage_prefix}/embedded/").all()
    assert image_digests(copy).equals(image_digests(original))


def test_atomic_publish_on_s3(cluster):
    """open_atomic on S3: nothing under the final key until the block succeeds, the object whole after,
    no temporary object left, and a failed write publishes nothing; listers skip `.tmp-` names."""
    from soco_pipeline.storage import list_published, open_atomic, read_bytes, write_bytes_atomic

    fs = cluster.s3fs()
    folder = f"{BUCKET}/atomic-test"
    final = f"s3://{folder}/table.parquet"
    payload = os.urandom(6 * 1024 * 1024)
    with open_atomic(final) as f:
        f.write(payload[: len(payload) // 2])
        f.flush()
        assert not fs.exists(f"{folder}/table.parquet")
        f.write(payload[len(payload) // 2 :])
    assert read_bytes(final) == payload
    assert fs.find(folder) == [f"{folder}/table.parquet"]

    with pytest.raises(RuntimeError, match="writer crashed"):
        with open_atomic(f"s3://{folder}/broken.parquet") as f:
            f.write(payload)
            raise RuntimeError("writer crashed")
    assert fs.find(folder) == [f"{folder}/table.parquet"]

    # A temporary object left by a killed writer is invisible to listers of published files.
    fs.pipe(f"{folder}/.tmp-0123-orphan.npy", b"partial")
    write_bytes_atomic(f"s3://{folder}/b.npy", b"whole")
    assert list_published(f"s3://{folder}") == [f"{folder}/b.npy", f"{folder}/table.parquet"]
