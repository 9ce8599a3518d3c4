"""A single-node Slurm on this machine, all state under one folder (docs/scaling-out.md)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from soco_pipeline.deploy.processes import Service, free_ports, group_members, start, stop_all, wait_for
from soco_pipeline.settings import environment

SOCKET_PATH_MAX = 107  # a Unix socket's path: sun_path holds 108 bytes with the terminating NUL

PARTITION = "soco"
DAEMONS = ("munged", "slurmctld", "slurmd")


class SlurmError(RuntimeError):
    """The local Slurm could not start, or a Slurm command failed; the message names the daemon and its log."""


def slurm_installed() -> bool:
    """Whether Debian's slurm-wlm and munge are installed (slurmctld, slurmd, munged, sbatch)."""
    return all(shutil.which(b) or Path("/usr/sbin", b).exists() for b in (*DAEMONS, "sbatch", "sinfo"))


def _sbin(name: str) -> str:
    found = shutil.which(name) or (str(Path("/usr/sbin", name)) if Path("/usr/sbin", name).exists() else None)
    if not found:
        raise FileNotFoundError(f"{name} is not installed: apt-get install slurm-wlm munge")
    return found


def slurm_conf(
    host: str, ctld_port: int, slurmd_port: int, root: Path, munge_socket: Path, cpus: int, memory_mb: int
) -> str:
    """The text of a one-node slurm.conf: this host at 127.0.0.1, our ports, state under `root`."""
    return "\n".join(
        [
            "ClusterName=soco",
            f"SlurmctldHost={host}(127.0.0.1)",
            f"SlurmctldPort={ctld_port}",
            f"SlurmdPort={slurmd_port}",
            "SlurmUser=root",
            "SlurmdUser=root",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            f"AuthInfo=socket={munge_socket}",
            f"StateSaveLocation={root / 'state'}",
            f"SlurmdSpoolDir={root / 'spool'}",
            f"SlurmctldPidFile={root / 'run' / 'slurmctld.pid'}",
            f"SlurmdPidFile={root / 'run' / 'slurmd.pid'}",
            f"SlurmctldLogFile={root / 'logs' / 'slurmctld.log'}",
            f"SlurmdLogFile={root / 'logs' / 'slurmd.log'}",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_CPU",
            "SchedulerType=sched/backfill",
            "MpiDefault=none",
            "ReturnToService=2",  # a node that went down (slurmd killed) serves again once slurmd registers
            "SlurmdTimeout=10",  # seconds before a silent slurmd's node is DOWN and its jobs NODE_FAIL
            "SlurmctldTimeout=10",
            "MessageTimeout=5",
            "InactiveLimit=0",
            "KillWait=5",
            "MinJobAge=3600",  # finished jobs stay visible to `scontrol show job` for an hour
            "SlurmctldParameters=enable_configless",
            f"NodeName={host} NodeAddr=127.0.0.1 CPUs={cpus} RealMemory={memory_mb} State=UNKNOWN",
            f"PartitionName={PARTITION} Nodes={host} Default=YES MaxTime=INFINITE State=UP",
            "",
        ]
    )


