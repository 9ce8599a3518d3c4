"""Results as Every Eval Ever records (PyPI `every-eval-ever` 0.3.0 schemas; docs/results.md, "Every Eval Ever
records"): ours (`measured_log`, with the per-sample sidecar) and the published figures (`published_logs`);
`schema_errors` checks a document when `make install` unpacked the schemas."""

from __future__ import annotations

import functools
import hashlib
import json
import re
import sys
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any

import pandas as pd

from soco_pipeline.settings import env_value
from soco_pipeline.storage import write_bytes_atomic

EEE_VERSION = "0.3.0"
DEVELOPER = "soco_pipeline"  # our models are spec files of this project: their datastore developer folder
PUBLISHED_DEVELOPER = "published"  # a quoted figure's model, as the source names it
SCHEMAS = {"aggregate": "eval.schema.json", "instance": "instance_level_eval.schema.json"}


class EeeExportError(ValueError):
    """A record cannot be written as an Every Eval Ever record; the message says why and what to do."""


def schema_dir() -> Path:
    """The unpacked every-eval-ever package: $SOCO_EEE_DIR, else `<venv>/share/every-eval-ever/<version>`."""
    return Path(env_value("eee_dir") or Path(sys.prefix) / "share" / "every-eval-ever" / EEE_VERSION)


def schema_path(kind: str) -> Path:
    """The path of the schema of `kind` (aggregate | instance) in the unpacked wheel (it may be missing)."""
    return schema_dir() / "every_eval_ever" / "schemas" / SCHEMAS[kind]


def schema_errors(doc: dict, kind: str) -> list[str] | None:
    """The schema errors of `doc` (draft-07), or None when the schema is not unpacked (`make install`)."""
    path = schema_path(kind)
    if not path.is_file():
        return None
    validator = draft7_validator(str(path))
    return [
        f"{'/'.join(map(str, e.absolute_path)) or '(root)'}: {e.message}" for e in validator.iter_errors(doc)
    ]


@functools.cache
def draft7_validator(path: str):
    """A draft-07 validator of the schema at `path` (read once per process)."""
    import jsonschema

    return jsonschema.Draft7Validator(json.loads(Path(path).read_text()))


def slug(name: str) -> str:
    """A portable path component for a model name: runs of other than `[A-Za-z0-9._-]` become '-'."""
    s = re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-.")
    if not s:
        raise EeeExportError(f"model name {name!r} has no character usable in a datastore path")
    return s


def record_uuid(*parts: str) -> str:
    """A UUID4-shaped id derived from `parts` (the same inputs give the same file name)."""
    digest = hashlib.sha256("\x1f".join(parts).encode()).digest()
    return str(uuid.UUID(bytes=digest[:16], version=4))


def epoch(date: str) -> str:
    """Unix epoch seconds (as text, the schema's `retrieved_timestamp`) of an ISO date."""
    return str(int(datetime.fromisoformat(str(date).replace("Z", "+00:00")).timestamp()))


def revision(record: dict[str, Any]) -> str:
    """The project's git revision ('<commit>', '+dirty' with changes), or 'unknown'."""
    g = record.get("git_hash")
    if isinstance(g, dict) and g.get("commit"):
        return str(g["commit"]) + ("+dirty" if g.get("dirty") else "")
    return str(g) if g else "unknown"


def model_info(name: str, developer: str, details: dict[str, str]) -> dict[str, Any]:
    """`model_info`: a flat id (the slug of `name`) filed under `developer`."""
    return {"name": name, "id": slug(name), "developer": developer, "additional_details": details}


def uncertainty(result: dict[str, Any]) -> dict[str, Any]:
    """The schema's `uncertainty` of a record entry: its 95% CI and cluster SE where they exist, else {}."""
    out: dict[str, Any] = {}
    boot = result.get("ci95_boot_category") or [None, None]
    logit = result.get("ci95_cluster_image_logit") or [None, None]
    if None not in boot:
        lo, hi, how = *boot, "bootstrap over the family's categories (its headline CI)"
    elif None not in logit:
        lo, hi, how = *logit, "logit-scale interval from the cluster-robust standard error"
    else:
        lo = hi = how = None
    if how:
        out["confidence_interval"] = {"lower": lo, "upper": hi, "confidence_level": 0.95, "method": how}
    if result.get("se_cluster_image") is not None:
        out["standard_error"] = {
            "value": result["se_cluster_image"],
            "method": "cluster-robust over samples sharing an input (image, case or triplet)",
        }
    if out and result.get("n_units"):
        out["num_samples"] = int(result["n_units"])
    return out


