"""The regression watch and the published figures through Dagster, on a small embedded set.

A tiny timm ViT whose blocks pass the patch embedding through (attention and MLP outputs zeroed) describes
each patch by a random projection of its pixels: it scores well above chance. Replacing its weights file in
place with one whose patch embedding is zero (every patch the same vector: argmax ties, the first patch)
moves the spec's data version; the re-materialized model_history compares the two on the same task hash and
its `no_regression` check fails with both figures and the paired interval. The spec names a published model
(`reference: DINOv2-B/14`), so the board, `published_comparison` and SQL show the published SOC beside ours
and the knobs that differ.

The same weights serve MMVM (issue 39: the watch per family headline): the tiny ViT's mask-pooled patch
descriptors match objects above chance, the zeroed one ties every candidate; `mmvm_history` pairs the two
runs' per-item outcomes (`mmvm_predictions`: item_id, correct) and its check fails with both accuracies and
the paired interval."""

from __future__ import annotations

import http.server
import json
import threading

import dagster as dg
import pandas as pd
import pytest
import timm
import torch
import yaml

from soco_pipeline.defs.definitions import build_definitions
from soco_pipeline.report.results_db import connect_readonly
from tests.test_mmvm_core import tiny_config

pytestmark = [pytest.mark.pipeline, pytest.mark.timeout(900)]

CATEGORIES = ["car", "bus", "tractor", "chair", "dog", "horse"]
PER_BACKBONE = [
    "feature_manifest",
    "predictions",
    "four_choice_predictions",
    "metrics",
    "results_record",
    "model_history",
    "mmvm_features",
    "mmvm_predictions",
    "mmvm_history",
]
MMVM_DATA = ["mmvm_cases", "mmvm_images", "mmvm_objects", "mmvm_items"]


def write_weights(path, passthrough: bool) -> None:
    """A vit_tiny state dict: blocks that pass the residual stream through, no position embedding; the
    patch embedding random (seed 0) when `passthrough`, zero otherwise."""
    torch.manual_seed(0)
    state = timm.create_model("vit_tiny_patch16_224", num_classes=0).state_dict()
    for k in state:
        if k.endswith(("attn.proj.weight", "attn.proj.bias", "mlp.fc2.weight", "mlp.fc2.bias")) or k in (
            "pos_embed",
        ):
            state[k] = torch.zeros_like(state[k])
    if not passthrough:
        state["patch_embed.proj.weight"] = torch.zeros_like(state["patch_embed.proj.weight"])
        state["patch_embed.proj.bias"] = torch.zeros_like(state["patch_embed.proj.bias"])
    torch.save(state, path)