@dataclass
class LocalSlurm:
    """Start/stop munged, slurmctld and slurmd on this machine; every file under `root`."""

    root: Path
    start_timeout: float = 60.0
    services: list[Service] = field(default_factory=list)
    ports: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.root = Path(self.root).resolve()
        self._popens: dict[str, subprocess.Popen] = {}

    @property
    def conf(self) -> Path:
        """The generated slurm.conf."""
        return self.root / "slurm.conf"

    @property
    def munge_socket(self) -> Path:
        """munged's own socket: in the folder if its path fits a Unix socket's 107 bytes, else in /tmp."""
        inside = self.root / "munge" / "munge.socket"
        if len(str(inside).encode()) + len(".lock") <= SOCKET_PATH_MAX:
            return inside
        digest = hashlib.sha256(str(self.root).encode()).hexdigest()[:16]
        return Path(tempfile.gettempdir()) / f"soco-munge-{digest}.socket"

    @property
    def state_file(self) -> Path:
        """Where pids and ports are recorded (stop from another process)."""
        return self.root / "slurm.json"

    def client_env(self) -> dict[str, str]:
        """What a Slurm client (sbatch, squeue, scontrol, sinfo, the Slurm launcher) needs."""
        return {"SLURM_CONF": str(self.conf)}

    def _env(self) -> dict[str, str]:
        return {**environment(), **self.client_env()}

    def _save(self) -> None:
        self.state_file.write_text(
            json.dumps({"ports": self.ports, "services": [s.to_dict() for s in self.services]}, indent=2)
        )

    def _start(self, name: str, cmd: list[str]) -> None:
        svc, proc = start(name, cmd, self.root / "logs" / f"{name}.out", self._env(), cwd=self.root)
        self.services.append(svc)
        self._popens[name] = proc
        self._save()

    def _dead(self, name: str):
        def check() -> str | None:
            proc = self._popens[name]
            if proc.poll() is not None:
                return f"exited with {proc.returncode}; see {self.root / 'logs'}/{name}.*"
            return None

        return check

    def _write_files(self, host: str) -> None:
        for sub in ("state", "spool", "run", "logs", "munge"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        os.chmod(self.root / "munge", 0o700)
        key = self.root / "munge" / "munge.key"
        if not key.exists():
            key.write_bytes(os.urandom(1024))
        os.chmod(key, 0o400)
        cpus = os.cpu_count() or 1
        memory_mb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2**20
        self.conf.write_text(
            slurm_conf(
                host,
                self.ports["slurmctld"],
                self.ports["slurmd"],
                self.root,
                self.munge_socket,
                cpus,
                max(1, memory_mb - 1024),
            )
        )

    def start(self) -> LocalSlurm:
        """Start munged, slurmctld and slurmd until `sinfo` shows the node idle, else SlurmError."""
        if os.geteuid() != 0:
            raise SlurmError("a local Slurm runs its daemons as root (SlurmUser=root): run as root")
        if self.state_file.exists() and any(
            Service(**s).alive() for s in json.loads(self.state_file.read_text()).get("services", [])
        ):
            raise SlurmError(f"a Slurm is already running from {self.root}: stop it first")
        self.root.mkdir(parents=True, exist_ok=True)
        host = socket.gethostname().split(".")[0]
        self.ports = dict(zip(("slurmctld", "slurmd"), free_ports(2), strict=True))
        self._write_files(host)
        m = self.root / "munge"
        try:
            self._start(
                "munged",
                [
                    _sbin("munged"),
                    "--foreground",
                    "--force",
                    f"--key-file={m / 'munge.key'}",
                    f"--socket={self.munge_socket}",
                    f"--pid-file={m / 'munged.pid'}",
                    f"--log-file={self.root / 'logs' / 'munged.log'}",
                    f"--seed-file={m / 'munged.seed'}",
                ],
            )
            wait_for("munged", self.munge_socket.exists, self.start_timeout, 0.2, self._dead("munged"))
            self._start("slurmctld", [_sbin("slurmctld"), "-D", "-i", "-f", str(self.conf)])
            self._start("slurmd", [_sbin("slurmd"), "-D", "-f", str(self.conf), "-N", host])
            wait_for(
                "slurm node idle (sinfo)",
                self.node_idle,
                self.start_timeout,
                0.5,
                lambda: self._dead("slurmctld")() or self._dead("slurmd")(),
            )
        except BaseException:
            self.stop()
            raise
        return self

    def node_idle(self) -> bool:
        """Whether `sinfo` answers and shows the node idle in our partition."""
        return self.node_state() == "idle"

    def node_state(self) -> str:
        """The node's state as `sinfo` prints it (idle, alloc, down*, ...); '' when sinfo does not answer."""
        done = subprocess.run(
            ["sinfo", "-h", "-p", PARTITION, "-o", "%T"],
            env=self._env(),
            capture_output=True,
            text=True,
            timeout=30,
        )
        return done.stdout.strip() if done.returncode == 0 else ""

    def restart_slurmd(self) -> None:
        """Start slurmd again with its recorded command and wait until the node is idle."""
        old = next(s for s in self.services if s.name == "slurmd")
        stop_all([old], self._popens)
        self.services.remove(old)
        self._start("slurmd", old.cmd)
        wait_for("slurm node idle after slurmd restart", self.node_idle, self.start_timeout, 0.5)

    def daemon(self, name: str) -> Service:
        """The started daemon `name` (munged | slurmctld | slurmd)."""
        return next(s for s in self.services if s.name == name)

    def stop(self) -> dict[str, str]:
        """TERM slurmd, slurmctld, then munged (and job steps left), wait, KILL the rest: name -> outcome."""
        if not self.services and self.state_file.exists():
            state = json.loads(self.state_file.read_text())
            self.services = [Service(**s) for s in state.get("services", [])]
            self.ports = state.get("ports", {})
        self._cancel_all_jobs()
        order = sorted(self.services, key=lambda s: DAEMONS.index(s.name) if s.name in DAEMONS else -1)
        return stop_all(list(reversed(order)), self._popens)

    def _cancel_all_jobs(self, timeout: float = 20.0) -> None:
        """scancel every job and wait until none runs (a job step has a session of its own)."""
        names = {s.name for s in self.services if s.alive()}
        if not {"slurmctld", "slurmd"} <= names:
            return
        env = self._env()
        subprocess.run(["scancel", "--partition", PARTITION], env=env, capture_output=True, timeout=30)

        def no_jobs() -> bool:
            done = subprocess.run(
                ["squeue", "-h", "-t", "PD,R,CG,S", "-o", "%i"], env=env, capture_output=True, timeout=30
            )
            return done.returncode == 0 and not done.stdout.strip()

        try:
            wait_for("slurm jobs cancelled", no_jobs, timeout, 0.5)
        except TimeoutError:
            pass  # stopping slurmd below is the last resort

    def leftovers(self) -> dict[str, list[int]]:
        """Daemon name -> pids still alive in its session (empty after a clean stop)."""
        return {s.name: group_members(s.pgid) for s in self.services if group_members(s.pgid)}

    @classmethod
    def attach(cls, root: Path) -> LocalSlurm:
        """A handle on a Slurm started by another process (pids and ports from its state file)."""
        state = json.loads((Path(root) / "slurm.json").read_text())
        return cls(
            Path(root),
            services=[Service(**s) for s in state.get("services", [])],
            ports=state.get("ports", {}),
        )


def cluster_command(action: str, root: Path, out=print) -> int:
    """`soco cluster start|stop|status --engine slurm --dir ROOT`, writing `<root>/slurm.env`."""
    root = Path(root)
    if action == "start":
        slurm = LocalSlurm(root).start()
        env = {**slurm.client_env(), "SOCO_LAUNCHER": "slurm"}
        (root / "slurm.env").write_text("".join(f"export {k}={v}\n" for k, v in env.items()))
        out(f"slurm up: node {slurm.node_state()}; use it with:  source {root.resolve() / 'slurm.env'}")
        return 0
    if not (root / "slurm.json").exists():
        out(f"no Slurm state in {root} (nothing started there)")
        return 0 if action == "stop" else 1
    slurm = LocalSlurm.attach(root)
    if action == "stop":
        for name, how in slurm.stop().items():
            out(f"{name}: {how}")
        return 0
    if action == "restart":
        raise ValueError("soco cluster restart is for the Celery stack; stop and start the Slurm engine")
    alive = {s.name: s.alive() for s in slurm.services}
    for s in slurm.services:
        out(f"{s.name:10s} pid {s.pid:<8d} {'running' if alive[s.name] else 'stopped':8s} {s.log}")
    if all(alive.values()):
        out(f"node: {slurm.node_state() or 'not answering'}")
    return 0 if alive and all(alive.values()) else 1
