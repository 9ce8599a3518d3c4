"""A local distributed stack on 127.0.0.1, each service in its own session, recorded in `<dir>/stack.json`."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from soco_pipeline.deploy.processes import Service, free_ports, port_open, start, stop_all, wait_for
from soco_pipeline.settings import environment
from soco_pipeline.storage import PROJECT_ROOT

BUCKET = "soco"
DEFAULT_QUEUE = "dagster"  # dagster-celery's default queue
GPU_QUEUE = "gpu"
PG_BIN_DIRS = sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True)
# SeaweedFS without an IAM config allows every request; s3fs/botocore still sign, with placeholder keys.
PLACEHOLDER_KEY, PLACEHOLDER_SECRET = "soco-local", "soco-local-secret"
INFRA = ("redis", "postgres", "seaweedfs")


def _bin(name: str) -> str:
    """An executable from this Python's environment (the venv), else from PATH."""
    here = Path(sys.executable).parent / name
    if here.exists():
        return str(here)
    found = shutil.which(name)
    if not found:
        raise FileNotFoundError(
            f"{name} is not installed: `pip install -e '.[distributed]'` / see docs/scaling-out.md"
        )
    return found


def _pg_bin(name: str) -> str:
    for d in PG_BIN_DIRS:
        if (d / name).exists():
            return str(d / name)
    raise FileNotFoundError(
        f"Postgres' {name} not found under /usr/lib/postgresql: apt-get install postgresql"
    )


CONFIG_FIELDS = (
    "default_workers",
    "gpu_workers",
    "worker_concurrency",
    "max_concurrent_runs",
    "automation",
    "webserver",
    "storage_prefix",
    "visibility_timeout",
    "lost_worker_grace",
    "default_queues",
    "extra_env",
    "start_env",
)
# Names that look like credentials never go into stack.json (only SOCO_* settings are recorded at all).
SECRET_MARKERS = ("KEY", "SECRET", "TOKEN", "PASSWORD", "CREDENTIAL")


CREDENTIALS_IN_URL = re.compile(r"://[^/@\s]+:[^/@\s]*@")


def recorded_settings(environ: dict[str, str]) -> dict[str, str]:
    """The SOCO_* settings of `environ` every service keeps, credentials left out."""
    return {
        k: v
        for k, v in environ.items()
        if k.startswith("SOCO_")
        and not any(m in k.upper() for m in SECRET_MARKERS)
        and not CREDENTIALS_IN_URL.search(v)
    }


class StackError(RuntimeError):
    """The stack could not start or is not running; the message names the service and its log."""


