"""A fourth task family from docs/develop.md's recipe, with nothing else edited.

The recipe's code blocks (each starts with its path) are written into a copy of the project: one folder in
tasks/, one in defs/, one YAML, and no registry line. In a fresh interpreter on that copy the family is in the
definitions, its tables in the registry, the demo's runner runs it per backbone and prints its board (the
SOCO oracle gets the contract's not-applicable row: it reads no pixels); the demo's summary assets
(model_headlines, model_summary, results_database, results_report) then show its headline in
`model_summary`, its tables and summary column in SQL, and its board and summary column on the results page,
in a section titled from its `FamilySpec`, and its regression watch (`toy_history`, its sensor). Through the
console script in fresh processes, `soco leaderboard --family toy` prints its board, `soco export-results
--format record --family toy` writes its results record and `soco run SPEC --families toy` evaluates a new
backbone on it.
"""

from __future__ import annotations

import datetime as dt
import html
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from soco_pipeline.storage import PROJECT_ROOT
from tests.dagster_server import write_instance_yaml

pytestmark = [pytest.mark.pipeline, pytest.mark.timeout(900)]

RECIPE = PROJECT_ROOT / "docs" / "develop.md"
SCRIPT = """
import json, sys
import dagster as dg
from soco_pipeline.defs.definitions import build_definitions
from soco_pipeline.cli.demo import Runner, Stage, families, run_families
from soco_pipeline.report.results_db import query
from soco_pipeline.tables import table_for

storage, backbones, home = sys.argv[1:4]
overrides = dict(storage_root=storage, backbones_dir=backbones, lvlms_dir=backbones + "/none", device="cpu")
defs = build_definitions(**overrides)
found = [f.name for f in families(defs)]
others = [name for name in found if name != "toy"]
with dg.DagsterInstance.from_config(home) as instance:
    instance.add_dynamic_partitions("backbones", ["dense_sift", "oracle_part"])
    runner = Runner(defs, instance, overrides, log=lambda m: None)
    boards = run_families(defs, runner, ["dense_sift", "oracle_part"], [], exclude=others)
    # the demo's summary stage but SOCO's leaderboard and the correlation (no SOCO run here)
    keys = ["model_headlines", "model_summary", "results_database", "results_report"]
    runner.run(Stage("summary", "toy_summary", [dg.AssetKey(k) for k in keys]))
    db = storage + "/results.duckdb"
    rows = query(db, "select model, score, status, reason from toy_leaderboard").to_dict("records")
    scores = query(db, "select count(*) as n from toy_scores").n.item()
    items = query(db, "select count(*) as n from toy_items").n.item()
    summary = query(db, "select * from model_summary order by model").to_dict("records")
    headlines = query(db, "select model, family, value from model_headlines").to_dict("records")
    history = query(db, "select model, family, metric, value from toy_history").to_dict("records")
print(json.dumps({
    "families": found, "failed": runner.failed, "board": boards.get("toy", ""), "rows": rows,
    "scores": int(scores), "items": int(items), "summary": summary, "headlines": headlines,
    "history": history, "sensors": sorted(s.name for s in defs.sensors if s.name.startswith("toy")),
    "partitioned": [table_for(a).partitioned for a in ("toy_items", "toy_scores", "toy_leaderboard")],
}, default=str))
"""


