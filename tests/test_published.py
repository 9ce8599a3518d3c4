"""Published figures as data (assets/reference/published.csv), a spec's `reference:`, the comparison knob by
knob, the regression watch's pieces (snapshots, the paired test, the notification) and the Hub export."""

from __future__ import annotations

import http.server
import json
import threading
from datetime import UTC, datetime

import numpy as np
import pandas as pd
import pytest
import yaml

from soco_pipeline.backbones.spec import BackboneSpecError, load_spec, spec_hash, weights_fingerprint
from soco_pipeline.backbones.validate import checked_spec
from soco_pipeline.evaluation.protocol import load_protocol
from soco_pipeline.storage import PROJECT_ROOT
from soco_pipeline.trust import history
from soco_pipeline.trust.hub_export import HubExportError, write_hub_results
from soco_pipeline.trust.published import (
    PUBLISHED_COLUMNS,
    PublishedTableError,
    backbone_knobs,
    check_reference,
    compare_to_published,
    load_published,
)

pytestmark = pytest.mark.unit

OMNIPROBE = PROJECT_ROOT / "assets" / "reference" / "omniprobe_results.csv"


def test_every_omniprobe_soco_figure_is_carried_over_unchanged():
    pub = load_published()
    omni = pd.read_csv(OMNIPROBE)
    tasks = ["soco", "soco_fixed60", "soco_cross", "soco_cross_fixed60", "soco_geo", "soco_soft"]
    omni = omni[omni.task.isin(tasks)]
    ours = pub[pub.source.str.startswith("OmniProbe")]
    assert len(ours) == len(omni) == 413
    key = {"soco": ("", "798"), "soco_fixed60": ("", "fixed-60"), "soco_cross": ("cross_", "798")}
    key |= {"soco_cross_fixed60": ("cross_", "fixed-60"), "soco_soft": ("", "798 soft-argmax")}
    for r in omni.itertuples():
        if r.task == "soco_geo":
            metric, setting = "soc_geo", "798"
        else:
            prefix, setting = key[r.task]
            metric = prefix + {"SOC (PCK)": "soc", "CC (PCK)": "cc"}[r.metric]
        hit = ours[(ours.model == r.model) & (ours.metric == metric) & (ours.setting == setting)]
        assert hit["value"].tolist() == [pytest.approx(r.value)], (r.model, r.task, r.metric)


def test_the_papers_headline_rows_and_their_sources():
    pub = load_published().set_index(["model", "family", "metric", "setting", "source"])["value"]
    paper = "SOCO paper (shared/papers/000), findings and summary table"
    assert pub[("DINOv2-B/14", "soco", "soc", "fixed-60", paper)] == 60.4
    assert pub[("DINOv2-B/14", "soco", "cross_soc", "fixed-60", paper)] == 54.9
    tpips = load_published().query("family == 'tpips' and model == 'Ours (TPIPS)-8B'")
    assert set(zip(tpips.setting, tpips.metric, tpips.value, strict=True)) >= {
        ("late fusion", "ooo_agreement", 64.1),
        ("late fusion", "afc_total", 77.9),
        ("early fusion", "afc_total", 79.3),
    }
    assert (load_published()["source"].str.len() > 0).all()


@pytest.mark.parametrize(
    "edit, message",
    [
        (
            lambda df: df.assign(value=df["value"].mask(df.index == 3, "n/a")),
            "line 5 .* value 'n/a' is not a number",
        ),
        (lambda df: df.assign(source=df["source"].mask(df.index == 0, "")), "line 2 has no source"),
        (lambda df: pd.concat([df, df.iloc[[7]]]), r"appears 2 times"),
        (lambda df: df.drop(columns=["grid"]), r"columns \['grid'\] are missing"),
    ],
)
def test_a_damaged_published_table_is_refused_naming_the_line(tmp_path, edit, message):
    df = pd.read_csv(
        PROJECT_ROOT / "assets" / "reference" / "published.csv", dtype=str, keep_default_na=False
    )
    path = tmp_path / "published.csv"
    edit(df).to_csv(path, index=False)
    with pytest.raises(PublishedTableError, match=message):
        load_published(path)


def test_an_unknown_reference_lists_the_closest_published_names():
    with pytest.raises(PublishedTableError, match="close names: DINOv2-B/14"):
        check_reference("DINOv2 B/14", load_published())
    assert check_reference("DINOv2-B/14", load_published()) == "DINOv2-B/14"