def metric_config(family: str, metric: str, description: str, details: dict[str, str]) -> dict[str, Any]:
    return {
        "evaluation_description": description,
        "metric_id": f"{family}.{metric}",
        "metric_name": metric,
        "metric_kind": "accuracy",
        "metric_unit": "percent",
        "lower_is_better": False,
        "score_type": "continuous",
        "min_score": 0.0,
        "max_score": 100.0,
        "additional_details": details,
    }


def measured_log(
    record: dict[str, Any], *, kind: str, simulated: bool, title: str
) -> tuple[str, dict[str, Any]]:
    """(uuid, aggregate record) of one of our results records (`kind`: backbone | lvlm)."""
    family, model = record["family"], record["model"]
    hashes = json.dumps(record["task_hashes"], sort_keys=True)
    rid = record_uuid("measured", family, model, hashes)
    data = "official"
    if simulated:
        data = "simulated: the embedded generator's data, not the published benchmark's"
    source_data = {
        "dataset_name": title,
        "source_type": "other",
        "additional_details": {"data": data, "task_hashes": hashes},
    }
    results = []
    for metric, r in sorted(record["results"].items()):
        if r.get("value") is None:
            continue
        details = {"partial": str(record["subset"]["partial"]).lower()}
        if record["subset"].get("description"):
            details["subset"] = str(record["subset"]["description"])
        score: dict[str, Any] = {"score": float(r["value"])}
        if u := uncertainty(r):
            score["uncertainty"] = u
        results.append(
            {
                "evaluation_result_id": f"{family}.{metric}",
                "evaluation_name": f"{family}/{metric}",
                "source_data": source_data,
                "evaluation_timestamp": record["date"],
                "metric_config": metric_config(family, metric, f"{title}: {metric}", details),
                "score_details": score,
            }
        )
    if not results:
        raise EeeExportError(f"the record of {model!r} ({family}) has no result with a value to export")
    deployment = "self_deployed" if kind == "backbone" else "unknown"  # an LVLM spec names an endpoint
    details = {"deployment_type": deployment, "model_availability": "unknown", "spec_kind": kind}
    details |= {"spec_hash": str(record["config"]["spec_hash"])}
    return rid, {
        "schema_version": EEE_VERSION,
        "evaluation_id": f"{family}/{slug(model)}/{epoch(record['date'])}",
        "evaluation_timestamp": record["date"],
        "retrieved_timestamp": epoch(record["date"]),
        "source_metadata": {
            "source_name": "soco_pipeline results record",
            "source_type": "evaluation_run",
            "source_organization_name": "soco_pipeline (a local run)",
            "evaluator_relationship": "third_party",
            "additional_details": {
                "family": family,
                "protocol_hash": str(record["config"]["protocol_hash"]),
                "git_revision": revision(record),
            },
        },
        "model_info": model_info(model, DEVELOPER, details),
        "eval_library": {"name": "soco_pipeline", "version": revision(record)},
        "evaluation_results": results,
    }


def instance_lines(aggregate: dict[str, Any], family: str, scores: pd.DataFrame) -> list[str]:
    """The sidecar's JSONL lines, one per score row; correct at 1, or a share (TPIPS) above one half."""
    reported = {r["evaluation_result_id"] for r in aggregate["evaluation_results"]}
    s = scores.assign(rid=family + "." + scores["metric"].astype(str))
    s = s[s["rid"].isin(reported)]
    element = s["element"].astype(str)
    sample = s["unit"].astype(str).where(element == "", s["unit"].astype(str) + "/" + element)
    score = s["score"].astype(float).to_numpy()
    correct = score > 0.5
    base = {
        "schema_version": EEE_VERSION,
        "evaluation_id": aggregate["evaluation_id"],
        "model_id": aggregate["model_info"]["id"],
        "interaction_type": "single_turn",
        "answer_attribution": [],
    }
    lines = []
    for rid, metric, sid, grp, clu, sc, ok in zip(
        s["rid"], s["metric"], sample, s["group"], s["cluster"], score, correct, strict=True
    ):
        doc = {
            **base,
            "evaluation_name": f"{family}/{metric}",
            "evaluation_result_id": rid,
            "sample_id": sid,
            "input": {"raw": f"{family} sample {sid} (group {grp})", "reference": []},
            "output": {"raw": []},
            "evaluation": {"score": float(sc), "is_correct": bool(ok)},
            "metadata": {"group": str(grp), "cluster": str(clu)},
        }
        lines.append(json.dumps(doc, allow_nan=False))
    return lines


