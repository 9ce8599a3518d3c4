"""`published_gap` (issue 55): the gap between ours and a published figure measured knob by knob.

The first test uses a model whose score is a known function of its knobs (so each step's effect is known
exactly); the second runs the real part oracle on the embedded data, where a coarser grid provably costs
PCK (a prediction sits at the corner of the right cell) and a stricter alpha can only lower it."""

import dataclasses
import os

import pandas as pd
import pytest
import yaml

from soco_pipeline.backbones.spec import parse_spec
from soco_pipeline.evaluation.protocol import ProtocolConfig
from soco_pipeline.storage import PROJECT_ROOT, read_parquet
from soco_pipeline.tasks.core import SOCO
from soco_pipeline.taxonomy import Taxonomy
from soco_pipeline.trust.published import backbone_knobs, load_published
from soco_pipeline.trust.published_gap import (
    GapInputs,
    gap_sentence,
    knob_steps,
    measure_gap,
    reachable,
)

ORACLE = PROJECT_ROOT / "assets" / "backbones" / "oracle_part.yaml"


def _oracle(**fields) -> object:
    doc = {**yaml.safe_load(ORACLE.read_text()), **fields}
    return parse_spec(doc, "oracle_part", str(ORACLE))


def _published(model: str = "Ref/14", **knobs) -> pd.DataFrame:
    base = {
        "model": model,
        "family": "soco",
        "setting": "798",
        "source": "test",
        "input_size": "nearest_multiple:800",
        "grid": "nearest_multiple:800",
        "layer": "last",
        "alpha": "0.1",
        "reduction": "official",
        "prediction": "patch_corner",
        "judge": "",
        "note": "",
    }
    return pd.DataFrame(
        [{**base, **knobs, "metric": "soc", "value": 70.0}, {**base, **knobs, "metric": "cc", "value": 80.0}]
    )


@pytest.mark.unit
def test_steps_telescope_in_the_stated_order_with_effects_known_by_construction():
    # a model whose SOC is 0.05 * S + 100 * alpha (CC 10 more): aligning 480 -> 800 is worth exactly
    # 0.05 * 320 = 16, alpha 0.15 -> 0.1 exactly -5
    spec = _oracle(reference="Ref/14")
    runs = []

    def predict(s):
        runs.append(s.input.value)
        return pd.DataFrame({"size": [s.input.value]})

    def score(preds, alpha):
        soc = 0.05 * float(preds["size"].iloc[0]) + 100 * alpha
        return {"soc": soc, "cc": soc + 10}

    protocol = ProtocolConfig(headline_alpha=0.15)
    knobs = backbone_knobs(spec.input.policy, spec.input.value, "", protocol)
    gap = measure_gap(spec, knobs, _published(), predict(spec), predict, score, True, SOCO.name)
    assert runs == [480, 800]  # ours given, the input variant run once for both metrics
    soc = gap[gap["metric"] == "soc"].set_index("knob")
    assert list(soc.index) == ["input_size", "alpha", "unexplained"] and list(soc["step"]) == [1, 2, 3]
    assert soc.at["input_size", "effect"] == pytest.approx(16.0)
    assert soc.at["alpha", "effect"] == pytest.approx(-5.0)
    assert soc.at["input_size", "kind"] == "prediction" and soc.at["alpha", "kind"] == "scoring"
    ours, aligned = 0.05 * 480 + 15, 0.05 * 800 + 10
    assert soc["ours"].iloc[0] == pytest.approx(ours) and soc["aligned"].iloc[0] == pytest.approx(aligned)
    steps = soc.drop(index="unexplained")["effect"].sum()
    assert abs(steps - (aligned - ours)) < 1e-6
    assert soc.at["unexplained", "effect"] == pytest.approx(70.0 - aligned)
    assert "an oracle" in soc.at["unexplained", "reason"] and "simulated" in soc.at["unexplained", "reason"]
    assert gap_sentence(gap) == (
        "input 480 \u2192 800: +16.0; alpha 0.15 \u2192 0.1: \u22125.0; unexplained "
        f"{'+' if 70 - aligned >= 0 else chr(0x2212)}{abs(70 - aligned):.1f} ({soc.at['unexplained', 'reason']})"
    )
    assert set(gap["sentence"]) == {gap_sentence(gap)}


@pytest.mark.unit
def test_a_layer_the_kind_lacks_is_named_as_unexplained_and_a_spec_without_reference_has_no_rows():
    spec = _oracle(reference="Ref/14")
    knobs = {**backbone_knobs("nearest_multiple", 800, "11", ProtocolConfig()), "layer": "11"}
    steps, unreached = knob_steps(knobs, _published().iloc[0])
    assert [k.name for k in steps] == ["layer"] and unreached == []
    gap = measure_gap(
        spec,
        knobs,
        _published(),
        pd.DataFrame(),
        lambda s: pytest.fail("no re-run"),
        lambda p, a: {"soc": 1.0},
        False,
        SOCO.name,
    )
    soc = gap[gap["metric"] == "soc"]
    assert list(soc["knob"]) == ["unexplained"] and "layer not re-run" in soc["reason"].iloc[0]
    named = dataclasses.replace(spec, options=(*spec.options, ("layer", "stride16+stride32")))
    indexed = dataclasses.replace(spec, options=(("layer", 11),))
    assert not reachable(named, steps[0]) and reachable(indexed, steps[0])
    assert measure_gap(
        dataclasses.replace(spec, reference=""), knobs, _published(), None, None, None, False, SOCO.name
    ).empty


