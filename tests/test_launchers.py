"""The launcher resource and its parts without a cluster: the kind per profile, the Kubernetes pod spec
rendered by dagster-k8s's Pipes pod builder and validated against the kubernetes client's models, the
generated slurm.conf, `scontrol show job` records mapped to named errors, and job output forwarding.
(tests/test_slurm.py runs the Slurm launcher on a real single-node Slurm.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from soco_pipeline.deploy.payload_jobs import ForwardedOutput, k8s_pod_spec, shared_volume
from soco_pipeline.deploy.slurm import slurm_conf
from soco_pipeline.deploy.slurm_jobs import (
    SlurmJobCancelled,
    SlurmJobFailed,
    SlurmNodeFailed,
    failure,
    parse_job,
)
from soco_pipeline.payloads import run_payload, table_checksum

pytestmark = pytest.mark.unit

# `scontrol show job -o` of a job cancelled on the test's single-node Slurm (Slurm 22.05), shortened
CANCELLED = (
    "JobId=2 JobName=job.sh UserId=root(0) GroupId=root(0) MCS_label=N/A Priority=4294901758 Nice=0 "
    "Account=(null) QOS=(null) JobState=CANCELLED Reason=None Dependency=(null) Requeue=1 Restarts=0 "
    "BatchFlag=1 Reboot=0 ExitCode=0:15 RunTime=00:00:01 TimeLimit=UNLIMITED Partition=soco "
    "AllocNode:Sid=localhost:21341 NodeList=vm BatchHost=vm NumNodes=1 NumCPUs=1 "
    "Command=/tmp/s1/job.sh WorkDir=/work StdErr=/tmp/s1/job.err StdIn=/dev/null StdOut=/tmp/s1/job.out Power="
)


@pytest.mark.parametrize(
    ("profile", "override", "expected"),
    [("local", "", "inprocess"), ("distributed", "", "celery"), ("local", "slurm", "slurm")],
)
def test_launcher_kind_follows_the_profile(monkeypatch, profile, override, expected):
    from soco_pipeline.defs.shared.launchers import launcher_for_profile, launcher_kind

    monkeypatch.setenv("SOCO_PROFILE", profile)
    monkeypatch.setenv("SOCO_LAUNCHER", override)
    assert launcher_kind() == expected
    assert launcher_for_profile("/tmp/storage").resolved_kind() == expected


def test_unknown_launcher_is_named(monkeypatch):
    from soco_pipeline.defs.shared.launchers import launcher_kind

    monkeypatch.setenv("SOCO_LAUNCHER", "ray")
    with pytest.raises(ValueError, match="launcher 'ray' is not one of .*SOCO_LAUNCHER"):
        launcher_kind()


def test_k8s_pod_spec_is_a_valid_pod_through_dagster_k8s():
    """The pod dagster-k8s's PipesK8sClient would create from our base pod spec: a V1Pod whose one
    container runs the payload with our environment, Pipes' bootstrap variables and one GPU."""
    import kubernetes
    from dagster_k8s.models import k8s_model_from_dict, k8s_snake_case_dict
    from dagster_k8s.pipes import build_pod_body

    env = {"SOCO_STORAGE": "s3://bucket/soco", "AWS_DEFAULT_REGION": "eu-west-1"}
    spec = k8s_pod_spec("ghcr.io/lab/soco:1", env, gpus=1, shared=shared_volume("soco-launch", "/launch"))
    # strict: an unknown field (a typo) raises instead of being dropped
    model = k8s_model_from_dict(
        kubernetes.client.V1PodSpec, k8s_snake_case_dict(kubernetes.client.V1PodSpec, spec)
    )
    assert model.containers[0].resources.limits == {"nvidia.com/gpu": "1"}
    assert model.volumes[0].persistent_volume_claim.claim_name == "soco-launch"
    pipes_env = {"DAGSTER_PIPES_CONTEXT": "e30=", "DAGSTER_PIPES_MESSAGES": "e30="}
    pod = build_pod_body("soco-features-x", None, None, pipes_env, None, spec)
    assert isinstance(pod, kubernetes.client.V1Pod)
    (container,) = pod.spec.containers
    assert container.command == ["python", "-m", "soco_pipeline.payloads.run"]
    assert container.image == "ghcr.io/lab/soco:1" and pod.spec.restart_policy == "Never"
    assert {e.name: e.value for e in container.env} == {**env, **pipes_env}
    assert container.volume_mounts[0].mount_path == "/launch"
    body = kubernetes.client.ApiClient().sanitize_for_serialization(pod)  # what the API server receives
    assert body["spec"]["containers"][0]["resources"] == {"limits": {"nvidia.com/gpu": "1"}}

    bad = {**spec, "containers": [{**spec["containers"][0], "imagePullPolicyy": "Always"}]}
    with pytest.raises(Exception, match="Unexpected keys"):
        build_pod_body("soco-features-x", None, None, pipes_env, None, bad)


