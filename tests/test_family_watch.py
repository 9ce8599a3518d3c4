"""The regression watch's domain logic per family (evaluation/family_watch.py, evaluation/history.py) on small
hand-made tables: the per-sample scores of a family's declared (sample, outcome) columns, the snapshot of its
headline, the paired verdict of two data versions, and a family without per-sample rows (no test, said so)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from soco_pipeline.evaluation import history
from soco_pipeline.evaluation.family_records import NotApplicableError
from soco_pipeline.evaluation.family_watch import WATCHES, FamilyWatch, family_snapshot
from soco_pipeline.evaluation.stats import SCORE_COLUMNS

pytestmark = pytest.mark.unit

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
    scores = WATCHES["mmvm"].paired.scores("m", tables)
    zs = scores[scores["metric"] == "accuracy/zero_shot"]
    assert len(zs) == 2 * N_CASES and set(scores["metric"]) == {
        "accuracy/zero_shot",
        "accuracy/contrastive_head",
    }
    assert zs["score"].mean() == pytest.approx(good[:-1].mean())
    assert set(zs["group"]) == {f"m{k}" for k in range(6)}  # bootstrap categories: the match type
    assert zs.set_index("unit").at["i3", "cluster"] == "c1"  # clusters: the case
    snap = family_snapshot(WATCHES["mmvm"], "m", tables)
    assert snap.values == {"accuracy/contrastive_head": 0.0, "accuracy/zero_shot": 100 * good[:-1].mean()}
    assert len(snap.scores) == 4 * N_CASES and len(snap.task_hash) > 8
    changed = mmvm_items().assign(question=lambda d: d["question"].where(d["item_id"] != "i0", "other"))
    other = family_snapshot(WATCHES["mmvm"], "m", {**tables, "mmvm_items": changed})
    assert other.task_hash != snap.task_hash  # another sample: another task, never paired


def test_a_watch_declares_a_paired_table_or_why_there_is_none():
    with pytest.raises(ValueError, match="give either"):
        FamilyWatch("x", "h", "m", ("x_t",), ("x_s",))
    assert WATCHES["mmvm"].paired is not None and WATCHES["mmvm"].tables == ("mmvm_predictions", "mmvm_items")
    for family in ("fgbmk", "tpips"):
        assert WATCHES[family].paired is None and "no paired test" in WATCHES[family].not_paired


def archive(root: str, version: str, correct: np.ndarray, hour: int) -> None:
    tables = {"mmvm_items": mmvm_items(), "mmvm_predictions": mmvm_predictions(correct)}
    snap = family_snapshot(WATCHES["mmvm"], "m", tables)
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
    root, reason = str(tmp_path), WATCHES["fgbmk"].not_paired
    empty = pd.DataFrame(columns=SCORE_COLUMNS)
    history.write_snapshot(root, "fgbmk", "m", "v1", "task", empty, {"top1/subclass": 60.0})
    history.write_snapshot(root, "fgbmk", "m", "v2", "task", empty, {"top1/subclass": 20.0})
    out = history.watch(root, "fgbmk", "m", "v2", not_paired=reason)
    assert out.test == f"not paired-testable: {reason}"
    assert out.message == "" and out.figures == {"top1/subclass": "60.0 -> 20.0 (-40.0)"}
    row = out.table[out.table.data_version == "v2"].iloc[0]
    assert row["delta"] == pytest.approx(-40.0) and np.isnan(row["delta_ci_low"]) and not row["regression"]


def test_the_aggregate_families_snapshot_their_headline_values_without_scores():
    items = pd.DataFrame(
        {
            "image_id": ["a", "b", "c", "d"],
            "path": ["a.jpg", "b.jpg", "c.jpg", "d.jpg"],
            "split": ["train", "train", "test", "test"],
            "superclass_id": 0,
            "class_id": [0, 1, 0, 1],
            "subclass_id": [0, 1, 2, 3],
        }
    )
    metrics = pd.DataFrame(
        {
            "scope": ["across", "across", "within"],
            "level": ["class", "subclass", "subclass"],
            "top1": [80.0, 55.0, 70.0],
            "top5": [100.0, 100.0, 100.0],
        }
    )
    snap = family_snapshot(WATCHES["fgbmk"], "m", {"fgbmk_items": items, "fgbmk_metrics": metrics})
    assert snap.values == {"top1/subclass": 55.0} and snap.scores.empty
    score = {"conditioned": False, "aspect": "all", "rater_agreement": 50.0, "ceiling": 80.0}
    scores = pd.DataFrame(
        [
            {**score, "method": "cosine", "eval": "ooo", "n": 6, "agreement": 40.0, "agreement_err": 4.0},
            {**score, "method": "mid", "eval": "ooo", "n": 6, "agreement": 48.0, "agreement_err": 4.0},
            {**score, "method": "mid", "eval": "afc:all", "n": 2, "agreement": 70.0, "agreement_err": 9.0},
        ]
    )
    ooo = pd.DataFrame(
        {
            "triplet_id": ["t0", "t1"],
            "image_0": "x",
            "image_1": "y",
            "image_2": "z",
            "aspect": "colour",
            "votes": "[1, 2, 0]",
            "split": "test",
        }
    )
    afc = pd.DataFrame(
        {"item_id": ["a0"], "ref": "r", "x0": "x", "x1": "y", "aspect": "colour", "votes": "[3, 1]"}
    )
    tables = {
        "tpips_baseline_scores": scores,
        "tpips_learned": scores.iloc[:0],
        "tpips_ooo": ooo,
        "tpips_afc": afc,
    }
    snap = family_snapshot(WATCHES["tpips"], "m", tables)
    assert snap.values == {"ooo/cosine": 40.0, "ooo/mid": 48.0} and snap.scores.empty


def test_a_backbone_the_family_could_not_score_is_not_applicable_not_an_error():
    n = 2 * N_CASES + 1
    rows = mmvm_predictions(np.zeros(n, bool), status="not_applicable").assign(reason="no masks")
    with pytest.raises(NotApplicableError, match="'m' is not applicable to MMVM: no masks"):
        family_snapshot(WATCHES["mmvm"], "m", {"mmvm_items": mmvm_items(), "mmvm_predictions": rows})


def test_a_snapshot_missing_for_the_current_version_names_what_to_materialize(tmp_path):
    with pytest.raises(FileNotFoundError, match="no archived soco snapshot of 'm' at data version v9"):
        history.watch(str(tmp_path), "soco", "m", "v9")
