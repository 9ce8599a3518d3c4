"""Score tables for the correlation study (OmniProbe reference, user CSVs, our leaderboard, the name map),
each in the long SCORE_COLUMNS form; bad input raises ReferenceDataError naming the name and the file."""

from __future__ import annotations

import io
import re
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pandas as pd

from soco_pipeline.storage import PROJECT_ROOT, read_bytes

SCORE_COLUMNS = "model task metric value higher_better task_display is_main_model source".split()
OMNIPROBE_TABLE = PROJECT_ROOT / "assets" / "reference" / "omniprobe_results.csv"
NAME_MAP = PROJECT_ROOT / "assets" / "reference" / "name_map.csv"
DOWNSTREAM_DIR = PROJECT_ROOT / "assets" / "downstream"
PIPELINE_TASK = "soco_pipeline"  # the task name of the pipeline's own leaderboard columns
# Metrics where lower is better when a table leaves higher_better empty (the paper flips their sign).
ERROR_METRIC = re.compile(r"rmse|\berr\b|err\b|error|\bmae\b|\bepe\b", re.IGNORECASE)


class ReferenceDataError(ValueError):
    """A score table is malformed; the message names the model, the file and the fix."""


def _parse_bool(values: pd.Series, metric: pd.Series) -> pd.Series:
    """'true'/'false' (any case, 1/0) as bools; empty cells fall back to the metric name (errors: False)."""
    s = values.astype("string").str.strip().str.lower()
    flag = s.map({"true": 1, "1": 1, "yes": 1, "false": 0, "0": 0, "no": 0}).astype("Float64")
    inferred = ~metric.astype(str).str.contains(ERROR_METRIC)
    return pd.Series(np.where(flag.isna(), inferred, flag.fillna(0) == 1), index=values.index, dtype=bool)


def _read_csv(path: str | Path) -> pd.DataFrame:
    try:
        return pd.read_csv(io.BytesIO(read_bytes(str(path))), dtype={"model": "string", "backbone": "string"})
    except FileNotFoundError:
        raise ReferenceDataError(f"score table {path} does not exist; restore it or fix the path") from None
    except (pd.errors.ParserError, UnicodeDecodeError) as e:
        raise ReferenceDataError(f"score table {path} is not a readable CSV ({e}); fix the file") from None


def normalise_scores(df: pd.DataFrame, source: str) -> pd.DataFrame:
    """A score table in SCORE_COLUMNS form, with clear errors for bad columns, names and values."""
    df = df.copy()
    if "model" not in df.columns and "backbone" in df.columns:
        df = df.rename(columns={"backbone": "model"})
    missing = [c for c in ("model", "task", "metric", "value") if c not in df.columns]
    if missing:
        raise ReferenceDataError(
            f"{source}: columns {missing} are missing; a score table needs model (or backbone), task, metric, "
            f"value and optionally higher_better (see assets/downstream/README.md)"
        )
    names = df["model"].astype("string").str.strip()
    blank = names.isna() | (names == "")
    if blank.any():
        line = int(np.flatnonzero(blank.to_numpy())[0]) + 2  # + header, 1-based
        raise ReferenceDataError(
            f"{source}: line {line} has no model name (task {df['task'].iloc[line - 2]!r}); fill in the model "
            f"or backbone column"
        )
    values = pd.to_numeric(df["value"], errors="coerce")
    bad = values.isna() & df["value"].notna()
    if bad.any():
        i = int(np.flatnonzero(bad.to_numpy())[0])
        raise ReferenceDataError(
            f"{source}: value {df['value'].iloc[i]!r} of model {names.iloc[i]!r} ({df['task'].iloc[i]}, "
            f"{df['metric'].iloc[i]}) is not a number"
        )
    hb = df["higher_better"] if "higher_better" in df.columns else pd.Series(pd.NA, index=df.index)
    out = pd.DataFrame(
        {
            "model": names.astype(str),
            "task": df["task"].astype(str).str.strip(),
            "metric": df["metric"].astype(str).str.strip(),
            "value": values.astype(np.float64),
            "higher_better": _parse_bool(hb, df["metric"]),
            "task_display": df["task_display"].astype(str)
            if "task_display" in df.columns
            else df["task"].astype(str),
            "is_main_model": df["is_main_model"].astype(str).str.lower().eq("true")
            if "is_main_model" in df.columns
            else False,
            "source": str(source),
        }
    )
    out = out[out["value"].notna()]
    _check_unique(out)
    return out.reset_index(drop=True)


def _check_unique(scores: pd.DataFrame) -> None:
    """One value per (model, task, metric), across every file; the error names the model and the files."""
    keys = ["model", "task", "metric"]
    dup = scores.duplicated(keys, keep=False)
    if dup.any():
        d = scores[dup].iloc[0]
        files = sorted(set(scores.loc[dup & scores[keys].eq(d[keys]).all(axis=1), "source"]))
        raise ReferenceDataError(
            f"duplicate model name {d['model']!r}: it has {int((dup & (scores['model'] == d['model'])).sum())} "
            f"rows for ({d['task']}, {d['metric']}) in {', '.join(files)}; keep one row per model, task and "
            f"metric (rename one model, or map aliases with the name map)"
        )