@pytest.mark.pipeline
def test_the_part_oracle_on_a_coarse_grid_gains_from_the_published_input_size(materialized_core, tmp_path):
    """The part oracle with 48-px cells at S = 480 against DINOv2-B/14's published 798: the variant runs through
    the feature cache in a folder of its own; the input step is positive (finer cells), alpha 0.15 -> 0.1 is
    not; the aligned run equals the variant's own metrics at alpha 0.1 (computed independently)."""
    from soco_pipeline.evaluation.metrics import compute_metrics
    from soco_pipeline.settings import Settings
    from soco_pipeline.trust.published_gap import aligned_spec, headline_values

    tables = str(materialized_core.tables)
    settings = Settings(**materialized_core.overrides)
    protocol = ProtocolConfig(headline_alpha=0.15)
    taxonomy = Taxonomy.from_table(read_parquet(f"{tables}/taxonomy.parquet"), source="test")
    inputs = GapInputs(
        image_set=read_parquet(f"{tables}/image_set.parquet"),
        image_pairs=read_parquet(f"{tables}/image_pairs.parquet"),
        correspondences=read_parquet(f"{tables}/correspondences.parquet"),
        keypoints=read_parquet(f"{tables}/keypoints.parquet"),
        taxonomy=taxonomy,
        protocol=protocol,
        features_root=str(tmp_path / "features"),
        backbone_context={"embedded_root": settings.embedded_root, "device": "cpu"},
    )
    spec = _oracle(stride=48, reference="DINOv2-B/14")
    ours_predictions = inputs.predict(spec)
    knobs = backbone_knobs(spec.input.policy, spec.input.value, "", protocol)
    ran = []

    def predict(s):
        ran.append(s.input.value)
        return inputs.predict(s)

    gap = measure_gap(spec, knobs, load_published(), ours_predictions, predict, inputs.score, True, SOCO.name)
    assert ran == [800]  # one variant run (input), shared by every metric
    assert len(list((tmp_path / "features" / "oracle_part").iterdir())) == 2  # ours and the variant's folder
    soc = gap[gap["metric"] == "soc"].set_index("knob")
    assert list(soc.index) == ["input_size", "alpha", "unexplained"]
    assert soc.at["input_size", "effect"] > 5.0  # 48-px cells at 480 -> 28-px cells at 816
    assert soc.at["alpha", "effect"] <= 0.0
    for metric, rows in gap.groupby("metric"):
        steps = rows[rows["knob"] != "unexplained"]["effect"].sum()
        assert abs(steps - (rows["aligned"].iloc[0] - rows["ours"].iloc[0])) < 1e-6, metric
    variant = aligned_spec(spec, knob_steps(knobs, load_published().iloc[0])[0][0])
    full = compute_metrics(
        inputs.predict(variant),
        None,
        inputs.correspondences,
        inputs.keypoints,
        inputs.image_set,
        inputs.image_pairs,
        taxonomy,
        protocol,
    )
    assert soc["aligned"].iloc[0] == pytest.approx(headline_values(full, 0.1)["soc"], abs=1e-9)
    ours_full = compute_metrics(
        ours_predictions,
        None,
        inputs.correspondences,
        inputs.keypoints,
        inputs.image_set,
        inputs.image_pairs,
        taxonomy,
        protocol,
    )
    assert soc["ours"].iloc[0] == pytest.approx(headline_values(ours_full, 0.15)["soc"], abs=1e-9)


@pytest.mark.pipeline
def test_a_spec_without_reference_reads_none_of_the_six_input_tables(tmp_path):
    """Issue 53 (review): `published_gap` of a spec that names no published model reads no table. Its six
    inputs are dependencies read inside the step only for a spec with a `reference:`, so here it
    materializes (no rows) in a storage where none of them was ever written."""
    import shutil

    import dagster as dg

    from soco_pipeline.defs.definitions import build_definitions
    from soco_pipeline.defs.results.gap import INPUTS

    backbones = tmp_path / "backbones"
    backbones.mkdir()
    shutil.copy(ORACLE, backbones)
    assert "reference" not in yaml.safe_load(ORACLE.read_text())
    defs = build_definitions(storage_root=str(tmp_path / "storage"), backbones_dir=str(backbones))
    soco = defs.resources["soco"]
    with dg.DagsterInstance.ephemeral() as instance:
        instance.add_dynamic_partitions("backbones", ["oracle_part"])
        result = dg.materialize(
            [defs.get_assets_def("published_gap")],
            instance=instance,
            resources=defs.resources,
            partition_key="oracle_part",
        )
        assert result.success
        record = instance.get_latest_materialization_event(dg.AssetKey("published_gap"))
        assert record.asset_materialization.metadata["rows"].value == 0
    from soco_pipeline.tables import table_for

    assert not any(os.path.exists(table_for(n).path(soco.tables_root, "oracle_part")) for n in INPUTS)
    assert not any(os.path.exists(table_for(n).path(soco.tables_root)) for n in INPUTS)
    assert len(read_parquet(table_for("published_gap").path(soco.tables_root, "oracle_part"))) == 0