def recipe_files(text: str) -> dict[str, str]:
    """{path: content} of the code blocks in develop.md's "Add a task family" whose first line names a path."""
    section = text.split("## Add a task family", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```(?:python|yaml)\n(.*?)```", section, flags=re.S)
    files = {}
    for block in blocks:
        first, _, body = block.partition("\n")
        if first.startswith("# ") and "/" in first:
            files[first[2:].strip()] = body
    return files


def page_table(page: str, section: str) -> list[list[str]]:
    """The cells (text) of the first table in the results page's <section id=...>, header row first."""
    found = re.search(rf'<section id="{section}">(.*?)</section>', page, flags=re.S)
    assert found, f"no section {section!r} on the page"
    table = re.search(r"<table.*?</table>", found.group(1), flags=re.S)
    assert table, f"no table in section {section!r}"
    rows = re.findall(r"<tr.*?</tr>", table.group(0), flags=re.S)
    cell = r"<t[hd][^>]*>(.*?)</t[hd]>"
    return [
        [html.unescape(re.sub(r"<[^>]+>", "", c)).strip() for c in re.findall(cell, r, re.S)] for r in rows
    ]


def test_the_recipe_names_one_folder_in_tasks_one_in_defs_and_one_yaml():
    files = recipe_files(RECIPE.read_text())
    assert sorted(files) == [
        "assets/toy.yaml",
        "soco_pipeline/defs/toy/__init__.py",
        "soco_pipeline/tasks/toy/__init__.py",
    ]


def test_a_toy_family_from_the_recipe_reaches_the_demo_the_summary_sql_and_the_page(tmp_path):
    project = tmp_path / "project"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for folder in ("soco_pipeline", "assets"):
        shutil.copytree(PROJECT_ROOT / folder, project / folder, ignore=ignore)
    for name in ("pyproject.toml", "dagster.yaml"):
        shutil.copy(PROJECT_ROOT / name, project / name)
    for rel, content in recipe_files(RECIPE.read_text()).items():
        assert not (project / rel).exists(), f"the recipe must add files, not edit {rel}"
        (project / rel).parent.mkdir(parents=True, exist_ok=True)
        (project / rel).write_text(content)
    backbones = tmp_path / "backbones"
    backbones.mkdir()
    for name in ("dense_sift", "oracle_part"):
        shutil.copy(PROJECT_ROOT / "assets" / "backbones" / f"{name}.yaml", backbones)
    storage, home = tmp_path / "storage", tmp_path / "home"
    write_instance_yaml(home, storage)
    env = {**os.environ, "PYTHONPATH": str(project), "DAGSTER_HOME": str(home)}
    days = {dt.datetime.now(dt.UTC).date()}
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(storage), str(backbones), str(home)],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    days.add(dt.datetime.now(dt.UTC).date())
    assert done.returncode == 0, done.stderr[-4000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert "toy" in out["families"] and out["failed"] == {}
    assert out["partitioned"] == [False, True, False]
    weights = np.random.default_rng(0).uniform(1, 2, 3)
    expected = 100 * len("dense_sift") / (len("dense_sift") + weights.sum())
    rows = {r["model"]: r for r in out["rows"]}
    assert rows["dense_sift"]["status"] == "ok"
    assert rows["dense_sift"]["score"] == pytest.approx(expected)
    assert rows["oracle_part"]["status"] == "not_applicable" and "pixels" in rows["oracle_part"]["reason"]
    assert out["scores"] == 2 and out["items"] == 3
    assert "dense_sift" in out["board"] and "oracle_part" in out["board"]
    # model_summary (SQL): one row per model with a headline, the toy columns beside SOCO's (no SOCO run here)
    assert out["headlines"] == [{"model": "dense_sift", "family": "toy", "value": pytest.approx(expected)}]
    # its regression watch (the spec's `watch`): one history row of the backbone it scores, and a sensor
    watched = {"model": "dense_sift", "family": "toy", "metric": "score", "value": pytest.approx(expected)}
    assert out["history"] == [watched] and out["sensors"] == ["toy_regression_sensor"]
    (summary,) = out["summary"]
    assert summary["model"] == "dense_sift" and summary["toy"] == pytest.approx(expected)
    assert summary["toy_simulated"] is True and np.isnan(summary["soco"]) and np.isnan(summary["toy_ci_low"])
    assert pd.Timestamp(summary["toy_date"]).date() in days  # the day the toy board was materialized
    assert {"fgbmk", "mmvm", "tpips", "toy_ci_high"} <= set(summary)
    # the results page: the summary's toy column and the toy board's section
    page = (storage / "report" / "index.html").read_text()
    head, *body = page_table(page, "summary")
    assert "toy" in head, head
    (row,) = [r for r in body if r[0] == "dense_sift"]
    assert row[head.index("toy")] == f"{expected:.1f}"
    head, *body = page_table(page, "toy")
    assert {r[head.index("model")]: r[head.index("status")] for r in body} == {
        "dense_sift": "ok",
        "oracle_part": "not_applicable",
    }
    title = re.search(r'<section id="toy"><h2>(.*?)</h2>', page)
    assert (
        title
        and html.unescape(title.group(1)) == "Toy: a score from the items' weights (the recipe's example)"
    )
    # the console script in fresh processes, on the copy: the toy's board, then `soco run` of a new backbone
    soco = [str(Path(sys.executable).with_name("soco"))]
    env.update(
        SOCO_STORAGE=str(storage), SOCO_BACKBONES_DIR=str(backbones), SOCO_LVLMS_DIR=str(backbones / "none")
    )
    env.update(SOCO_CATEGORIES="car,dog", SOCO_IMAGES_PER_CATEGORY="4")
    board = subprocess.run(
        [*soco, "leaderboard", "--family", "toy"],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert board.returncode == 0 and "dense_sift" in board.stdout and "oracle_part" in board.stdout, board
    record = tmp_path / "toy_record.json"
    exported = subprocess.run(
        [*soco, "export-results", "dense_sift", str(record), "--format", "record", "--family", "toy"],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert exported.returncode == 0, (exported.stdout[-3000:], exported.stderr[-3000:])
    rec = json.loads(record.read_text())
    assert rec["family"] == "toy" and rec["model"] == "dense_sift"
    assert rec["results"]["score"]["value"] == pytest.approx(expected)
    assert set(rec["sample_hashes"]["items"]) == {"i0", "i1", "i2"}
    spec = tmp_path / "sift_two.yaml"
    spec.write_text((PROJECT_ROOT / "assets" / "backbones" / "dense_sift.yaml").read_text())
    run = subprocess.run(
        [*soco, "run", str(spec), "--families", "toy"],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, (run.stdout[-3000:], run.stderr[-3000:])
    assert "toy / backbone sift_two" in run.stdout and "soco / backbone" not in run.stdout
    scored = pd.read_parquet(storage / "tables" / "toy_leaderboard.parquet").set_index("model")
    assert scored.loc["sift_two", "score"] == pytest.approx(100 * 8 / (8 + weights.sum()))