@dataclass
class LocalStack:
    """Start/stop a distributed Dagster deployment on this machine; all state under `root`."""

    root: Path
    default_workers: int = 2
    gpu_workers: int = 1
    worker_concurrency: int = 1
    max_concurrent_runs: int = 4
    automation: bool = True
    webserver: bool = True
    storage_prefix: str = "storage"
    visibility_timeout: int = 6 * 3600
    lost_worker_grace: float = 60.0  # seconds a worker holding a step may miss pings (defs/recovery.py)
    default_queues: tuple[str, ...] = (DEFAULT_QUEUE,)  # add GPU_QUEUE to let CPU workers take GPU steps
    extra_env: dict[str, str] = field(default_factory=dict)
    # The SOCO_* settings `start` ran with, so that `restart` from another shell brings a service back alike.
    start_env: dict[str, str] = field(default_factory=dict)
    log: Callable[[str], None] = field(default=lambda msg: None, repr=False)

    def __post_init__(self) -> None:
        self.root = Path(self.root).resolve()
        self.services: list[Service] = []
        self.ports: dict[str, int] = {}
        self._popens: dict[str, subprocess.Popen] = {}

    @property
    def state_file(self) -> Path:
        """Where pids, ports and the client environment are recorded."""
        return self.root / "stack.json"

    @property
    def home(self) -> Path:
        """DAGSTER_HOME of the stack."""
        return self.root / "dagster_home"

    def client_env(self) -> dict[str, str]:
        """The variables every Dagster process of this deployment (and any client) needs."""
        p = self.ports
        return {
            "SOCO_PROFILE": "distributed",
            "DAGSTER_HOME": str(self.home),
            "SOCO_STORAGE": f"s3://{BUCKET}/{self.storage_prefix}",
            "SOCO_POSTGRES_URL": f"postgresql+psycopg2://postgres@127.0.0.1:{p['postgres']}/dagster",
            "SOCO_CELERY_BROKER": f"redis://127.0.0.1:{p['redis']}/0",
            "SOCO_CELERY_BACKEND": f"redis://127.0.0.1:{p['redis']}/1",
            "SOCO_CELERY_VISIBILITY_TIMEOUT": str(self.visibility_timeout),
            "SOCO_LOST_WORKER_GRACE_S": str(self.lost_worker_grace),
            "FSSPEC_S3_ENDPOINT_URL": f"http://127.0.0.1:{p['s3']}",
            "FSSPEC_S3_USE_LISTINGS_CACHE": "false",  # other workers write too: never trust a cached listing
            "AWS_ACCESS_KEY_ID": PLACEHOLDER_KEY,
            "AWS_SECRET_ACCESS_KEY": PLACEHOLDER_SECRET,
            "AWS_DEFAULT_REGION": "us-east-1",
            "DAGSTER_DISABLE_TELEMETRY": "1",
            "HF_HUB_OFFLINE": "1",
            **({"SOCO_WEBSERVER_URL": f"http://127.0.0.1:{p['webserver']}"} if "webserver" in p else {}),
            **self.extra_env,
        }

    def service_env(self) -> dict[str, str]:
        """The environment every service starts with: this one's, the recorded settings, client variables."""
        env = {**environment(), **self.start_env, **self.client_env()}
        env["PYTHONPATH"] = os.pathsep.join(x for x in (str(PROJECT_ROOT), env.get("PYTHONPATH", "")) if x)
        # dagster-celery starts `celery` from PATH: put this environment's bin folder first.
        env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
        return env

    def _start(
        self,
        name: str,
        cmd: list[str],
        user: str | None = None,
        stop_timeout: float = 10.0,
        cwd: Path | None = None,
    ) -> Service:
        svc, proc = start(
            name,
            cmd,
            self.root / "logs" / f"{name}.log",
            self.service_env(),
            cwd=cwd or PROJECT_ROOT,
            user=user,
            stop_timeout=stop_timeout,
        )
        self.services.append(svc)
        self._popens[name] = proc
        self.save()
        self.log(f"started {name} (pid {svc.pid})")
        return svc

    def _dead(self, name: str):
        def check() -> str | None:
            proc = self._popens[name]
            if proc.poll() is not None:
                return f"exited with {proc.returncode}; see {self.root / 'logs' / (name + '.log')}"
            return None

        return check

    def save(self) -> None:
        """Write the settings, ports, client environment and service pids to the state file."""
        config = {k: getattr(self, k) for k in CONFIG_FIELDS}
        self.state_file.write_text(
            json.dumps(
                {
                    "config": config,
                    "ports": self.ports,
                    "env": self.client_env() if self.ports else {},
                    "services": [s.to_dict() for s in self.services],
                },
                indent=2,
            )
        )

    def start(self, timeout: float = 120.0) -> LocalStack:
        """Start every service and wait until each is healthy; on any failure stop what was started."""
        if self.state_file.exists() and any(
            Service(**s).alive() for s in json.loads(self.state_file.read_text()).get("services", [])
        ):
            raise StackError(f"a stack is already running from {self.root}: `soco cluster stop` first")
        self.root.mkdir(parents=True, exist_ok=True)
        self.start_env = self.start_env or recorded_settings(dict(environment()))
        os.chmod(self.root, 0o755)  # the postgres user must reach its data folder inside
        seaweed = [f"{s}{g}" for s in ("s3", "master", "volume", "filer") for g in ("", "_grpc")]
        names = ["redis", "postgres", *seaweed, "code_server", "webserver"]
        self.ports = dict(zip(names, free_ports(len(names)), strict=True))
        if not self.webserver:
            del self.ports["webserver"]
        try:
            self._start_infra(timeout)
            self._start_dagster(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def _start_infra(self, timeout: float) -> None:
        p = self.ports
        (self.root / "redis").mkdir(exist_ok=True)
        redis = f"--port {p['redis']} --bind 127.0.0.1 --dir".split() + [str(self.root / "redis")]
        redis += ["--save", "", *"--appendonly no --daemonize no --protected-mode yes".split()]
        self._start("redis", [_bin("redis-server"), *redis])
        self._init_postgres()
        pg = self.root / "postgres"
        postgres = [_pg_bin("postgres"), "-D", str(pg / "data"), "-k", str(pg / "socket")]
        self._start(
            "postgres", [*postgres, *f"-p {p['postgres']} -h 127.0.0.1".split()], user=self._pg_user(), cwd=pg
        )
        sw = self.root / "seaweedfs"
        sw.mkdir(exist_ok=True)
        ports = " ".join(
            f"-{k}.port={p[k]} -{k}.port.grpc={p[k + '_grpc']}" for k in ("master", "volume", "filer")
        )
        self._start(
            "seaweedfs",
            [
                _bin("weed"),
                "server",
                f"-dir={sw}",
                *"-ip=127.0.0.1 -ip.bind=127.0.0.1 -filer -s3".split(),
                f"-s3.port={p['s3']}",
                f"-s3.port.grpc={p['s3_grpc']}",
                *"-s3.port.iceberg=0 -s3.port.lance=0".split(),
                *ports.split(),
                f"-filer.localSocket={sw / 'filer.sock'}",
                f"-s3.localSocket={sw / 's3.sock'}",
                *"-master.telemetry=false -master.volumeSizeLimitMB=1024 -volume.preStopSeconds=1".split(),
            ],
            stop_timeout=10.0,  # it takes more than 8 s to stop on TERM, then gets KILLed
        )
        wait_for("redis", self._redis_ping, timeout, alive=self._dead("redis"))
        wait_for("postgres", self._postgres_ready, timeout, alive=self._dead("postgres"))
        wait_for("seaweedfs S3", self._s3_ready, timeout, interval=1.0, alive=self._dead("seaweedfs"))
        self.log("redis, postgres and seaweedfs are answering")

    def _pg_user(self) -> str | None:
        return "postgres" if os.geteuid() == 0 else None  # initdb refuses to run as root

    def _init_postgres(self) -> None:
        pg = self.root / "postgres"
        data, sock = pg / "data", pg / "socket"
        if (data / "PG_VERSION").exists():
            return
        for d in (pg, data, sock):
            d.mkdir(parents=True, exist_ok=True)
        user = self._pg_user()
        if user:
            for d in (pg, data, sock):
                shutil.chown(d, user, user)
        os.chmod(data, 0o700)
        done = subprocess.run(
            [_pg_bin("initdb"), "-D", str(data), *"-U postgres -A trust -E UTF8 --no-instructions".split()],
            user=user,
            cwd=pg,
            timeout=120,
            capture_output=True,
            text=True,
        )
        if done.returncode:
            raise StackError(
                f"initdb failed (the {user or 'current'} user must be able to enter every "
                f"folder above {data}):\n{done.stderr[-2000:]}"
            )
        # Our own socket folder and loopback only; no fsync (a scratch stack; data outlives no crash).
        with open(data / "postgresql.conf", "a") as f:
            f.write(
                f"\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = '{sock}'\n"
                "fsync = off\nmax_connections = 200\n"
            )

    def _redis_ping(self) -> bool:
        import redis

        return bool(redis.Redis(host="127.0.0.1", port=self.ports["redis"], socket_timeout=2).ping())

    def _postgres_ready(self) -> bool:
        import psycopg2

        con = psycopg2.connect(
            host="127.0.0.1",
            port=self.ports["postgres"],
            user="postgres",
            dbname="postgres",
            connect_timeout=2,
        )
        try:
            con.autocommit = True
            with con.cursor() as cur:
                cur.execute("SELECT 1 FROM pg_database WHERE datname = 'dagster'")
                if cur.fetchone() is None:
                    cur.execute("CREATE DATABASE dagster")
        finally:
            con.close()
        return True

    def s3fs(self):
        """An s3fs filesystem on the stack's S3 endpoint."""
        import s3fs

        return s3fs.S3FileSystem(
            endpoint_url=f"http://127.0.0.1:{self.ports['s3']}",
            key=PLACEHOLDER_KEY,
            secret=PLACEHOLDER_SECRET,
            skip_instance_cache=True,
            use_listings_cache=False,
        )

    def _s3_ready(self) -> bool:
        fs = self.s3fs()
        buckets = fs.ls("", refresh=True)  # S3 ListBuckets
        if BUCKET not in [b.rstrip("/") for b in buckets]:
            fs.mkdir(BUCKET)
        return BUCKET in [b.rstrip("/") for b in fs.ls("", refresh=True)]

    def _write_dagster_files(self) -> None:
        self.home.mkdir(parents=True, exist_ok=True)
        text = (PROJECT_ROOT / "dagster.distributed.yaml").read_text()
        for k, v in {
            "@MAX_CONCURRENT_RUNS@": str(self.max_concurrent_runs),
            "@AUTOMATION@": str(self.automation).lower(),
            "@HOME@": str(self.home),
        }.items():
            text = text.replace(k, v)
        (self.home / "dagster.yaml").write_text(text)
        (self.root / "workspace.yaml").write_text(
            "load_from:\n  - grpc_server:\n      host: 127.0.0.1\n"
            f"      port: {self.ports['code_server']}\n      location_name: soco_pipeline\n"
        )
        env = self.client_env()
        (self.root / "celery.yaml").write_text(
            "# dagster-celery worker config: the same broker/backend as the executor (defs/executors.py)\n"
            "execution:\n  config:\n"
            f'    broker: "{env["SOCO_CELERY_BROKER"]}"\n    backend: "{env["SOCO_CELERY_BACKEND"]}"\n'
            "    config_source:\n      task_acks_late: true\n      task_reject_on_worker_lost: false\n"
            # one message per worker process: a worker holds only the step it runs, never a queue of them
            "      worker_prefetch_multiplier: 1\n"
            f"      broker_transport_options: {{visibility_timeout: {self.visibility_timeout}}}\n"
        )
        (self.root / "cluster.env").write_text(
            "".join(f"export {k}={shlex.quote(v)}\n" for k, v in env.items())
        )

    def _start_dagster(self, timeout: float) -> None:
        self._write_dagster_files()
        env = self.service_env()
        # Schema first, once, before any other Dagster process: an empty database races at creation.
        done = subprocess.run(
            [_bin("dagster"), "instance", "migrate"],
            env=env,
            cwd=PROJECT_ROOT,
            timeout=timeout,
            capture_output=True,
            text=True,
        )
        if done.returncode:
            raise StackError(f"`dagster instance migrate` failed:\n{done.stderr[-3000:]}")
        p = self.ports
        # Workers need only the broker (they load the code per task): start them alongside the code server.
        workers, celery_yaml = self.worker_queues(), str(self.root / "celery.yaml")
        for name, queues in workers:
            worker = [_bin("dagster-celery"), *"worker start -A dagster_celery.app -y".split(), celery_yaml]
            # one comma-separated -q: dagster-celery turns each -q into a `celery -Q`,
            # and celery keeps only the last -Q it is given
            celery = [f"--concurrency={self.worker_concurrency}", "--without-gossip", "--without-mingle"]
            self._start(name, [*worker, "-q", queues, "-n", name, "--", *celery], stop_timeout=10.0)
        grpc = f"api grpc -h 127.0.0.1 -p {p['code_server']} -m soco_pipeline.defs.definitions"
        self._start("code_server", [_bin("dagster"), *grpc.split(), "--location-name", "soco_pipeline"])
        # The port first: each `grpc-health-check` imports Dagster, which slows the code server's load.
        wait_for(
            "code server port",
            lambda: port_open(p["code_server"]),
            timeout,
            interval=0.5,
            alive=self._dead("code_server"),
        )
        health = [_bin("dagster"), "api", "grpc-health-check", "-h", "127.0.0.1", "-p", str(p["code_server"])]
        wait_for(
            "code server",
            lambda: subprocess.run(health, env=env, capture_output=True, timeout=60).returncode == 0,
            timeout,
            interval=1.0,
            alive=self._dead("code_server"),
        )
        self.log("code server passes grpc-health-check")
        workspace = str(self.root / "workspace.yaml")
        self._start("daemon", [_bin("dagster-daemon"), "run", "-w", workspace])
        if self.webserver:
            self._start(
                "webserver",
                [_bin("dagster-webserver"), "-h", "127.0.0.1", "-p", str(p["webserver"]), "-w", workspace],
            )
        wait_for(
            "celery workers",
            lambda: set(self.worker_names()) >= {n for n, _ in workers},
            timeout,
            interval=1.0,
            alive=self._any_dead([n for n, _ in workers]),
        )
        self.log(f"workers answer: {self.worker_names()}")
        wait_for("dagster daemon", self._daemon_healthy, timeout, interval=1.0, alive=self._dead("daemon"))
        self.log("daemon heartbeats are healthy")
        if self.webserver:
            wait_for("webserver", self._webserver_ready, timeout, interval=1.0, alive=self._dead("webserver"))
            self.log(f"webserver on http://127.0.0.1:{self.ports['webserver']}")

    def restart(self, name: str, timeout: float = 120.0) -> Service:
        """Start service `name` again with its recorded command (not Redis, Postgres or SeaweedFS)."""
        old = next((s for s in self.services if s.name == name), None)
        if name in INFRA:
            raise StackError(f"{name} keeps the stack's state: stop and start the whole stack instead")
        if old is None:
            raise StackError(
                f"no service {name!r} in {self.state_file}; known: {[s.name for s in self.services]}"
            )
        stop_all([old], self._popens)
        self.services.remove(old)
        svc = self._start(name, old.cmd, stop_timeout=old.stop_timeout)
        if name in {n for n, _ in self.worker_queues()}:
            wait_for(
                f"worker {name}",
                lambda: name in self.worker_names(),
                timeout,
                interval=1.0,
                alive=self._dead(name),
            )
        return svc

    def worker_queues(self) -> list[tuple[str, str]]:
        """(worker name, Celery queues) of every worker: `worker-i` on the default queue, `gpu-worker-i` on gpu."""
        workers = [(f"worker-{i + 1}", ",".join(self.default_queues)) for i in range(self.default_workers)]
        return workers + [(f"gpu-worker-{i + 1}", GPU_QUEUE) for i in range(self.gpu_workers)]

    def _any_dead(self, names: list[str]):
        def check() -> str | None:
            for n in names:
                if msg := self._dead(n)():
                    return f"{n} {msg}"
            return None

        return check

    def celery_app(self):
        """A Celery app on the stack's broker (for ping/inspect)."""
        from celery import Celery

        env = self.client_env()
        return Celery("soco-cluster", broker=env["SOCO_CELERY_BROKER"], backend=env["SOCO_CELERY_BACKEND"])

    def worker_names(self) -> list[str]:
        """Names of the Celery workers that answer a ping (without the @host part)."""
        replies = self.celery_app().control.ping(timeout=1.0) or []
        return sorted(name.split("@")[0] for r in replies for name in r)

    def _daemon_healthy(self) -> bool:
        done = subprocess.run(
            [_bin("dagster-daemon"), "liveness-check"],
            env=self.service_env(),
            cwd=PROJECT_ROOT,
            capture_output=True,
            timeout=60,
        )
        return done.returncode == 0

    def _webserver_ready(self) -> bool:
        import urllib.request

        with urllib.request.urlopen(
            f"http://127.0.0.1:{self.ports['webserver']}/server_info", timeout=2
        ) as r:
            return r.status == 200

    def stop(self) -> dict[str, str]:
        """TERM every service (Dagster and workers first), wait, KILL what is left."""
        if not self.services and self.state_file.exists():
            state = json.loads(self.state_file.read_text())
            self.services = [Service(**s) for s in state.get("services", [])]
            self.ports = state.get("ports", {})
        # One wave, Dagster and workers first: Postgres' smart shutdown then waits only for exiting clients.
        order = [s for s in reversed(self.services) if s.name not in INFRA]
        order += [s for s in self.services if s.name in INFRA]
        outcome = stop_all(order, self._popens)
        self._cleanup_sockets()
        return outcome

    def _cleanup_sockets(self) -> None:
        # SeaweedFS puts its gRPC sockets in /tmp under names with our ports; remove ours.
        for key in ("s3", "s3_grpc", "master_grpc", "volume_grpc", "filer_grpc", "filer"):
            if key in self.ports:
                for p in Path("/tmp").glob(f"seaweedfs-*-{self.ports[key]}.sock"):
                    p.unlink(missing_ok=True)

    def status(self) -> dict[str, bool]:
        """Service name -> whether its processes are running (from the state file)."""
        if not self.state_file.exists():
            return {}
        state = json.loads(self.state_file.read_text())
        return {s["name"]: Service(**s).alive() for s in state.get("services", [])}

    @classmethod
    def attach(cls, root: Path) -> LocalStack:
        """A handle on a stack started by another process (its settings, pids and ports from the state file)."""
        state = json.loads((Path(root) / "stack.json").read_text())
        config = {k: tuple(v) if k == "default_queues" else v for k, v in state.get("config", {}).items()}
        stack = cls(root, **config)
        stack.services = [Service(**s) for s in state.get("services", [])]
        stack.ports = state.get("ports", {})
        return stack
