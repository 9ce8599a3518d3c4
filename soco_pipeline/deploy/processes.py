"""Start and stop server processes by process group: setsid on start, TERM-wait-KILL of the group on stop."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path


def free_port() -> int:
    """A free TCP port on the loopback interface."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    """Whether something accepts TCP connections on host:port."""
    with socket.socket() as s:
        s.settimeout(1.0)
        return s.connect_ex((host, port)) == 0


def free_ports(n: int) -> list[int]:
    """n distinct free loopback ports (held open together while choosing, so they differ)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def wait_for(
    what: str,
    check: Callable[[], bool],
    timeout: float,
    interval: float = 0.5,
    alive: Callable[[], str | None] | None = None,
) -> None:
    """Poll `check()` until true; TimeoutError after `timeout`, or at once when `alive()` says why."""
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        if alive is not None and (msg := alive()):
            raise RuntimeError(f"{what}: {msg}")
        try:
            if check():
                return
        except Exception as e:  # noqa: BLE001 - a server that is still starting answers with errors
            last = e
        time.sleep(interval)
    raise TimeoutError(f"{what} not ready after {timeout:.0f} s" + (f" (last error: {last})" if last else ""))


def _proc_stat(pid: int) -> tuple[str, int] | None:
    """(state, session id) of a pid from /proc, or None when it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    fields = stat[stat.rindex(")") + 2 :].split()
    return fields[0], int(fields[3])


def group_members(sid: int) -> list[int]:
    """Live (not zombie) pids of a setsid session: its leader's process group and any group made inside it."""
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (st := _proc_stat(int(entry))) and st[1] == sid and st[0] != "Z":
            pids.append(int(entry))
    return pids


def signal_group(pgid: int, sig: int) -> None:
    """Send `sig` to the process group and to every other process left in its session."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, sig)
    for pid in group_members(pgid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


@dataclass
class Service:
    """One started server: its pid (= its process group and session id, as started by setsid)."""

    name: str
    pid: int
    cmd: list[str]
    log: str
    stop_timeout: float = 10.0
    extra: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        """JSON-able form for the stack's state file."""
        return asdict(self)

    @property
    def pgid(self) -> int:
        """The process group: setsid made the service its leader."""
        return self.pid

    def alive(self) -> bool:
        """Whether any process of the service's group is still running."""
        return bool(group_members(self.pgid))


def start(
    name: str,
    cmd: list[str],
    log: Path,
    env: dict[str, str],
    cwd: Path | None = None,
    user: str | None = None,
    stop_timeout: float = 10.0,
) -> tuple[Service, subprocess.Popen]:
    """Start `cmd` in a new session (setsid), stdout and stderr to `log`; the Service and its Popen."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            cmd,
            cwd=cwd,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            user=user,
        )
    return Service(name, proc.pid, [str(c) for c in cmd], str(log), stop_timeout), proc


def stop_all(
    services: list[Service], popens: dict[str, subprocess.Popen] | None = None, sig: int = signal.SIGTERM
) -> dict[str, str]:
    """TERM every service's group, wait its stop_timeout, KILL the rest; name -> outcome."""
    popens = popens or {}
    outcome: dict[str, str] = {}
    pending = []
    for s in services:
        if not s.alive():
            outcome[s.name] = "gone"
            continue
        signal_group(s.pgid, sig)
        pending.append((s, time.monotonic() + s.stop_timeout))
    while pending:
        for p in popens.values():
            p.poll()  # reap our own children so they do not linger as zombies
        still = []
        for s, deadline in pending:
            if not s.alive():
                outcome[s.name] = "stopped"
            elif time.monotonic() >= deadline:
                signal_group(s.pgid, signal.SIGKILL)
                outcome[s.name] = "killed"
            else:
                still.append((s, deadline))
        pending = still
        if pending:
            time.sleep(0.2)
    deadline = time.monotonic() + 5
    for s in services:  # after a KILL: wait (briefly) until the group is really gone, reap our children
        while s.alive() and time.monotonic() < deadline:
            time.sleep(0.1)
        if s.name in popens:
            with contextlib.suppress(subprocess.TimeoutExpired):
                popens[s.name].wait(timeout=max(0.1, deadline - time.monotonic()))
    return outcome
