"""The regression watch's domain logic per family (trust/family_watch.py, trust/history.py) on small
hand-made tables: the per-sample scores of a family's declared (sample, outcome) columns, the snapshot of its
headline, the paired verdict of two data versions, and a family without per-sample rows (no test, said so)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from soco_pipeline.evaluation.stats import SCORE_COLUMNS
from soco_pipeline.tasks import family_specs
from soco_pipeline.trust import history
from soco_pipeline.trust.family_records import NotApplicableError
from soco_pipeline.trust.family_watch import FamilyWatch, family_snapshot

pytestmark = pytest.mark.unit
SPECS = {name: spec.watch for name, spec in family_specs().items()}  # each family's declared watch
WATCH = {
    name: (spec.watch, spec.parts) for name, spec in family_specs().items()
}  # what family_snapshot takes

N_CASES = 24  # two test items per case, six match types


def mmvm_items() -> pd.DataFrame:
    cases = np.repeat(np.arange(N_CASES), 2)
    return pd.DataFrame(
        {
            "item_id": [f"i{k}" for k in range(2 * N_CASES)] + ["t0"],
            "case_id": [f"c{c}" for c in cases] + ["c-train"],
            "n_candidates": 4,
            "match_type": [f"m{c % 6}" for c in cases] + ["m0"],
            "query_absent": False,
            "question": "q",
            "answer": "A",
            "split": ["test"] * (2 * N_CASES) + ["train"],
        }
    )


def mmvm_predictions(correct_zero_shot: np.ndarray, status: str = "ok") -> pd.DataFrame:
    items = mmvm_items()
    n = len(items)
    head = np.zeros(n, bool)
    return pd.DataFrame(
        {
            "model": "m",
            "method": ["zero_shot"] * n + ["contrastive_head"] * n,
            "item_id": list(items["item_id"]) * 2,
            "predicted": "A",
            "correct": np.concatenate([correct_zero_shot, head]),
            "none_mode": "never",
            "status": status,
        }
    )


def test_the_declared_columns_give_one_score_per_test_sample_and_method():
    good = np.arange(2 * N_CASES + 1) % 4 != 0  # 75% right, the train item too (left out)
    tables = {"mmvm_items": mmvm_items(), "mmvm_predictions": mmvm_predictions(good)}
    scores = SPECS["mmvm"].paired.scores("m", tables)
    zs = scores[scores["metric"] == "accuracy/zero_shot"]
    assert len(zs) == 2 * N_CASES and set(scores["metric"]) == {
        "accuracy/zero_shot",
        "accuracy/contrastive_head",
    }
    assert zs["score"].mean() == pytest.approx(good[:-1].mean())
    assert set(zs["group"]) == {f"m{k}" for k in range(6)}  # bootstrap categories: the match type
    assert zs.set_index("unit").at["i3", "cluster"] == "c1"  # clusters: the case
    snap = family_snapshot(*WATCH["mmvm"], "m", tables)
    assert snap.values == {"accuracy/contrastive_head": 0.0, "accuracy/zero_shot": 100 * good[:-1].mean()}
    assert len(snap.scores) == 4 * N_CASES and len(snap.task_hash) > 8
    changed = mmvm_items().assign(question=lambda d: d["question"].where(d["item_id"] != "i0", "other"))
    other = family_snapshot(*WATCH["mmvm"], "m", {**tables, "mmvm_items": changed})
    assert other.task_hash != snap.task_hash  # another sample: another task, never paired


def test_a_watch_declares_a_paired_table_or_why_there_is_none():
    with pytest.raises(ValueError, match="give either"):
        FamilyWatch("x", "h", "m", ("x_t",), ("x_s",))
    assert SPECS["mmvm"].paired is not None and SPECS["mmvm"].tables == ("mmvm_predictions", "mmvm_items")
    for watch in SPECS.values():  # every family's headline is paired-tested on a per-sample table it reads
        names = (watch.paired.table,) if isinstance(watch.paired.table, str) else watch.paired.table
        assert not watch.not_paired and set(names) <= set(watch.per_model)
        assert watch.paired.samples in watch.samples


def archive(root: str, version: str, correct: np.ndarray, hour: int) -> None:
    tables = {"mmvm_items": mmvm_items(), "mmvm_predictions": mmvm_predictions(correct)}
    snap = family_snapshot(*WATCH["mmvm"], "m", tables)
    when = pd.Timestamp("2026-01-01", tz="UTC").replace(hour=hour).to_pydatetime()
    history.write_snapshot(root, "mmvm", "m", version, snap.task_hash, snap.scores, snap.values, when)


def test_a_drop_fails_the_paired_watch_with_both_figures_and_an_unchanged_run_does_not(tmp_path):
    root = str(tmp_path)
    good = np.arange(2 * N_CASES + 1) % 4 != 0
    archive(root, "v1", good, 0)
    first = history.watch(root, "mmvm", "m", "v1", seed=0, reduction="pooled")
    assert first.previous == "" and first.message == "" and first.figures["accuracy/zero_shot"] == "75.0"
    bad = np.zeros_like(good)
    bad[::8] = True  # the degraded run: 12.5%, right only on items the first run got wrong
    archive(root, "v2", bad, 1)
    out = history.watch(root, "mmvm", "m", "v2", seed=0, reduction="pooled")
    assert out.previous == "v1"
    assert "m (mmvm) regressed from data version v1 to v2: accuracy/zero_shot 75.0 -> 12.5" in out.message
    assert "accuracy/contrastive_head" not in out.message  # 0 -> 0: no drop
    row = out.table[(out.table.data_version == "v2")].set_index("metric").loc["accuracy/zero_shot"]
    assert row["delta"] == pytest.approx(-62.5) and row["delta_ci_high"] < 0 and bool(row["regression"])
    assert out.figures["accuracy/zero_shot"] == (
        f"75.0 -> 12.5 (-62.5, [{row['delta_ci_low']:+.1f}, {row['delta_ci_high']:+.1f}])"
    )
    assert set(out.table["data_version"]) == {"v1", "v2"}  # both runs stay queryable
    archive(root, "v3", bad, 2)  # the same outcomes under a new data version: paired, no difference
    same = history.watch(root, "mmvm", "m", "v3", seed=0, reduction="pooled")
    assert same.previous == "v2" and same.message == ""
    assert same.figures["accuracy/zero_shot"] == "12.5 -> 12.5 (+0.0, [+0.0, +0.0])"


def test_a_family_without_per_sample_rows_reports_the_difference_and_no_test(tmp_path):
    root, reason = str(tmp_path), "x_metrics stores the accuracy per level, not per sample"
    empty = pd.DataFrame(columns=SCORE_COLUMNS)
    history.write_snapshot(root, "fgbmk", "m", "v1", "task", empty, {"top1/subclass": 60.0})
    history.write_snapshot(root, "fgbmk", "m", "v2", "task", empty, {"top1/subclass": 20.0})
    out = history.watch(root, "fgbmk", "m", "v2", not_paired=reason)
    assert out.test == f"not paired-testable: {reason}"
    assert out.message == "" and out.figures == {"top1/subclass": "60.0 -> 20.0 (-40.0)"}
    row = out.table[out.table.data_version == "v2"].iloc[0]
    assert row["delta"] == pytest.approx(-40.0) and np.isnan(row["delta_ci_low"]) and not row["regression"]


def test_a_snapshot_archived_without_per_sample_scores_gets_the_difference_not_a_failed_test(tmp_path):
    """A snapshot archived before the family had per-sample rows (empty scores) beside a paired one: the
    plain difference, the test saying why, no crash."""
    root = str(tmp_path)
    history.write_snapshot(
        root, "fgbmk", "m", "v1", "task", pd.DataFrame(columns=SCORE_COLUMNS), {"top1/subclass": 60.0}
    )
    snap = family_snapshot(*WATCH["fgbmk"], "m", fgbmk_tables([True, False, False, False, False, True]))
    history.write_snapshot(root, "fgbmk", "m", "v2", "task", snap.scores, snap.values)
    out = history.watch(root, "fgbmk", "m", "v2", reduction="pooled")
    assert out.test == "not paired-testable: the snapshot of data version v1 holds no per-sample scores"
    assert out.message == "" and out.figures == {"top1/subclass": "60.0 -> 33.3 (-26.7)"}


def fgbmk_tables(correct: list[bool]) -> dict[str, pd.DataFrame]:
    """Six test images (two per subclass, one train image), the probe's subclass top-1 as fgbmk_metrics
    stores it and its per-image outcomes `correct`."""
    items = pd.DataFrame(
        {
            "image_id": [f"i{k}" for k in range(7)],
            "path": [f"i{k}.jpg" for k in range(7)],
            "split": ["train"] + ["test"] * 6,
            "superclass_id": 0,
            "class_id": [0, 0, 0, 1, 1, 1, 1],
            "subclass_id": [0, 0, 0, 1, 1, 2, 2],
        }
    )
    test = items[items.split == "test"]
    top1 = 100 * float(np.mean(correct))
    metrics = pd.DataFrame(
        {
            "scope": ["across", "across", "within"],
            "level": ["class", "subclass", "subclass"],
            "top1": [80.0, top1, 70.0],
            "top5": [100.0, 100.0, 100.0],
        }
    )
    predictions = pd.DataFrame(
        {
            "backbone": "m",
            "image_id": list(test.image_id) * 2,
            "level": ["class"] * 6 + ["subclass"] * 6,
            "predicted": 0,
            "label": 0,
            "correct": [True] * 6 + correct,
            "probe_head": "h",
            "simulated": True,
        }
    )
    return {"fgbmk_items": items, "fgbmk_metrics": metrics, "fgbmk_probe_predictions": predictions}


def test_fgbmk_is_paired_on_the_probes_per_image_outcomes_whose_mean_is_its_top1(tmp_path):
    correct = [True, True, False, True, False, True]
    snap = family_snapshot(*WATCH["fgbmk"], "m", fgbmk_tables(correct))
    assert snap.values == {"top1/subclass": pytest.approx(100 * 4 / 6)}
    assert set(snap.scores.metric) == {"top1/subclass"} and len(snap.scores) == 6  # the headline level only
    assert 100 * snap.scores.score.mean() == pytest.approx(snap.values["top1/subclass"])
    assert snap.scores.groupby("group").size().to_dict() == {"0": 2, "1": 2, "2": 2}  # categories: subclass
    assert (snap.scores.unit == snap.scores.cluster).all()  # each image its own cluster
    root = str(tmp_path)
    history.write_snapshot(root, "fgbmk", "m", "v1", snap.task_hash, snap.scores, snap.values)
    worse = family_snapshot(*WATCH["fgbmk"], "m", fgbmk_tables([False] * 5 + [True]))
    history.write_snapshot(root, "fgbmk", "m", "v2", worse.task_hash, worse.scores, worse.values)
    out = history.watch(root, "fgbmk", "m", "v2", reduction=SPECS["fgbmk"].reduction, n_boot=500)
    assert out.test.startswith("paired difference per sample") and out.previous == "v1"
    row = out.table[out.table.data_version == "v2"].iloc[0]
    assert row["delta"] == pytest.approx(100 * (1 / 6 - 4 / 6))
    assert out.figures["top1/subclass"] == (
        f"66.7 -> 16.7 (-50.0, [{row['delta_ci_low']:+.1f}, {row['delta_ci_high']:+.1f}])"
    )


def tpips_tables() -> dict[str, pd.DataFrame]:
    """Two test triplets and a train one, judged on two aspects; two methods' per-row agreements and the
    score rows they average to."""
    ooo = pd.DataFrame(
        {
            "triplet_id": ["t0", "t0", "t1", "t1", "t9"],
            "image_0": "x",
            "image_1": "y",
            "image_2": "z",
            "aspect": ["colour", "pose", "colour", "pose", "colour"],
            "votes": "[1, 2, 0]",
            "split": ["test"] * 4 + ["train"],
        }
    )
    afc = pd.DataFrame(
        {"item_id": ["a0"], "ref": "r", "x0": "x", "x1": "y", "aspect": "colour", "votes": "[3, 1]"}
    )
    test = ooo[ooo.split == "test"]
    shares = {"cosine": [0.2, 0.5, 1.0, 0.1], "mid": [0.6, 0.5, 1.0, 0.9]}
    outcomes = pd.concat(
        [
            test[["triplet_id", "aspect", "split"]].assign(
                model="m", method=m, agreement=v, judgements="simulated"
            )
            for m, v in shares.items()
        ],
        ignore_index=True,
    )
    score = {"conditioned": False, "aspect": "all", "rater_agreement": 50.0, "ceiling": 80.0, "n": 4}
    scores = pd.DataFrame(
        [
            {**score, "method": m, "eval": "ooo", "agreement": 100 * float(np.mean(v)), "agreement_err": 4.0}
            for m, v in shares.items()
        ]
        + [{**score, "method": "mid", "eval": "afc:all", "n": 1, "agreement": 70.0, "agreement_err": 9.0}]
    )
    return {
        "tpips_baseline_scores": scores[scores.method == "cosine"],
        "tpips_learned": scores[scores.method == "mid"],
        "tpips_baseline_outcomes": outcomes[outcomes.method == "cosine"],
        "tpips_learned_outcomes": outcomes[outcomes.method == "mid"],
        "tpips_ooo": ooo,
        "tpips_afc": afc,
    }


def test_tpips_is_paired_on_each_methods_agreement_per_test_row_whose_mean_is_its_headline(tmp_path):
    tables = tpips_tables()
    snap = family_snapshot(*WATCH["tpips"], "m", tables)
    assert snap.values == {"ooo/cosine": pytest.approx(45.0), "ooo/mid": pytest.approx(75.0)}
    means = 100 * snap.scores.groupby("metric").score.mean()
    assert means.to_dict() == pytest.approx(snap.values)  # the headline is the mean of the per-row shares
    assert snap.scores.score.tolist() == [0.2, 0.5, 1.0, 0.1, 0.6, 0.5, 1.0, 0.9]  # shares, not 0/1
    assert set(snap.scores.unit) == {"t0/colour", "t0/pose", "t1/colour", "t1/pose"}  # t9 is train
    assert set(snap.scores.group) == {"colour", "pose"} and set(snap.scores.cluster) == {"t0", "t1"}
    root = str(tmp_path)
    history.write_snapshot(root, "tpips", "m", "v1", snap.task_hash, snap.scores, snap.values)
    history.write_snapshot(root, "tpips", "m", "v2", snap.task_hash, snap.scores, snap.values)
    out = history.watch(root, "tpips", "m", "v2", reduction=SPECS["tpips"].reduction, n_boot=200)
    assert out.message == "" and out.figures == {
        "ooo/cosine": "45.0 -> 45.0 (+0.0, [+0.0, +0.0])",
        "ooo/mid": "75.0 -> 75.0 (+0.0, [+0.0, +0.0])",
    }


def test_a_backbone_the_family_could_not_score_is_not_applicable_not_an_error():
    n = 2 * N_CASES + 1
    rows = mmvm_predictions(np.zeros(n, bool), status="not_applicable").assign(reason="no masks")
    with pytest.raises(NotApplicableError, match="'m' is not applicable to MMVM: no masks"):
        family_snapshot(*WATCH["mmvm"], "m", {"mmvm_items": mmvm_items(), "mmvm_predictions": rows})


def test_a_snapshot_missing_for_the_current_version_names_what_to_materialize(tmp_path):
    with pytest.raises(FileNotFoundError, match="no archived soco snapshot of 'm' at data version v9"):
        history.watch(str(tmp_path), "soco", "m", "v9")