def fixture_table() -> pd.DataFrame:
    rows = [
        (
            "M-1",
            "soco",
            "soc",
            "800",
            60.0,
            "page",
            "nearest_multiple:800",
            "nearest_multiple:800",
            "last",
            "0.1",
        ),
        ("M-1", "soco", "soc", "fixed-60", 58.0, "paper", "fixed_grid:60", "fixed_grid:60", "last", "0.1"),
        ("M-1", "soco", "cc", "fixed-60", 70.0, "paper", "fixed_grid:60", "fixed_grid:60", "last", "0.05"),
    ]
    df = pd.DataFrame(rows, columns=list(PUBLISHED_COLUMNS[:10]))
    for c in PUBLISHED_COLUMNS[10:]:
        df[c] = ""
    return df


def test_the_comparison_picks_the_closest_setting_and_names_the_knobs_that_differ():
    knobs = {
        "ours": {"input_size": "fixed_grid:60", "grid": "fixed_grid:60", "layer": "last", "alpha": "0.1"}
    }
    ours = pd.DataFrame(
        {
            "model": ["ours", "ours", "ours"],
            "family": "soco",
            "metric": ["soc", "cc", "cross_soc"],
            "value": [55.5, 71.0, 40.0],
        }
    )
    got = compare_to_published(ours, {"ours": "M-1"}, knobs, fixture_table()).set_index("metric")
    assert list(got.index) == ["soc", "cc"]  # no published cross_soc: no row
    assert got.at["soc", "published"] == 58.0 and got.at["soc", "difference"] == pytest.approx(-2.5)
    assert got.at["soc", "differing_knobs"] == "" and got.at["soc", "comparison"].endswith("same protocol")
    assert got.at["cc", "differing_knobs"] == "alpha: ours 0.1, published 0.05"
    assert got.at["cc", "comparison"] == "ours 71.0 (fixed_grid:60), published 70.0 (fixed-60): alpha differ"


def test_the_closest_setting_wins_wherever_it_sits_in_the_file():
    """The fixture's rows reversed: the closest soc setting (fixed-60) comes first and a farther one (800)
    last, so a match that took the last row (or the first, in the fixture's order) gives another figure."""
    knobs = {
        "ours": {"input_size": "fixed_grid:60", "grid": "fixed_grid:60", "layer": "last", "alpha": "0.1"}
    }
    ours = pd.DataFrame({"model": ["ours"], "family": "soco", "metric": ["soc"], "value": [55.5]})
    table = fixture_table().iloc[::-1].reset_index(drop=True)
    assert list(table.loc[table.metric == "soc", "setting"]) == ["fixed-60", "800"]
    got = compare_to_published(ours, {"ours": "M-1"}, knobs, table).set_index("metric")
    assert got.at["soc", "published"] == 58.0 and got.at["soc", "published_setting"] == "fixed-60"
    assert got.at["soc", "differing_knobs"] == ""


def test_our_knobs_come_from_the_spec_and_the_protocol():
    protocol = load_protocol()
    assert backbone_knobs("nearest_multiple", 800, -1, protocol) == {
        "input_size": "nearest_multiple:800",
        "grid": "nearest_multiple:800",
        "layer": "last",
        "alpha": "0.1",
        "reduction": "official",
        "prediction": "patch_corner",
    }


def oracle_spec(tmp_path, **extra):
    doc = {"kind": "oracle", "model": "oracle_part", "input": {"nearest_multiple": 64}, **extra}
    path = tmp_path / "o.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_a_spec_names_its_published_model_without_moving_its_hash(tmp_path):
    plain = load_spec(oracle_spec(tmp_path))
    named = checked_spec(oracle_spec(tmp_path, reference="DINOv2-B/14"))
    assert named.reference == "DINOv2-B/14" and spec_hash(named) == spec_hash(plain)
    with pytest.raises(BackboneSpecError, match=r"field 'reference'.*'DINOv3-B/99' is not in published.csv"):
        checked_spec(oracle_spec(tmp_path, reference="DINOv3-B/99"))


def test_local_weights_replaced_in_place_move_the_spec_hash(tmp_path):
    weights = tmp_path / "w.pth"
    weights.write_bytes(b"first")
    doc = {
        "kind": "timm",
        "model": "vit_tiny_patch16_224",
        "weights": str(weights),
        "input": {"nearest_multiple": 32},
    }
    path = tmp_path / "t.yaml"
    path.write_text(yaml.safe_dump(doc))
    first = spec_hash(load_spec(path))
    weights.write_bytes(b"second, longer")
    assert spec_hash(load_spec(path)) != first
    assert weights_fingerprint("hf:timm/x") == weights_fingerprint("none") == ""


