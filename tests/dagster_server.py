"""Start and stop a real `dagster dev` (webserver + daemon) for tests, and talk GraphQL to it."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import requests

PROJECT_ROOT = Path(__file__).resolve().parent.parent
VENV_BIN = Path(os.environ.get("VIRTUAL_ENV", PROJECT_ROOT / ".venv")) / "bin"


def free_port() -> int:
    """A free TCP port on the loopback interface."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_instance_yaml(home: Path, storage_root: Path) -> None:
    """The project's dagster.yaml with its storage placeholder filled in."""
    home.mkdir(parents=True, exist_ok=True)
    text = (PROJECT_ROOT / "dagster.yaml").read_text().replace("@STORAGE@", str(storage_root))
    (home / "dagster.yaml").write_text(text)


class DagsterDev:
    """`dagster dev` on a free loopback port in its own process group; stop() ends the whole group."""

    def __init__(self, home: Path, env: dict[str, str], log_path: Path):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = open(log_path, "wb")  # noqa: SIM115 - closed in stop()
        dagster = VENV_BIN / "dagster"
        cmd = [str(dagster), "dev", "-h", "127.0.0.1", "-p", str(self.port), "-w", "workspace.yaml"]
        self.proc = subprocess.Popen(
            cmd,
            cwd=PROJECT_ROOT,
            env={**os.environ, **env, "DAGSTER_HOME": str(home)},
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def wait_ready(self, timeout: float = 180) -> None:
        """Wait until /server_info answers and the code location has loaded."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"dagster dev exited with {self.proc.returncode}; see {self.log.name}")
            try:
                if requests.get(f"{self.url}/server_info", timeout=2).ok:
                    data = self.graphql(
                        "{ repositoriesOrError { __typename ... on RepositoryConnection { nodes { name } } } }"
                    )
                    if data["repositoriesOrError"].get("nodes"):
                        return
            except requests.RequestException:
                pass
            time.sleep(1)
        raise TimeoutError(f"dagster dev did not come up in {timeout} s; see {self.log.name}")

    def graphql(self, query: str, variables: dict | None = None) -> dict:
        """POST a GraphQL query; raise on transport or GraphQL errors."""
        r = requests.post(
            f"{self.url}/graphql", json={"query": query, "variables": variables or {}}, timeout=60
        )
        r.raise_for_status()
        body = r.json()
        if body.get("errors"):
            raise RuntimeError(f"GraphQL errors: {body['errors']}")
        return body["data"]

    def launch_assets(
        self, asset_keys: list[str], checks: list[tuple[str, str]] = (), tags: dict[str, str] | None = None
    ) -> str:
        """Launch a materialization of the given assets (and their (asset, check) checks) as the UI's
        Materialize button does; return the run id."""
        query = """
        mutation Launch($params: ExecutionParams!) {
          launchPipelineExecution(executionParams: $params) {
            __typename
            ... on LaunchRunSuccess { run { runId } }
            ... on PythonError { message stack }
            ... on RunConfigValidationInvalid { errors { message } }
            ... on InvalidSubsetError { message }
          }
        }"""
        params = {
            "selector": {
                "repositoryLocationName": "soco_pipeline",
                "repositoryName": "__repository__",
                "pipelineName": "__ASSET_JOB",
                "assetSelection": [{"path": [k]} for k in asset_keys],
                "assetCheckSelection": [{"assetKey": {"path": [a]}, "name": n} for a, n in checks],
            },
            "mode": "default",
            "executionMetadata": {"tags": [{"key": k, "value": v} for k, v in (tags or {}).items()]},
            "runConfigData": "{}",
        }
        data = self.graphql(query, {"params": params})["launchPipelineExecution"]
        if data["__typename"] != "LaunchRunSuccess":
            raise RuntimeError(f"launch failed: {data}")
        return data["run"]["runId"]

    def run_status(self, run_id: str) -> str:
        """The status of a run (QUEUED, STARTED, SUCCESS, FAILURE, ...)."""
        q = "query R($id: ID!) { runOrError(runId: $id) { __typename ... on Run { status } } }"
        return self.graphql(q, {"id": run_id})["runOrError"]["status"]

    def wait_run(self, run_id: str, timeout: float = 600) -> str:
        """Wait for a run to finish; return its final status."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            status = self.run_status(run_id)
            if status in ("SUCCESS", "FAILURE", "CANCELED"):
                return status
            time.sleep(2)
        raise TimeoutError(f"run {run_id} did not finish in {timeout} s")

    def stop(self) -> None:
        """SIGTERM the process group, then SIGKILL what is left."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
        self.log.close()
