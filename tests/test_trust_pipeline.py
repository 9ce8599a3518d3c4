"""Trustworthy results through Dagster on a small embedded data set with oracle backbones: the results
record beside the metrics, a partial (limit) run flagged in the leaderboard, CIs against the theory
value, paired comparisons, the prediction panels, `soco show`, SQL formats and the portable results file."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import dagster as dg
import numpy as np
import pandas as pd
import pytest

from soco_pipeline.cli import soco as cli
from soco_pipeline.defs.definitions import build_definitions
from soco_pipeline.evaluation import stats
from soco_pipeline.evaluation.protocol import load_protocol
from soco_pipeline.evaluation.subsets import apply_pair_subset
from soco_pipeline.storage import PROJECT_ROOT
from soco_pipeline.trust.provenance import validate_record
from soco_pipeline.trust.records import stored_subset
from tests.core import CATEGORIES, ORACLES
from tests.needs import need
from tests.soco_theory import expected_concept_oracle_soc

# oracle_twin is oracle_part under another name (identical features); oracle_partial is oracle_concept,
# evaluated with limit = 2 pairs per category.
COPIES = {
    "oracle_part": "oracle_part",
    "oracle_concept": "oracle_concept",
    "oracle_twin": "oracle_part",
    "oracle_partial": "oracle_concept",
}
PER_BACKBONE = ["feature_manifest", "predictions", "four_choice_predictions", "metrics", "results_record"]
LIMIT = 2


@pytest.fixture(scope="module")
def run(materialized_core, tmp_path_factory):
    """A copy of the shared core (its data and pairs; tests/core.py) with the four specs evaluated on it."""
    core = materialized_core.copy_to(tmp_path_factory.mktemp("trust"))
    tmp, backbones = core.root, core.backbones
    # Every spec is evaluated again below with 2 panels; the core's panel images (its own panel count) would
    # stay beside them: a re-run with fewer panels leaves the earlier files (found here; not the test's subject).
    shutil.rmtree(core.storage / "report", ignore_errors=True)
    for name, src in COPIES.items():
        shutil.copy(PROJECT_ROOT / "assets" / "backbones" / f"{src}.yaml", backbones / f"{name}.yaml")
    overrides = {**core.overrides, "device": "cpu"}
    with core.instance() as instance:
        instance.add_dynamic_partitions("backbones", [b for b in COPIES if b not in ORACLES])
        defs = build_definitions(**overrides)

        def mat(selection, partition=None, run_config=None):
            result = dg.materialize(
                list(defs.assets),
                selection=selection,
                instance=instance,
                resources=defs.resources,
                partition_key=partition,
                run_config=run_config,
            )
            assert result.success
            return result

        for b in COPIES:
            cfg = {"limit": LIMIT if b == "oracle_partial" else None, "panels": 2}
            mat(
                dg.AssetSelection.assets(*PER_BACKBONE),
                b,
                {"ops": {"predictions": {"config": cfg}, "four_choice_predictions": {"config": cfg}}},
            )
        mat(dg.AssetSelection.assets("leaderboard", "results_database"))
        yield {"tmp": tmp, "instance": instance, "overrides": overrides, "storage": tmp / "storage"}


def _tables(run) -> Path:
    return run["storage"] / "tables"


def _record(run, b) -> dict:
    return json.loads((run["storage"] / "results" / "records" / f"{b}.json").read_text())


def _scores(run, b):
    t = _tables(run)
    read = pd.read_parquet
    pairs = apply_pair_subset(
        read(t / "image_pairs.parquet"), stored_subset(read(t / "metrics" / f"{b}.parquet"))
    )
    return stats.backbone_scores(
        read(t / "predictions" / f"{b}.parquet"),
        read(t / "four_choice_predictions" / f"{b}.parquet"),
        read(t / "correspondences.parquet"),
        read(t / "keypoints.parquet"),
        read(t / "image_set.parquet"),
        pairs,
        load_protocol(),
    )


@pytest.mark.pipeline
def test_record_beside_the_metrics_validates_and_carries_every_field(run):
    rec = _record(run, "oracle_part")
    validate_record(rec)
    assert rec["model"] == "oracle_part" and rec["family"] == "soco_correspondence"
    assert rec["config"]["spec"]["kind"] == "oracle" and rec["config"]["protocol"]["headline_alpha"] == 0.1
    assert rec["input"]["requested_image_size"] == 480 and rec["input"]["effective_image_size"] == 480
    assert rec["input"]["requested_normalisation"] == rec["input"]["effective_normalisation"] == "raw"
    assert {"torch", "timm", "dagster", "python"} <= set(rec["versions"])
    assert rec["git_hash"]["commit"] != ""
    assert rec["environment"]["device"] == "cpu"
    stages = rec["timing"]["stages"]
    assert set(stages) == {"feature_manifest", "predictions", "four_choice_predictions", "metrics"}
    assert all(s["wall_s"] > 0 for s in stages.values())
    cpu = "the stage ran on cpu, not CUDA: no GPU time"
    assert all(s["gpu_s"] is None for s in stages.values()), stages
    assert stages["predictions"]["gpu_s_reason"] == stages["feature_manifest"]["gpu_s_reason"] == cpu, stages
    assert stages["metrics"]["gpu_s_reason"].startswith("not recorded by this stage"), stages
    ev = pd.read_parquet(_tables(run) / "image_pairs.parquet").evaluated.sum()
    assert rec["n-samples"]["pairs"] == {"requested": int(ev), "evaluated": int(ev)}
    assert not rec["subset"]["partial"]
    assert len(rec["sample_hashes"]["pairs"]) == ev
    table = pd.read_parquet(_tables(run) / "sample_hashes.parquet")  # the same hashes, as a table (SQL view)
    assert dict(zip(table.pair_id, table.pair_hash, strict=True)) == rec["sample_hashes"]["pairs"]
    soc = rec["results"]["soc"]
    assert soc["ci95_boot_category"][0] <= soc["value"] <= soc["ci95_boot_category"][1]
    metrics = pd.read_parquet(_tables(run) / "metrics" / "oracle_part.parquet")
    headline = metrics.query(
        "metric == 'soc' and scope == 'all' and reduction == 'official' and alpha == 0.1"
    )
    assert soc["value"] == pytest.approx(float(headline.value.iloc[0]))
    # the same intervals on the metrics' headline rows and in the leaderboard's columns
    assert headline.ci95_lo_boot_category.iloc[0] == pytest.approx(soc["ci95_boot_category"][0])
    row = pd.read_parquet(_tables(run) / "leaderboard.parquet").set_index("backbone").loc["oracle_part"]
    assert row.ci95_lo_boot_category_soc == pytest.approx(soc["ci95_boot_category"][0])
    assert row.ci95_hi_boot_category_soc == pytest.approx(soc["ci95_boot_category"][1])
    assert row.se_cluster_image_soc == pytest.approx(soc["se_cluster_image"])


@pytest.mark.pipeline
def test_a_limit_run_is_flagged_partial_with_the_right_counts(run):
    board = pd.read_parquet(_tables(run) / "leaderboard.parquet").set_index("backbone")
    assert (
        board.loc["oracle_partial", "partial"] and board.loc["oracle_partial", "subset"] == "limit=2/category"
    )
    assert not board.loc["oracle_concept", "partial"] and board.loc["oracle_concept", "subset"] == ""
    pairs = pd.read_parquet(_tables(run) / "image_pairs.parquet")
    per_group = pairs[pairs.evaluated].groupby("pair_group").size()
    rec = _record(run, "oracle_partial")
    assert rec["subset"]["partial"] and rec["subset"]["rule"]["limit"] == LIMIT
    assert rec["n-samples"]["pairs"] == {
        "requested": int(per_group.sum()),
        "evaluated": int(np.minimum(per_group, LIMIT).sum()),
    }
    preds = pd.read_parquet(_tables(run) / "predictions" / "oracle_partial.parquet")
    assert preds.pair_id.nunique() == rec["n-samples"]["pairs"]["evaluated"]
    assert set(rec["sample_hashes"]["pairs"]) == set(preds.pair_id)
    # the leaderboard's Markdown names the row as partial
    meta = run["instance"].fetch_materializations(dg.AssetKey("leaderboard"), limit=1).records[0]
    assert (
        "oracle_partial [partial: limit=2/category]"
        in meta.asset_materialization.metadata["leaderboard"].value
    )


@pytest.mark.pipeline
def test_identical_backbones_share_task_hashes_and_diff_runs_says_so(run, tmp_path, capsys):
    a, b, c = _record(run, "oracle_part"), _record(run, "oracle_twin"), _record(run, "oracle_partial")
    assert a["task_hashes"] == b["task_hashes"]
    pa, pb = tmp_path / "a.json", tmp_path / "b.json"
    pa.write_text(json.dumps(a))
    pb.write_text(json.dumps(b))
    assert cli.main(["diff-runs", str(pa), str(pb)]) == 0
    out = capsys.readouterr().out
    assert "inputs: identical" in out and "model" in out
    pc = tmp_path / "c.json"
    pc.write_text(json.dumps(c))
    assert cli.main(["diff-runs", str(pa), str(pc)]) == 1
    out = capsys.readouterr().out
    assert "inputs: DIFFERENT" in out and "pairs only in a" in out


@pytest.mark.pipeline
def test_export_results_record_from_the_cli(run, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("SOCO_STORAGE", str(run["storage"]))
    monkeypatch.setenv("SOCO_BACKBONES_DIR", run["overrides"]["backbones_dir"])
    out = tmp_path / "rec.json"
    assert cli.main(["export-results", "oracle_concept", str(out), "--format", "record"]) == 0
    rec = json.loads(out.read_text())
    validate_record(rec)
    assert "95% CI" in capsys.readouterr().out
    # rebuilt from the tables under another protocol (a re-score): still a valid record
    assert (
        cli.main(
            [
                "export-results",
                "oracle_concept",
                str(out),
                "--format",
                "record",
                "--protocol",
                str(PROJECT_ROOT / "assets" / "protocol.yaml"),
            ]
        )
        == 0
    )
    validate_record(json.loads(out.read_text()))


@pytest.mark.pipeline
def test_concept_oracle_ci_covers_the_theory_value(run):
    t = _tables(run)
    read = pd.read_parquet
    expected = expected_concept_oracle_soc(
        read(t / "correspondences.parquet"),
        read(t / "image_pairs.parquet"),
        read(t / "keypoints.parquet"),
        read(t / "image_set.parquet"),
        alpha=0.1,
    )
    ci = stats.intervals(_scores(run, "oracle_concept")).set_index("metric")
    soc = ci.loc["soc"]
    assert soc.ci95_lo_boot_category <= expected <= soc.ci95_hi_boot_category, (soc, expected)
    assert soc.ci95_lo_cluster_image_logit <= expected <= soc.ci95_hi_cluster_image_logit, (soc, expected)
    assert soc.ci95_hi_boot_category - soc.ci95_lo_boot_category < 40  # informative, not [0, 100]
    assert soc.n_categories == len(CATEGORIES)


@pytest.mark.pipeline
def test_compare_identical_and_different_backbones(run, monkeypatch, capsys):
    same, per_cat = stats.compare(_scores(run, "oracle_part"), _scores(run, "oracle_twin"))
    assert (
        (same.delta == 0).all()
        and (same.ci95_lo_boot_category <= 0).all()
        and (same.ci95_hi_boot_category >= 0).all()
    )
    assert (same.sign_test_p == 1.0).all() and (per_cat.delta == 0).all()
    diff, per_cat = stats.compare(_scores(run, "oracle_part"), _scores(run, "oracle_concept"))
    soc = diff.set_index("metric").loc["soc"]
    assert soc.ci95_lo_boot_category > 0 and soc.delta == pytest.approx(soc.value_a - soc.value_b)
    assert soc.sign_test_p < 0.01
    cat = per_cat[per_cat.metric == "soc"]
    assert len(cat) == len(CATEGORIES) and cat.sign_test_p.between(0, 1).all()
    # partial vs full: only the shared pairs are compared
    part, _ = stats.compare(_scores(run, "oracle_concept"), _scores(run, "oracle_partial"))
    assert (part.delta == 0).all() and part.n_units.max() <= LIMIT * len(CATEGORIES)
    monkeypatch.setenv("SOCO_STORAGE", str(run["storage"]))
    assert cli.main(["compare", "oracle_part", "oracle_concept", "--metric", "soc", "--per-category"]) == 0
    out = capsys.readouterr().out
    assert "oracle_part - oracle_concept" in out and "sign_test_p" in out and "per category" in out


@pytest.mark.pipeline
def test_predictions_metadata_shows_panels_and_soco_show_renders_one(run, tmp_path, monkeypatch, capsys):
    rec = (
        run["instance"]
        .fetch_materializations(
            dg.AssetRecordsFilter(asset_key=dg.AssetKey("predictions"), asset_partitions=["oracle_part"]),
            limit=1,
        )
        .records[0]
    )
    md = rec.asset_materialization.metadata["panels"].value
    assert md.count("data:image/png;base64,") == 2
    pngs = sorted((run["storage"] / "report" / "panels" / "oracle_part").glob("*.png"))
    assert len(pngs) == 2
    monkeypatch.setenv("SOCO_STORAGE", str(run["storage"]))
    pair = pngs[0].name.split("__")[0]
    out = tmp_path / "one.png"
    assert cli.main(["show", pair, "--backbone", "oracle_part", "--out", str(out)]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and "correct" in capsys.readouterr().out
    assert cli.main(["show", "no_such_pair", "--backbone", "oracle_part", "--out", str(out)]) == 2


@pytest.mark.pipeline
def test_sql_formats_and_each_view_listed_once(run, monkeypatch, capsys):
    monkeypatch.setenv("SOCO_STORAGE", str(run["storage"]))
    sql = "select backbone, partial from leaderboard order by backbone"
    assert cli.main(["sql", sql, "--format", "csv"]) == 0
    assert capsys.readouterr().out.splitlines()[0] == "backbone,partial"
    assert cli.main(["sql", sql, "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert {r["backbone"] for r in rows} == set(COPIES)
    assert cli.main(["sql", sql, "--format", "markdown"]) == 0
    assert capsys.readouterr().out.startswith("| backbone")
    assert cli.main(["sql", "show tables", "--format", "csv"]) == 0
    names = capsys.readouterr().out.split()[1:]
    assert len(names) == len(set(names)) and {"leaderboard", "where_it_fails", "worst_keypoints"} <= set(
        names
    )
    # where it fails: per category, the official values of the metrics table, ranked
    assert (
        cli.main(
            [
                "sql",
                "select category, soc, soc_rank_worst from where_it_fails where backbone = "
                "'oracle_concept' order by soc_rank_worst",
                "--format",
                "json",
            ]
        )
        == 0
    )
    fails = pd.DataFrame(json.loads(capsys.readouterr().out))
    metrics = pd.read_parquet(_tables(run) / "metrics" / "oracle_concept.parquet").query(
        "metric == 'soc' and scope == 'category' and reduction == 'official' and alpha == 0.1"
    )
    assert (
        len(fails) == len(CATEGORIES)
        and fails.soc.is_monotonic_increasing
        and fails.soc_rank_worst.iloc[0] == 1
    )
    assert np.allclose(
        fails.set_index("category").soc.sort_index(), metrics.set_index("group").value.sort_index()
    )
    assert (
        cli.main(
            [
                "sql",
                "select keypoint, description, n, soc_pck_raw from worst_keypoints "
                "where backbone = 'oracle_part' order by soc_pck_raw limit 3",
            ]
        )
        == 0
    )
    assert "keypoint" in capsys.readouterr().out


@pytest.mark.pipeline
@pytest.mark.parametrize("cwd", ["project", "tmp"])
def test_results_file_opens_from_any_directory_with_one_setting(run, cwd, tmp_path):
    storage = run["storage"].resolve()
    code = (
        "import duckdb, sys; con = duckdb.connect(sys.argv[1], read_only=True); "
        "con.execute(f\"SET file_search_path = '{sys.argv[2]}'\"); "
        "print(con.execute('select count(*) from leaderboard').fetchone()[0])"
    )
    where = PROJECT_ROOT if cwd == "project" else tmp_path
    out = subprocess.run(
        [sys.executable, "-c", code, str(storage / "results.duckdb"), str(storage)],
        cwd=where,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert int(out.stdout.strip()) == len(COPIES)
    binary = shutil.which("duckdb")
    if binary:  # the CLI binary, when installed
        cli_out = subprocess.run(
            [
                binary,
                "-readonly",
                "-csv",
                "-cmd",
                f"SET file_search_path = '{storage}'",
                str(storage / "results.duckdb"),
                "select count(*) as n from leaderboard",
            ],
            cwd=where,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert cli_out.returncode == 0 and cli_out.stdout.split()[-1] == str(len(COPIES)), cli_out.stderr


@pytest.mark.stack
def test_results_page_has_every_table_and_image(run, monkeypatch, capsys):
    import urllib.parse
    import urllib.request

    from soco_pipeline.report.page import report_server

    defs = build_definitions(**run["overrides"])
    assert dg.materialize(
        list(defs.assets),
        selection=dg.AssetSelection.assets("results_report"),
        instance=run["instance"],
        resources=defs.resources,
    ).success
    index = run["storage"] / "report" / "index.html"
    page = index.read_text()
    assert page.count("<table") >= 2 and "oracle_partial" in page and "[partial: limit=2/category]" in page
    assert 'src="backbone_ci.png"' in page and page.count('src="panels/') == 2 * len(COPIES)
    for src in [s.split('"')[0] for s in page.split('src="')[1:]]:
        assert (index.parent / urllib.parse.unquote(src)).is_file(), src
    # built in place, the page names each panel as it is (URL-quoted): no renamed second copy beside it
    assert all(
        ":" not in p.name or not (p.parent / p.name.replace(":", "_")).exists()
        for p in (index.parent / "panels").rglob("*.png")
    )
    monkeypatch.setenv("SOCO_STORAGE", str(run["storage"]))
    assert cli.main(["report"]) == 0 and "file://" in capsys.readouterr().out
    with report_server(index.parent) as url:
        assert url.startswith("http://127.0.0.1:")
        with urllib.request.urlopen(url + "index.html", timeout=10) as r:
            assert b"SOCO pipeline results" in r.read()

    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    need(bool(chromium), "Debian's chromium")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=chromium,
            args=[
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--allow-file-access-from-files",
            ],
        )
        try:
            tab = browser.new_page()
            tab.goto(index.resolve().as_uri(), wait_until="load")
            assert tab.locator("table").count() >= 2
            assert tab.locator("section#backbones h2").is_visible()
            rows = tab.locator("section#backbones table").first.locator("tbody tr")
            assert rows.count() == len(COPIES)
            images = tab.locator("img")
            assert images.count() >= 1 + 2 * len(COPIES)
            widths = tab.evaluate("Array.from(document.images).map(i => i.complete ? i.naturalWidth : 0)")
            assert all(w > 0 for w in widths), widths  # every image loaded from file://
        finally:
            browser.close()


@pytest.mark.pipeline
def test_soco_evaluate_runs_a_partial_backbone_from_the_cli(run, tmp_path, monkeypatch, capsys):
    storage = tmp_path / "storage"  # a copy: this run rewrites the leaderboard of its own storage only
    shutil.copytree(run["storage"], storage)
    (tmp_path / "home").mkdir()
    for k, v in {
        "SOCO_STORAGE": str(storage),
        "SOCO_BACKBONES_DIR": run["overrides"]["backbones_dir"],
        "SOCO_CATEGORIES": ",".join(CATEGORIES),
        "SOCO_IMAGES_PER_CATEGORY": "6",
        "DAGSTER_HOME": str(tmp_path / "home"),
    }.items():
        monkeypatch.setenv(k, v)
    assert cli.main(["evaluate", "oracle_twin", "--limit", "1", "--panels", "0", "--device", "cpu"]) == 0
    assert "oracle_twin" in capsys.readouterr().out
    board = pd.read_parquet(storage / "tables" / "leaderboard.parquet").set_index("backbone")
    assert board.loc["oracle_twin", "partial"] and board.loc["oracle_twin", "subset"] == "limit=1/category"
    rec = json.loads((storage / "results" / "records" / "oracle_twin.json").read_text())
    groups = (
        pd.read_parquet(storage / "tables" / "image_pairs.parquet").query("evaluated").pair_group.nunique()
    )
    assert rec["n-samples"]["pairs"]["evaluated"] == groups and rec["subset"]["rule"]["limit"] == 1