def scores(values: np.ndarray, categories: int = 6) -> pd.DataFrame:
    n = len(values)
    return pd.DataFrame(
        {
            "model": "m",
            "metric": "soc",
            "group": [f"c{i % categories}" for i in range(n)],
            "unit": [f"p{i}" for i in range(n)],
            "element": "k",
            "cluster": [f"t{i}" for i in range(n)],
            "score": values.astype(float),
        }
    )


def test_the_paired_test_flags_a_drop_and_not_an_unchanged_run():
    rng = np.random.default_rng(0)
    before = (rng.random(120) < 0.6).astype(float)
    after = before * (rng.random(120) < 0.5)  # about half the right answers lost
    drop = history.regression_test(scores(after), scores(before), ["soc"]).iloc[0]
    assert bool(drop["regression"]) and drop["ci95_hi_boot_category"] < 0 < drop["value_b"] - drop["value_a"]
    same = history.regression_test(scores(before), scores(before), ["soc"]).iloc[0]
    assert not bool(same["regression"]) and same["delta"] == 0
    msg = history.regression_message(
        "m", "soco", history.regression_test(scores(after), scores(before), ["soc"]), "v1", "v2"
    )
    assert msg.startswith("m (soco) regressed from data version v1 to v2: soc ")


def test_snapshots_keep_every_data_version_and_find_the_previous(tmp_path):
    root = str(tmp_path)
    s = scores(np.ones(12))
    t0 = datetime(2026, 12, 1, tzinfo=UTC)
    history.write_snapshot(root, "soco", "m", "v1", "task", s, {"soc": 100.0}, t0)
    history.write_snapshot(root, "soco", "m", "v2", "task", s, {"soc": 90.0}, t0.replace(hour=1))
    history.write_snapshot(root, "soco", "m", "v3", "other-task", s, {"soc": 80.0}, t0.replace(hour=2))
    snaps = history.snapshots(root, "soco", "m")
    assert [m["data_version"] for m in snaps] == ["v1", "v2", "v3"]
    assert history.previous_snapshot(snaps, "v2", "task")["data_version"] == "v1"
    assert history.previous_snapshot(snaps, "v3", "other-task") is None  # another task: nothing to pair with
    assert history.previous_snapshot(snaps, "v1", "task")["data_version"] == "v2"
    pd.testing.assert_frame_equal(history.snapshot_scores(root, "soco", "m", "v1"), s)
    table = history.history_table(snaps, {}, 0.95)
    assert list(table["value"]) == [100.0, 90.0, 80.0] and not table["regression"].any()


def test_a_regression_is_posted_to_the_webhook_and_the_address_is_never_logged(caplog):
    got = []

    class Hook(http.server.BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 - the handler's API
            got.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Hook)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.server_port}/hook?token=secret-token"
    try:
        with caplog.at_level("WARNING"):
            outcome = history.notify("m regressed", url, timeout_s=5)
    finally:
        server.shutdown()
        thread.join(timeout=5)
    assert got == [{"text": "m regressed"}] and outcome == "logged; webhook answered HTTP 204"
    assert "secret-token" not in caplog.text and "m regressed" in caplog.text
    assert history.notify("m regressed", None) == "logged"


def record() -> dict:
    return {
        "model": "efficientnet_lite0",
        "family": "soco_correspondence",
        "date": "2026-12-02T01:00:00+00:00",
        "results": {"soc": {"value": 33.4}, "cc": {"value": 57.8}, "soc_geo": {"value": None}},
    }


def test_the_hub_export_is_what_the_hub_client_reads_back(tmp_path):
    from huggingface_hub import parse_eval_result_entries

    path = write_hub_results(record(), tmp_path, "owner/soco-bench", notes="simulated data")
    assert path == tmp_path / ".eval_results" / "soco_correspondence.yaml"
    entries = parse_eval_result_entries(yaml.safe_load(path.read_text()))
    assert [(e.dataset_id, e.task_id, e.value, e.notes) for e in entries] == [
        ("owner/soco-bench", "cc", 57.8, "simulated data"),
        ("owner/soco-bench", "soc", 33.4, "simulated data"),
    ]
    with pytest.raises(HubExportError, match="is not '<owner>/<name>'"):
        write_hub_results(record(), tmp_path, "soco-bench")
