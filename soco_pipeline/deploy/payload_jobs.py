"""A payload run as a separate job (Slurm, Kubernetes): its folder, its forwarded output, its result."""

from __future__ import annotations

import shlex
import sys
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from soco_pipeline.deploy import slurm_jobs
from soco_pipeline.payloads import PayloadResult
from soco_pipeline.payloads.transfer import write_inputs
from soco_pipeline.settings import environment, variable
from soco_pipeline.storage import PROJECT_ROOT, is_remote, read_parquet

PAYLOAD_MODULE = "soco_pipeline.payloads.run"
# the step's variables a payload job needs (the rest of a Slurm job's environment is the submitter's)
FORWARDED_PREFIXES = ("SOCO_", "AWS_", "FSSPEC_", "HF_")


def forwarded_env() -> dict[str, str]:
    """The variables a payload job needs from the step's environment: SOCO_*, AWS_*, FSSPEC_*, HF_*."""
    return {k: v for k, v in environment().items() if k.startswith(FORWARDED_PREFIXES)}


def default_workdir(storage_root: str) -> str:
    """$SOCO_LAUNCH_DIR, else <storage_root>/launch when the storage root is a local folder, else ''."""
    workdir = variable("SOCO_LAUNCH_DIR")
    if not workdir and not is_remote(storage_root):
        workdir = str(Path(storage_root) / "launch")
    return workdir


class JobFolder:
    """The folder of one payload job under `workdir` (a folder every node mounts)."""

    def __init__(self, workdir: str, run_id: str, payload: str, partition: str) -> None:
        if not workdir or is_remote(workdir):
            raise ValueError(
                f"a payload job needs a shared POSIX folder for its files, not {workdir!r}: set the "
                "launcher's workdir ($SOCO_LAUNCH_DIR) to a folder every node mounts"
            )
        self.payload = payload
        self.path = Path(workdir).resolve() / f"{run_id[:8]}-{payload}-{partition}-{uuid.uuid4().hex[:8]}"
        self.path.mkdir(parents=True)

    def file(self, name: str) -> str:
        """The path of `name` in the folder (the Pipes context and message files)."""
        return str(self.path / name)

    def extras(self, inputs: dict[str, Any]) -> dict[str, str]:
        """Write the inputs; the Pipes extras the payload script reads (payload, inputs, output)."""
        return {
            "payload": self.payload,
            "inputs": write_inputs(self.path / "inputs", inputs),
            "output": self.file("output.parquet"),
        }

    def script(self, env: dict[str, str]) -> Path:
        """The batch script: export `env`, then run the payload module with this Python."""
        path = self.path / "job.sh"
        path.write_text(
            "#!/bin/sh\n# a SOCO payload job (soco_pipeline/deploy/payload_jobs.py)\n"
            + "".join(f"export {k}={shlex.quote(v)}\n" for k, v in sorted(env.items()))
            + f"exec {shlex.quote(sys.executable)} -m {PAYLOAD_MODULE}\n"
        )
        path.chmod(0o755)
        return path


class ForwardedOutput:
    """New whole lines of a job's stdout/stderr files, sent to `info` / `warning` as they appear."""

    def __init__(self, folder: Path, info: Callable[[str], None], warning: Callable[[str], None]) -> None:
        self.files = {"stdout": folder / "stdout", "stderr": folder / "stderr"}
        self.emit = {"stdout": info, "stderr": warning}
        self.offsets = dict.fromkeys(self.files, 0)
        self.job = "job"

    def __call__(self, _info: object = None) -> None:
        """Forward what was appended since the last call (whole lines; the rest waits for the next)."""
        for stream, path in self.files.items():
            if not path.exists():
                continue
            with open(path, "rb") as f:
                f.seek(self.offsets[stream])
                data = f.read()
            end = data.rfind(b"\n") + 1
            self.offsets[stream] += end
            for line in data[:end].decode(errors="replace").splitlines():
                self.emit[stream](f"[{self.job} {stream}] {line}")

    def tail(self, stream: str = "stderr", lines: int = 20) -> str:
        """The last `lines` lines of a stream (for an error message)."""
        path = self.files[stream]
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) if path.exists() else ""


def run_slurm_job(
    folder: JobFolder,
    env: dict[str, str],
    name: str,
    options: Sequence[str],
    log: Callable[[str], None],
    warning: Callable[[str], None],
    queue_deadline_s: float,
    poll_s: float,
) -> str:
    """Submit the folder's payload job with sbatch and follow it; whatever ends the wait cancels the job."""
    out = ForwardedOutput(folder.path, log, warning)
    job_id = slurm_jobs.submit(
        folder.script(env),
        [
            f"--job-name={name}",
            f"--output={folder.path / 'stdout'}",
            f"--error={folder.path / 'stderr'}",
            f"--chdir={PROJECT_ROOT}",
            "--no-requeue",
            *options,
        ],
    )
    out.job = f"slurm job {job_id}"
    log(f"submitted Slurm job {job_id} ({folder.path})")
    try:
        slurm_jobs.follow(
            job_id,
            queue_deadline_s=queue_deadline_s,
            poll_s=poll_s,
            on_poll=out,
            stderr_tail=lambda: out.tail("stderr"),
        )
    except BaseException:
        out()
        slurm_jobs.cancel(job_id)
        raise
    out()
    return job_id


def read_report(messages: list[Any], where: str) -> PayloadResult:
    """The payload's result from its last Pipes custom message (checksums verified)."""
    if not messages:
        raise RuntimeError(f"{where} completed without reporting its result through Pipes")
    report = messages[-1]
    extra = {k: read_parquet(v) for k, v in report.get("extra", {}).items()}
    return PayloadResult(read_parquet(report["output"]), dict(report["metadata"]), extra)


def shared_volume(claim: str, path: str) -> tuple[list[dict], list[dict]] | None:
    """The pod volume and mount of the ReadWriteMany claim at `path` (the job folders), or None."""
    if not claim:
        return None
    return (
        [{"name": "soco-launch", "persistentVolumeClaim": {"claimName": claim}}],
        [{"name": "soco-launch", "mountPath": path}],
    )


def k8s_pod_spec(
    image: str,
    env: dict[str, str],
    gpus: int = 0,
    shared: tuple[list[dict], list[dict]] | None = None,
    service_account: str = "",
) -> dict:
    """The pod spec of a payload pod (its container named `dagster-pipes-execution`, for PipesK8sClient)."""
    container: dict[str, Any] = {
        "name": "dagster-pipes-execution",
        "image": image,
        "command": ["python", "-m", PAYLOAD_MODULE],
        "env": [{"name": k, "value": v} for k, v in sorted(env.items())],
    }
    if gpus:
        container["resources"] = {"limits": {"nvidia.com/gpu": str(gpus)}}
    spec: dict[str, Any] = {"restartPolicy": "Never", "containers": [container]}
    if shared:
        spec["volumes"], container["volumeMounts"] = shared
    if service_account:
        spec["serviceAccountName"] = service_account
    return spec
