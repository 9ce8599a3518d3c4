"""The payload script a Slurm or Kubernetes job runs (`python -m soco_pipeline.payloads.run`): it reads
`payload`, `inputs` and `output` from the Dagster Pipes extras, writes the tables and reports their paths."""

from __future__ import annotations

import socket
import sys
from pathlib import Path

from soco_pipeline.payloads.registry import run_payload
from soco_pipeline.payloads.transfer import read_inputs
from soco_pipeline.storage import write_parquet_atomic


def extra_path(output: str, name: str) -> str:
    """Where the extra table `name` of a payload whose table goes to `output` is written."""
    path = Path(output)
    return str(path.with_name(f"{path.stem}.{name}.parquet"))


def main() -> None:
    """Run the payload the Pipes extras name and report back through Pipes."""
    from dagster_pipes import open_dagster_pipes

    with open_dagster_pipes() as pipes:
        name, output = pipes.extras["payload"], pipes.extras["output"]
        print(f"payload {name} on {socket.gethostname()} (python {sys.version.split()[0]})", flush=True)
        result = run_payload(name, read_inputs(pipes.extras["inputs"]), pipes.log.info)
        write_parquet_atomic(result.table, output)
        extra = {k: extra_path(output, k) for k in result.extra}
        for key, path in extra.items():
            write_parquet_atomic(result.extra[key], path)
        pipes.report_custom_message({"output": output, "extra": extra, "metadata": result.metadata})
        print(f"payload {name}: {len(result.table)} rows -> {output}", flush=True)


if __name__ == "__main__":
    main()
