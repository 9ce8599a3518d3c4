"""A results record as Hugging Face Hub `.eval_results/` YAML, written and read back with `huggingface_hub`;
nothing is uploaded."""

from __future__ import annotations

from pathlib import Path

import yaml

HUB_FOLDER = ".eval_results"


class HubExportError(ValueError):
    """A record cannot be written in the Hub's format; the message says why and what to do."""


def hub_entries(record: dict, dataset_id: str, notes: str = "") -> list:
    """One `EvalResultEntry` per headline result with a value (task_id = the metric), dated by the record."""
    from huggingface_hub import EvalResultEntry

    if "/" not in dataset_id:
        raise HubExportError(
            f"dataset id {dataset_id!r} is not '<owner>/<name>': the Hub attaches results to a benchmark "
            f"dataset repo; pass --dataset-id with the benchmark's Hub id"
        )
    entries = []
    for metric, result in sorted(record["results"].items()):
        if result.get("value") is None:
            continue
        entries.append(
            EvalResultEntry(
                dataset_id=dataset_id,
                task_id=metric,
                value=round(float(result["value"]), 4),
                date=str(record["date"]),
                notes=notes or None,
            )
        )
    if not entries:
        raise HubExportError(f"the record of {record['model']!r} has no result with a value to export")
    return entries


def write_hub_results(record: dict, out_dir: str | Path, dataset_id: str, notes: str = "") -> Path:
    """Write `<out_dir>/.eval_results/<family>.yaml`, checked by a round trip through the Hub parser."""
    from huggingface_hub import eval_result_entries_to_yaml, parse_eval_result_entries

    entries = hub_entries(record, dataset_id, notes)
    path = Path(out_dir) / HUB_FOLDER / f"{record['family']}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    text = yaml.safe_dump(eval_result_entries_to_yaml(entries), sort_keys=False)
    tmp = path.with_suffix(".yaml.tmp")
    tmp.write_text(text)
    back = parse_eval_result_entries(yaml.safe_load(tmp.read_text()))
    got = [(e.dataset_id, e.task_id, e.value) for e in back]
    want = [(e.dataset_id, e.task_id, e.value) for e in entries]
    if got != want:
        tmp.unlink()
        raise HubExportError(f"{path}: the Hub parser read back {got}, not {want}")
    tmp.replace(path)
    return path