@pytest.fixture(scope="module")
def watched(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("watch")
    backbones = tmp / "backbones"
    backbones.mkdir()
    weights = tmp / "tiny.pth"
    write_weights(weights, passthrough=True)
    spec = {
        "kind": "timm",
        "model": "vit_tiny_patch16_224",
        "weights": str(weights),
        "layer": -1,
        "input": {"nearest_multiple": 256},  # 128: MMVM's objects fall within a patch or two
        "normalisation": "imagenet",
        "batch_size": 8,
        "device": "cpu",
        "seed": 0,
        "reference": "DINOv2-B/14",
    }
    (backbones / "tiny.yaml").write_text(yaml.safe_dump(spec))
    # cues a random projection of the pixels can see (colour, shape, and mixed with them): 63% zero-shot
    mmvm = tiny_config(
        cases={"train": 2, "test": 12},
        none_rule={"mode": "never"},
        query_absent_share=0.0,
        cue_sets=[[1], [2], [1, 5], [1, 4], [1, 2], [2, 6]],
    )
    (tmp / "mmvm.yaml").write_text(yaml.safe_dump(mmvm.model_dump(mode="json")))
    overrides = dict(
        mmvm_config_path=str(tmp / "mmvm.yaml"),
        storage_root=str(tmp / "storage"),
        backbones_dir=str(backbones),
        categories=CATEGORIES,
        images_per_category=6,
        device="cpu",
    )
    (tmp / "home").mkdir()
    with dg.instance_for_test(temp_dir=str(tmp / "home")) as instance:
        instance.add_dynamic_partitions("backbones", ["tiny"])
        defs = build_definitions(**overrides)

        def mat(names, partition=None):
            selection = names if isinstance(names, dg.AssetSelection) else dg.AssetSelection.assets(*names)
            result = dg.materialize(
                list(defs.assets),
                selection=selection,
                instance=instance,
                resources=defs.resources,
                partition_key=partition,
            )
            assert result.success
            return result

        mat(dg.AssetSelection.groups("data", "pairs") | dg.AssetSelection.assets(*MMVM_DATA))
        runs = {"first": mat(PER_BACKBONE, "tiny")}
        mat(["leaderboard", "published_comparison", "model_headlines", "model_summary", "results_database"])
        mat(["results_report"])
        runs["unchanged"] = mat(["model_history", "mmvm_history"], "tiny")
        yield {
            "runs": runs,
            "tmp": tmp,
            "storage": tmp / "storage",
            "instance": instance,
            "defs": defs,
            "materialize": mat,
            "weights": weights,
        }


@pytest.fixture(scope="module")
def degraded(watched):
    """`watched` after its weights file was replaced in place by one with a zero patch embedding and the
    per-backbone assets re-materialized: runs["degraded"]. The boards and the results page stay as the
    first run left them."""
    write_weights(watched["weights"], passthrough=False)
    runs = {**watched["runs"], "degraded": watched["materialize"](PER_BACKBONE, "tiny")}
    return {**watched, "runs": runs}


def check_of(result, asset: str = "model_history") -> dg.AssetCheckEvaluation:
    (ev,) = [
        e
        for e in result.get_asset_check_evaluations()
        if e.check_name == "no_regression" and e.asset_key == dg.AssetKey(asset)
    ]
    return ev


def figures(text: str) -> tuple[float, float, float, float, float]:
    """(before, after, delta, lo, hi) of a check's figure "<before> -> <after> (<delta>, [<lo>, <hi>])"."""
    values, rest = text.split(" (", 1)
    before, after = (float(x) for x in values.split(" -> "))
    delta, interval = rest.rstrip(")").split(", [")
    lo, hi = (float(x) for x in interval.rstrip("]").split(", "))
    return before, after, float(delta), lo, hi


def test_first_and_unchanged_runs_pass_the_watch(watched):
    for run in ("first", "unchanged"):
        for asset in ("model_history", "mmvm_history"):
            ev = check_of(watched["runs"][run], asset)
            assert ev.passed, ev.metadata
            assert ev.metadata["compared_with"].value == "nothing (no earlier data version)"
            assert ev.metadata["paired_test"].value.startswith("paired difference per sample")


def test_replaced_weights_drop_the_score_and_fail_the_watch(degraded):
    ev = check_of(degraded["runs"]["degraded"])
    assert not ev.passed
    message = ev.metadata["regression"].value
    assert "tiny (soco) regressed from data version" in message
    before, after, delta, lo, hi = figures(
        ev.metadata["soc"].value
    )  # "<old> -> <new> (<delta>, [<lo>, <hi>])"
    assert (
        after < before and delta == pytest.approx(after - before, abs=0.15) and hi < 0 and lo <= delta <= hi
    )
    assert "soc " in message and " -> " in message  # both figures: before -> after


def test_model_history_keeps_both_data_versions(degraded):
    hist = pd.read_parquet(degraded["storage"] / "tables" / "model_history" / "tiny.parquet")
    versions = hist.drop_duplicates("data_version").sort_values("materialized_at")
    assert len(versions) == 2
    new = hist[hist.data_version == versions.data_version.iloc[1]].set_index("metric")
    old = hist[hist.data_version == versions.data_version.iloc[0]].set_index("metric")
    assert (new["previous_data_version"] == versions.data_version.iloc[0]).all()
    assert new.at["soc", "value"] < old.at["soc", "value"]
    assert bool(new.at["soc", "regression"])
    assert new.at["soc", "delta"] == pytest.approx(new.at["soc", "value"] - old.at["soc", "value"], abs=0.05)
    assert set(hist["task_hash"]) == {hist["task_hash"].iloc[0]}  # the same task: compared as paired


def test_replaced_weights_drop_the_mmvm_accuracy_and_fail_its_watch(degraded):
    ev = check_of(degraded["runs"]["degraded"], "mmvm_history")
    assert not ev.passed
    message = ev.metadata["regression"].value
    assert "tiny (mmvm) regressed from data version" in message
    assert "accuracy/zero_shot " in message and " -> " in message  # both figures: before -> after
    before, value, delta, lo, hi = figures(ev.metadata["accuracy/zero_shot"].value)
    assert (
        value < before and delta == pytest.approx(value - before, abs=0.15) and hi < 0 and lo <= delta <= hi
    )
    hist = pd.read_parquet(degraded["storage"] / "tables" / "mmvm_history" / "tiny.parquet")
    assert set(hist["family"]) == {"mmvm"}
    versions = hist.drop_duplicates("data_version").sort_values("materialized_at")
    assert len(versions) == 2  # both runs kept, keyed by data version and date
    new = hist[hist.data_version == versions.data_version.iloc[1]].set_index("metric")
    old = hist[hist.data_version == versions.data_version.iloc[0]].set_index("metric")
    assert new.at["accuracy/zero_shot", "value"] == pytest.approx(value, abs=0.05)
    assert old.at["accuracy/zero_shot", "value"] == pytest.approx(before, abs=0.05)
    assert new.at["accuracy/zero_shot", "delta"] == pytest.approx(
        new.at["accuracy/zero_shot", "value"] - old.at["accuracy/zero_shot", "value"], abs=0.05
    )
    assert bool(new.at["accuracy/zero_shot", "regression"])
    assert (new["previous_data_version"] == versions.data_version.iloc[0]).all()
    # the values are the family's own: mmvm_predictions' test-split accuracy of the degraded run
    preds = pd.read_parquet(degraded["storage"] / "tables" / "mmvm_predictions" / "tiny.parquet")
    items = pd.read_parquet(degraded["storage"] / "tables" / "mmvm_items.parquet")
    zs = preds[(preds.method == "zero_shot") & preds.item_id.isin(items[items.split == "test"].item_id)]
    assert new.at["accuracy/zero_shot", "value"] == pytest.approx(100 * zs.correct.mean())
    with connect_readonly(degraded["storage"] / "results.duckdb") as con:  # the view reads both runs
        got = con.execute(
            "select count(distinct data_version) from mmvm_history where model = 'tiny'"
        ).fetchone()
    assert got == (2,)


def test_the_family_sensor_posts_the_regression_to_the_webhook(degraded, monkeypatch):
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
    monkeypatch.setenv("SOCO_REGRESSION_WEBHOOK", f"http://127.0.0.1:{server.server_port}/hook")
    try:
        defs = degraded["defs"]
        context = dg.build_sensor_context(instance=degraded["instance"], definitions=defs)
        sensor = next(s for s in defs.sensors if s.name == "mmvm_regression_sensor")
        result = sensor.evaluate_tick(context)
    finally:
        server.shutdown()
        thread.join(timeout=5)
    assert "webhook answered HTTP 204" in str(result.skip_message)
    (posted,) = got
    assert posted["text"].startswith("tiny (mmvm) regressed from data version")


def test_the_board_and_sql_show_the_published_figure_and_the_knobs(watched):
    board = pd.read_parquet(watched["storage"] / "tables" / "leaderboard.parquet")
    row = board.set_index("backbone").loc["tiny"]
    assert row["reference"] == "DINOv2-B/14"
    assert row["soc_published"] == pytest.approx(67.86)  # OmniProbe, S = 800 snapped: the first of the ties
    assert row["soc_vs_published"] == pytest.approx(row["soc"] - 67.86)
    assert "input_size, grid differ" in row["published_note"]
    with connect_readonly(watched["storage"] / "results.duckdb") as con:
        got = con.execute(
            "select published, differing_knobs from published_comparison where model = 'tiny' and metric = 'soc'"
        ).fetchall()
    assert got == [
        (
            pytest.approx(67.86),
            "input_size: ours nearest_multiple:256, published nearest_multiple:800; "
            "grid: ours nearest_multiple:256, published nearest_multiple:800",
        )
    ]


def test_model_summary_and_the_results_page_show_the_published_figure(watched):
    summary = pd.read_parquet(watched["storage"] / "tables" / "model_summary.parquet").set_index("model")
    assert summary.at["tiny", "reference"] == "DINOv2-B/14"
    assert summary.at["tiny", "soco_published"] == pytest.approx(67.86)
    assert summary.at["tiny", "soco_vs_published"] == pytest.approx(
        summary.at["tiny", "soco"] - 67.86, abs=1e-6
    )
    assert "input_size, grid differ" in summary.at["tiny", "published_note"]
    page = (watched["storage"] / "report" / "index.html").read_text()
    section = page[page.index('<section id="published">') :]
    section = section[: section.index("</section>")]
    assert "Beside the published figures" in section and "DINOv2-B/14" in section and "67.9" in section


def test_a_damaged_earlier_snapshot_makes_the_watch_a_warning_not_a_pass(degraded):
    """Issue 58: the earlier SOCO snapshot's scores Parquet damaged, the earlier MMVM snapshot's JSON
    truncated. Both history assets still materialize; their `no_regression` checks fail at WARN severity,
    "not comparable", naming the file and `soco drop-snapshot`, never "no regression". The archive is put back
    (and the watch re-run) afterwards, so the module's other tests see the regression as before."""
    storage = degraded["storage"]
    runs = degraded["runs"]
    earlier = {
        "soco": check_of(runs["degraded"]).metadata["compared_with"].value,
        "mmvm": check_of(runs["degraded"], "mmvm_history").metadata["compared_with"].value,
    }
    soco_scores = storage / "history" / "soco" / "tiny" / f"{earlier['soco']}.parquet"
    mmvm_meta = storage / "history" / "mmvm" / "tiny" / f"{earlier['mmvm']}.json"
    kept = {p: p.read_bytes() for p in (soco_scores, mmvm_meta)}
    try:
        soco_scores.write_bytes(kept[soco_scores][: len(kept[soco_scores]) // 2])
        mmvm_meta.write_bytes(kept[mmvm_meta][:30])
        result = degraded["materialize"](["model_history", "mmvm_history"], "tiny")
        for asset, family, named in (
            ("model_history", "soco", soco_scores),
            ("mmvm_history", "mmvm", mmvm_meta),
        ):
            ev = check_of(result, asset)
            assert not ev.passed and ev.severity == dg.AssetCheckSeverity.WARN, asset
            text = ev.metadata["not_comparable"].value
            assert text.startswith("not comparable: ") and str(named) in text
            assert f"`soco drop-snapshot {family} tiny {earlier[family]}`" in text
            assert ev.metadata["compared_with"].value == "not comparable"
        defs = degraded["defs"]  # the sensor says it too, and posts nothing (it is not a regression)
        context = dg.build_sensor_context(instance=degraded["instance"], definitions=defs)
        sensor = next(s for s in defs.sensors if s.name == "mmvm_regression_sensor")
        assert "not comparable" in str(sensor.evaluate_tick(context).skip_message)
    finally:
        for path, data in kept.items():
            path.write_bytes(data)
        again = degraded["materialize"](["model_history", "mmvm_history"], "tiny")
    assert not check_of(again).passed and "regression" in check_of(again).metadata  # as before the damage