def published_logs(rows: pd.DataFrame, retrieved: str) -> list[tuple[str, dict[str, Any]]]:
    """(uuid, aggregate record) per (model, family, source) of published rows (`documentation`)."""
    from soco_pipeline.published_figures import KNOBS

    out = []
    for (model, family, source), g in rows.groupby(["model", "family", "source"], sort=True):
        results = []
        for r in g.itertuples(index=False):
            knobs = {k: str(getattr(r, k)) for k in KNOBS if str(getattr(r, k) or "") not in ("", "nan")}
            details = {"setting": str(r.setting), **knobs}
            if str(r.note or "") not in ("", "nan"):
                details["note"] = str(r.note)
            cfg = metric_config(family, r.metric, f"{family} {r.metric} as published ({r.setting})", details)
            if "alpha" in knobs:
                cfg["metric_parameters"] = {"alpha": float(knobs["alpha"])}
            results.append(
                {
                    "evaluation_result_id": f"{family}.{r.metric}@{slug(str(r.setting))}",
                    "evaluation_name": f"{family}/{r.metric}",
                    "source_data": {"dataset_name": family, "source_type": "other"},
                    "metric_config": cfg,
                    "score_details": {"score": float(r.value)},
                }
            )
        rid = record_uuid("published", model, family, source)
        details = {"deployment_type": "unknown", "model_availability": "unknown"}
        doc = {
            "schema_version": EEE_VERSION,
            "evaluation_id": f"{family}/{slug(model)}/published/{rid[:8]}",
            "retrieved_timestamp": retrieved,
            "source_metadata": {
                "source_name": str(source),
                "source_type": "documentation",
                "source_organization_name": str(source),
                "evaluator_relationship": "other",
                "additional_details": {
                    "quoted_from": "assets/reference/published.csv",
                    "relationship": "who ran the model is the source's statement, not recorded here",
                },
            },
            "model_info": model_info(str(model), PUBLISHED_DEVELOPER, details),
            "eval_library": {"name": "unknown", "version": "unknown"},
            "evaluation_results": results,
        }
        out.append((rid, doc))
    return out


def write_log(
    out_dir: str | Path, collection: str, rid: str, aggregate: dict, lines: list[str] | None
) -> tuple[Path, Path | None]:
    """Write the aggregate record (and its sidecar, which it points at by sha256 and row count) under
    `<out_dir>/data/<collection>/<developer>/<model id>/`; returns both paths (sidecar None without
    `lines`)."""
    info = aggregate["model_info"]
    folder = Path(out_dir) / "data" / slug(collection) / info["developer"] / info["id"]
    folder.mkdir(parents=True, exist_ok=True)
    sidecar = None
    if lines:
        text = "\n".join(lines) + "\n"
        sidecar = folder / f"{rid}_samples.jsonl"
        write_bytes_atomic(str(sidecar), text.encode())
        aggregate = {
            **aggregate,
            "detailed_evaluation_results": {
                "format": "jsonl",
                "file_path": sidecar.relative_to(Path(out_dir)).as_posix(),
                "hash_algorithm": "sha256",
                "checksum": hashlib.sha256(text.encode()).hexdigest(),
                "total_rows": len(lines),
                "additional_details": {
                    "sample_id": "the scored unit (pair/keypoint, item, image or triplet/aspect)",
                    "output": "left empty: the per-sample table holds the outcome, not the model's output "
                    "(a predicted point, a picked option); see the model's prediction or answer table",
                },
            },
        }
    path = folder / f"{rid}.json"
    write_bytes_atomic(str(path), (json.dumps(aggregate, indent=2, allow_nan=False) + "\n").encode())
    return path, sidecar


def checked(aggregate: dict, lines: list[str] | None, where: str) -> str:
    """Check a record and its sidecar against the schemas (raise on errors); returns how it was checked."""
    errors = schema_errors(aggregate, "aggregate")
    if errors is None:
        return f"not checked: no schema at {schema_path('aggregate')} (run `make install`)"
    for n, line in enumerate(lines or [], start=1):
        errors += [f"sidecar line {n}: {e}" for e in schema_errors(json.loads(line), "instance") or []]
        if len(errors) > 5:
            break
    if errors:
        raise EeeExportError(
            f"{where}: not a valid Every Eval Ever {EEE_VERSION} record: " + "; ".join(errors[:5])
        )
    return f"checked against every-eval-ever {EEE_VERSION}'s schemas"