def load_omniprobe(path: str | Path = OMNIPROBE_TABLE) -> pd.DataFrame:
    """The OmniProbe results table (assets/reference/omniprobe_results.csv) in SCORE_COLUMNS form."""
    return normalise_scores(_read_csv(path), str(path))


def load_downstream(folder: str | Path = DOWNSTREAM_DIR) -> pd.DataFrame:
    """Every user table `<folder>/*.csv` (model or backbone, task, metric, value, higher_better), stacked."""
    paths = sorted(Path(folder).glob("*.csv")) if Path(folder).is_dir() else []
    frames = [normalise_scores(_read_csv(p), str(p)) for p in paths]
    if not frames:
        return pd.DataFrame(columns=SCORE_COLUMNS)
    out = pd.concat(frames, ignore_index=True)
    _check_unique(out)
    return out


def leaderboard_scores(
    board: pd.DataFrame, columns: Iterable[str], source: str = "leaderboard"
) -> pd.DataFrame:
    """Our leaderboard as scores of task `soco_pipeline`, one metric per present column."""
    cols = [c for c in columns if c in board.columns]
    long = board.melt(id_vars="backbone", value_vars=cols, var_name="metric", value_name="value")
    long = long.rename(columns={"backbone": "model"}).assign(task=PIPELINE_TASK, higher_better="true")
    return normalise_scores(long, source)


def load_name_map(path: str | Path = NAME_MAP) -> dict[str, str]:
    """alias -> model from a CSV with columns alias, model (comments after '#'); an alias twice is an error."""
    if not Path(path).exists():
        return {}
    df = pd.read_csv(path, comment="#", dtype=str, skipinitialspace=True)
    if list(df.columns[:2]) != ["alias", "model"]:
        raise ReferenceDataError(f"name map {path}: the header must be `alias,model`, got {list(df.columns)}")
    df = df.apply(lambda s: s.str.strip())
    blank = df["alias"].isna() | df["model"].isna()
    if blank.any():
        line = int(np.flatnonzero(blank.to_numpy())[0]) + 2
        raise ReferenceDataError(f"name map {path}: row {line} lacks an alias or a model name; fill both in")
    dup = df["alias"][df["alias"].duplicated()]
    if len(dup):
        targets = sorted(df.loc[df["alias"] == dup.iloc[0], "model"])
        raise ReferenceDataError(
            f"name map {path}: duplicate alias {dup.iloc[0]!r} (mapped to {targets}); keep one row per alias"
        )
    return dict(zip(df["alias"], df["model"], strict=True))


def apply_name_map(
    scores: pd.DataFrame, name_map: dict[str, str], map_source: str = "the name map"
) -> pd.DataFrame:
    """Scores with aliases replaced by model names; unknown targets and duplicates are errors."""
    if not name_map:
        return scores
    known = set(scores["model"]) | set(name_map)
    unknown = sorted(t for t in set(name_map.values()) if t not in known)
    if unknown:
        alias = next(a for a, t in name_map.items() if t == unknown[0])
        raise ReferenceDataError(
            f"{map_source}: model name {unknown[0]!r} (alias {alias!r}) is missing from every score table; "
            f"fix the spelling in the map or add the model's scores"
        )
    out = scores.assign(model=scores["model"].map(lambda m: name_map.get(m, m)))
    _check_unique(out)
    return out


def combine_scores(
    *tables: pd.DataFrame, name_map: dict[str, str] | None = None, map_source: str = "the name map"
) -> pd.DataFrame:
    """All score tables stacked, aliases mapped, one value per (model, task, metric) checked."""
    frames = [t for t in tables if t is not None and len(t)]
    scores = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=SCORE_COLUMNS)
    _check_unique(scores)
    scores = apply_name_map(scores, name_map or {}, map_source)
    # A model flagged main anywhere is a main model everywhere.
    main = scores.groupby("model")["is_main_model"].transform("any").astype(bool)
    return scores.assign(is_main_model=main)[SCORE_COLUMNS].reset_index(drop=True)


def select_models(
    scores: pd.DataFrame, subset: str | list[str] | None, source: str = "the config"
) -> set[str]:
    """A subset's model names: None/'all', 'is_main_model', or a list of known names."""
    models = set(scores["model"])
    if subset is None or subset == "all":
        return models
    if subset == "is_main_model":
        return set(scores.loc[scores["is_main_model"], "model"])
    if isinstance(subset, str):
        raise ReferenceDataError(
            f"{source}: subset {subset!r} is not 'all', 'is_main_model' or a list of names"
        )
    missing = [m for m in subset if m not in models]
    if missing:
        raise ReferenceDataError(
            f"{source}: model name {missing[0]!r} in the subset is missing from every score table "
            f"({len(missing)} such names); fix the spelling or add an alias to the name map"
        )
    return set(subset)
