"""Submit one batch job with `sbatch` and follow it with `scontrol` (accounting may be off) until it ends."""

from __future__ import annotations

import contextlib
import shlex
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

RUNNING_STATES = {"RUNNING", "COMPLETING", "CONFIGURING", "SUSPENDED", "STAGE_OUT", "SIGNALING", "RESIZING"}
PENDING_STATES = {"PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD", "SPECIAL_EXIT"}


class SlurmJobError(RuntimeError):
    """A Slurm job did not complete; the message names the job id, its state and what to do."""

    def __init__(self, message: str, job_id: str, state: str) -> None:
        super().__init__(message)
        self.job_id = job_id
        self.state = state


class SlurmJobCancelled(SlurmJobError):
    """The job was cancelled (scancel, an admin, a preemption)."""


class SlurmNodeFailed(SlurmJobError):
    """The job's node went down (slurmd or the machine died) while it ran."""


class SlurmJobFailed(SlurmJobError):
    """The job's script exited non-zero, ran out of memory or time."""


class SlurmQueueTimeout(SlurmJobError):
    """The job was still waiting in the queue past the deadline; it was cancelled."""


@dataclass(frozen=True)
class JobInfo:
    """One `scontrol show job -o` record: id, state, reason, node list, exit code and the rest as text."""

    job_id: str
    state: str
    reason: str
    nodes: str
    exit_code: str
    fields: dict[str, str]


def _run(
    cmd: Sequence[str], env: dict[str, str] | None, timeout: float = 60.0
) -> subprocess.CompletedProcess:
    return subprocess.run(list(cmd), env=env, capture_output=True, text=True, timeout=timeout)


def parse_job(line: str) -> JobInfo:
    """A JobInfo from one line of `scontrol show job -o` (space-separated Key=Value fields)."""
    fields: dict[str, str] = {}
    for token in line.split():
        key, sep, value = token.partition("=")
        if sep and key[:1].isupper():
            fields[key] = value
    return JobInfo(
        *(fields.get(k, "") for k in ("JobId", "JobState", "Reason", "NodeList", "ExitCode")), fields
    )


def submit(script: Path, options: Sequence[str], env: dict[str, str] | None = None) -> str:
    """`sbatch --parsable <options> <script>`; the job id, or RuntimeError with sbatch's message."""
    try:
        done = _run(["sbatch", "--parsable", *options, str(script)], env)
    except FileNotFoundError as e:
        raise RuntimeError(
            "sbatch is not on PATH: the slurm launcher submits from the host that runs the Dagster steps, "
            "which needs Slurm's client commands and SLURM_CONF (apt-get install slurm-client)"
        ) from e
    if done.returncode != 0:
        raise RuntimeError(
            f"sbatch {shlex.join([*options, str(script)])} failed ({done.returncode}): {done.stderr.strip()}"
        )
    return done.stdout.strip().split(";")[0]


def job_info(job_id: str, env: dict[str, str] | None = None) -> JobInfo | None:
    """The job's record from `scontrol show job -o`; None when Slurm no longer knows it."""
    done = _run(["scontrol", "show", "job", "-o", job_id], env)
    if done.returncode != 0 or not done.stdout.strip():
        if "Invalid job id" in done.stderr:
            return None
        raise RuntimeError(f"scontrol show job {job_id} failed ({done.returncode}): {done.stderr.strip()}")
    return parse_job(done.stdout.strip().splitlines()[0])


def cancel(job_id: str, env: dict[str, str] | None = None) -> None:
    """`scancel <job_id>`, silent when the job has ended or scancel cannot run."""
    with contextlib.suppress(OSError, subprocess.TimeoutExpired):
        _run(["scancel", job_id], env)


def failure(info: JobInfo, stderr_tail: str = "") -> SlurmJobError | None:
    """The named error for a job that ended without completing; None for COMPLETED or a live job."""
    j, state = info.job_id, info.state
    tail = f"\nlast lines of its stderr:\n{stderr_tail}" if stderr_tail.strip() else ""
    if state == "CANCELLED":
        return SlurmJobCancelled(
            f"Slurm job {j} was cancelled (scancel or an admin; reason {info.reason}): nothing was "
            "published; materialize the partition again to rerun it",
            j,
            state,
        )
    if state in ("NODE_FAIL", "BOOT_FAIL"):
        return SlurmNodeFailed(
            f"Slurm job {j}: its node {info.nodes or '?'} went down ({state}); nothing was published; "
            "rerun once the node is back (sinfo), or on another node",
            j,
            state,
        )
    if state in ("FAILED", "OUT_OF_MEMORY", "TIMEOUT", "DEADLINE", "PREEMPTED"):
        return SlurmJobFailed(
            f"Slurm job {j} ended {state} (exit code {info.exit_code}, reason {info.reason}){tail}", j, state
        )
    return None


def follow(
    job_id: str,
    env: dict[str, str] | None = None,
    queue_deadline_s: float = 3600.0,
    poll_s: float = 1.0,
    on_poll: Callable[[JobInfo | None], None] | None = None,
    stderr_tail: Callable[[], str] = lambda: "",
    controller_grace_s: float = 120.0,
) -> JobInfo:
    """Poll the job until it ends: its JobInfo when COMPLETED, else the named SlurmJobError."""
    submitted = time.monotonic()
    failing_since: float | None = None
    while True:
        try:
            info = job_info(job_id, env)
            failing_since = None
        except (RuntimeError, subprocess.TimeoutExpired) as e:
            failing_since = failing_since or time.monotonic()
            if time.monotonic() - failing_since > controller_grace_s:
                raise SlurmJobError(
                    f"Slurm job {job_id}: slurmctld did not answer for {controller_grace_s:.0f} s ({e})",
                    job_id,
                    "UNKNOWN",
                ) from e
            time.sleep(poll_s)
            continue
        if on_poll is not None:
            on_poll(info)
        if info is None:
            raise SlurmJobError(
                f"Slurm job {job_id} is no longer known to slurmctld (purged before it was seen ending; "
                "raise MinJobAge)",
                job_id,
                "UNKNOWN",
            )
        if info.state == "COMPLETED":
            return info
        if info.state not in RUNNING_STATES | PENDING_STATES and (err := failure(info, stderr_tail())):
            raise err
        if info.state in PENDING_STATES and time.monotonic() - submitted > queue_deadline_s:
            cancel(job_id, env)
            raise SlurmQueueTimeout(
                f"Slurm job {job_id} was still pending after {queue_deadline_s:.0f} s (reason "
                f"{info.reason}); it was cancelled. Check the partition and the requested resources "
                "(sinfo, squeue), or raise the launcher's queue_deadline_s",
                job_id,
                info.state,
            )
        time.sleep(poll_s)