def test_slurm_conf_names_the_single_node_settings(tmp_path):
    text = slurm_conf("vm", 6817, 6818, tmp_path, tmp_path / "munge.socket", 2, 4096)
    lines = set(text.splitlines())
    for line in (
        "SlurmctldHost=vm(127.0.0.1)",
        "SlurmctldPort=6817",
        "SlurmdPort=6818",
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "JobAcctGatherType=jobacct_gather/none",
        "SelectType=select/cons_tres",
        f"AuthInfo=socket={tmp_path / 'munge.socket'}",
        f"StateSaveLocation={tmp_path / 'state'}",
        "NodeName=vm NodeAddr=127.0.0.1 CPUs=2 RealMemory=4096 State=UNKNOWN",
    ):
        assert line in lines, line
    assert not any(line.startswith("Gres") for line in lines)  # a GRES-less partition


def test_job_states_map_to_named_errors():
    info = parse_job(CANCELLED)
    assert (info.job_id, info.state, info.nodes, info.exit_code) == ("2", "CANCELLED", "vm", "0:15")
    err = failure(info)
    assert isinstance(err, SlurmJobCancelled) and str(err).startswith("Slurm job 2 was cancelled")
    node = failure(parse_job(CANCELLED.replace("JobState=CANCELLED", "JobState=NODE_FAIL")))
    assert isinstance(node, SlurmNodeFailed) and "its node vm went down" in str(node)
    failed = failure(parse_job(CANCELLED.replace("JobState=CANCELLED", "JobState=FAILED")), "Traceback: boom")
    assert isinstance(failed, SlurmJobFailed) and "Traceback: boom" in str(failed)
    assert failure(parse_job(CANCELLED.replace("JobState=CANCELLED", "JobState=RUNNING"))) is None
    assert failure(parse_job(CANCELLED.replace("JobState=CANCELLED", "JobState=COMPLETED"))) is None


def test_forwarded_output_sends_whole_lines_once(tmp_path: Path):
    seen: list[str] = []
    out = ForwardedOutput(tmp_path, seen.append, lambda m: seen.append("W " + m))
    out.job = "slurm job 7"
    (tmp_path / "stdout").write_text("one\ntw")
    out()
    with open(tmp_path / "stdout", "a") as f:
        f.write("o\n")
    (tmp_path / "stderr").write_text("warn\n")
    out()
    out()
    assert seen == ["[slurm job 7 stdout] one", "[slurm job 7 stdout] two", "W [slurm job 7 stderr] warn"]


def test_unknown_payload_is_named():
    with pytest.raises(
        ValueError,
        match="unknown payload 'probe'; known: \\['features', 'fgbmk_probe', 'global_features', 'tpips_heads'\\]",
    ):
        run_payload("probe", {}, print)


def test_table_checksum_ignores_row_order():
    import pandas as pd

    a = pd.DataFrame({"image_id": ["b", "a"], "checksum": ["2", "1"]})
    assert table_checksum(a, "image_id", "checksum") == table_checksum(a.iloc[::-1], "image_id", "checksum")
    assert table_checksum(a, "image_id", "checksum") != table_checksum(
        a.assign(checksum=["2", "3"]), "image_id", "checksum"
    )
