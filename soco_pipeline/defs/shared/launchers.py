"""Where a heavy per-model step runs: the `launcher` resource (inprocess | celery | slurm | kubernetes)."""

from __future__ import annotations

import shlex
import warnings
from typing import Any

import dagster as dg

from soco_pipeline.defs.shared.executors import profile
from soco_pipeline.payloads import PayloadResult, run_payload
from soco_pipeline.settings import variable

LAUNCHERS = ("inprocess", "celery", "slurm", "kubernetes")


def launcher_kind(explicit: str = "") -> str:
    """`explicit`, else $SOCO_LAUNCHER, else the profile's: inprocess (local) or celery (distributed)."""
    kind = explicit or variable("SOCO_LAUNCHER") or ("celery" if profile() == "distributed" else "inprocess")
    if kind not in LAUNCHERS:
        raise ValueError(
            f"launcher {kind!r} is not one of {LAUNCHERS} (set SOCO_LAUNCHER or the resource's kind)"
        )
    return kind


class StepLauncher(dg.ConfigurableResource):
    """Runs a payload (soco_pipeline/payloads) where the deployment says (docs/scaling-out.md)."""

    kind: str = ""  # inprocess | celery | slurm | kubernetes; "" = $SOCO_LAUNCHER or the profile's
    workdir: str = ""  # slurm, kubernetes: a shared folder for job folders ($SOCO_LAUNCH_DIR)
    slurm_options: list[str] = []  # extra sbatch options, e.g. ["--partition=gpu", "--gres=gpu:1"]
    queue_deadline_s: float = 3600.0  # slurm: a job still pending this long is cancelled, a named error
    poll_s: float = 1.0  # slurm: seconds between `scontrol show job` polls
    k8s_image: str = ""  # kubernetes: the image holding this project (and its venv)
    k8s_namespace: str = "default"
    k8s_gpus: int = 0  # kubernetes: NVIDIA GPUs per payload pod
    k8s_volume_claim: str = ""  # kubernetes: a ReadWriteMany claim mounted at `workdir` in the pod

    def resolved_kind(self) -> str:
        """The launcher this resource uses (its kind, else $SOCO_LAUNCHER, else the profile's)."""
        return launcher_kind(self.kind)

    def run(self, context: dg.AssetExecutionContext, payload: str, inputs: dict[str, Any]) -> PayloadResult:
        """Run `payload` on `inputs` where this launcher says; its table and metadata (with `checksum`)."""
        kind = self.resolved_kind()
        context.log.info(f"payload {payload}: launcher {kind}")
        if kind in ("inprocess", "celery"):
            return run_payload(payload, inputs, context.log.info)
        if kind == "slurm":
            return self._run_slurm(context, payload, inputs)
        return self._run_kubernetes(context, payload, inputs)

    def _folder(self, context: dg.AssetExecutionContext, payload: str):
        from soco_pipeline.deploy.payload_jobs import JobFolder

        return JobFolder(self.workdir, context.run.run_id, payload, context.partition_key or "all")

    def _run_slurm(self, context: dg.AssetExecutionContext, payload: str, inputs: dict) -> PayloadResult:
        from soco_pipeline.deploy.payload_jobs import forwarded_env, read_report, run_slurm_job

        folder = self._folder(context, payload)
        # Dagster's own Pipes session reads a "preview" property of its message reader: not ours to warn about
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", dg.PreviewWarning)
            with dg.open_pipes_session(
                context.op_execution_context,  # (the asset context's run_id property is deprecated)
                context_injector=dg.PipesFileContextInjector(folder.file("pipes_context.json")),
                message_reader=dg.PipesFileMessageReader(folder.file("pipes_messages.jsonl")),
                extras=folder.extras(inputs),
            ) as session:
                job_id = run_slurm_job(
                    folder,
                    {**forwarded_env(), **session.get_bootstrap_env_vars()},
                    f"soco-{payload}-{context.partition_key or 'all'}",
                    self.slurm_options,
                    context.log.info,
                    context.log.warning,
                    self.queue_deadline_s,
                    self.poll_s,
                )
                messages = dg.PipesClientCompletedInvocation(session).get_custom_messages()
        result = read_report(messages, f"Slurm job {job_id} ({folder.path})")
        return PayloadResult(result.table, {**result.metadata, "slurm_job_id": job_id}, result.extra)

    def _run_kubernetes(self, context: dg.AssetExecutionContext, payload: str, inputs: dict) -> PayloadResult:
        from dagster_k8s import PipesK8sClient

        from soco_pipeline.deploy.payload_jobs import forwarded_env, k8s_pod_spec, read_report, shared_volume

        if not self.k8s_image:
            raise ValueError("the kubernetes launcher needs k8s_image: the image that holds this project")
        folder = self._folder(context, payload)  # on the claim the pod mounts at the same path
        invocation = PipesK8sClient().run(
            context=context,
            namespace=self.k8s_namespace,
            extras=folder.extras(inputs),
            base_pod_spec=k8s_pod_spec(
                self.k8s_image,
                forwarded_env(),
                self.k8s_gpus,
                shared_volume(self.k8s_volume_claim, self.workdir),
            ),
        )
        return read_report(invocation.get_custom_messages(), f"the payload pod of {payload}")


def launcher_for_profile(storage_root: str) -> StepLauncher:
    """The launcher resource of this deployment, from the variables read here (docs/settings.md)."""
    from soco_pipeline.deploy.payload_jobs import default_workdir

    return StepLauncher(
        kind=launcher_kind(),
        workdir=default_workdir(storage_root),
        slurm_options=shlex.split(variable("SOCO_SLURM_OPTIONS")),
        queue_deadline_s=float(variable("SOCO_SLURM_QUEUE_DEADLINE_S", "3600")),
        k8s_image=variable("SOCO_K8S_IMAGE"),
        k8s_namespace=variable("SOCO_K8S_NAMESPACE", "default"),
        k8s_gpus=int(variable("SOCO_K8S_GPUS", "0")),
        k8s_volume_claim=variable("SOCO_K8S_VOLUME_CLAIM"),
    )
