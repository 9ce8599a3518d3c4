"""The payload script a Slurm or Kubernetes job runs: `python -m soco_pipeline.payloads.run`.

It opens Dagster Pipes (the context and message channel named by the DAGSTER_PIPES_* variables the
launcher sets), reads `payload`, `inputs` and `output` from the Pipes extras, runs the payload, writes its
table atomically to `output` and reports the metadata (with the checksum) as a Pipes custom message.
Its log lines go back through Pipes; stdout and stderr stay in the job's own files, which the launcher
forwards to the Dagster run's log. `dagster_pipes` is the protocol's own small package, not Dagster.
"""

from __future__ import annotations

import socket
import sys

from soco_pipeline.payloads.registry import run_payload
from soco_pipeline.payloads.transfer import read_inputs
from soco_pipeline.storage import write_parquet_atomic


def main() -> None:
    """Run the payload the Pipes extras name and report back through Pipes."""
    from dagster_pipes import open_dagster_pipes

    with open_dagster_pipes() as pipes:
        name, output = pipes.extras["payload"], pipes.extras["output"]
        print(f"payload {name} on {socket.gethostname()} (python {sys.version.split()[0]})", flush=True)
        result = run_payload(name, read_inputs(pipes.extras["inputs"]), pipes.log.info)
        write_parquet_atomic(result.table, output)
        pipes.report_custom_message({"output": output, "metadata": result.metadata})
        print(f"payload {name}: {len(result.table)} rows -> {output}", flush=True)


if __name__ == "__main__":
    main()
