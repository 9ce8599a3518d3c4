"""The 95% CIs behind FG-BMK's and SOCO-LVLM's summary headlines: a probe's top-1 (bootstrap over its test
images), an LVLM's FG-BMK choice accuracy (bootstrap over questions) and its SOCO-LVLM accuracy (bootstrap over
categories, as SOCO's), seeded, carried to the boards and from them to the headlines."""

import numpy as np
import pandas as pd
import pytest

from soco_pipeline.defs.definitions import group_folders
from soco_pipeline.defs.shared.family import declared_families
from soco_pipeline.defs.summary.assets import declared_headlines
from soco_pipeline.evaluation.stats import bootstrap_share
from soco_pipeline.lvlm.metrics import lvlm_leaderboard, lvlm_metrics
from soco_pipeline.tasks.fgbmk.leaderboard import fgbmk_leaderboard
from soco_pipeline.tasks.fgbmk.leaderboard import lvlm_metrics as fgbmk_lvlm_metrics
from soco_pipeline.trust.headline import model_headlines

pytestmark = pytest.mark.unit

HEADLINES = declared_headlines(declared_families(group_folders()))


def test_bootstrap_share_brackets_the_share_and_narrows_with_more_units():
    small = np.arange(40) % 4 != 0  # 75 % of 40
    big = np.arange(4000) % 4 != 0  # 75 % of 4000
    lo, hi = bootstrap_share(small, seed=3)
    assert lo < 75 < hi and (lo, hi) == bootstrap_share(small, seed=3)  # seeded: the same interval again
    blo, bhi = bootstrap_share(big, seed=3)
    assert blo < 75 < bhi and (bhi - blo) < (hi - lo) / 5  # 100 x the units: about a tenth of the width
    # the binomial width: 1.96 sqrt(p (1-p) / n) on each side
    assert bhi - blo == pytest.approx(2 * 1.96 * np.sqrt(0.75 * 0.25 / 4000) * 100, rel=0.1)
    assert bootstrap_share(np.ones(10, bool)) == (100.0, 100.0) and np.isnan(bootstrap_share([])[0])


def _soco_lvlm_answers(n_groups: int = 60) -> pd.DataFrame:
    rng = np.random.default_rng(0)
    n = 4 * n_groups
    g = np.arange(n) // 4
    cats = np.array(["car", "dog", "bus", "cat"])[g % 4]
    correct = rng.random(n) < 0.6
    return pd.DataFrame(
        {
            "model": "tiny_vlm",
            "setting": "vis",
            "g_index": g,
            "rotation": np.arange(n) % 4,
            "pair_group": cats,
            "supercategory": "any",
            "correct": correct,
            "error": "",
            "answer": "A",
            "parsed": np.where(correct, "A", "B"),
        }
    )


def test_soco_lvlm_accuracy_has_a_ci_on_its_board_and_in_its_headline():
    m = lvlm_metrics(_soco_lvlm_answers(), seed=0)
    top = m[m.scope == "all"].set_index("metric")
    for metric in ("average", "circular"):
        lo, value, hi = top.loc[metric, ["ci95_lo_boot_category", "value", "ci95_hi_boot_category"]]
        assert lo < value < hi and hi - lo < 40
    assert m.loc[m.scope != "all", "ci95_lo_boot_category"].isna().all()  # the headline rows only
    again = lvlm_metrics(_soco_lvlm_answers(), seed=0)
    assert again.ci95_lo_boot_category.equals(m.ci95_lo_boot_category)  # seeded
    board = lvlm_leaderboard(m, reference=pd.DataFrame())
    row = board.set_index("model").loc["tiny_vlm"]
    assert row.vis_average_ci95_lo == top.loc["average", "ci95_lo_boot_category"]
    long = model_headlines({"lvlm_leaderboard": board}, {}, HEADLINES)
    head = long.set_index(["model", "family"]).loc[("tiny_vlm", "soco_lvlm")]
    assert head.ci_low < head.value < head.ci_high


def test_fgbmk_probe_and_choice_accuracy_have_cis_on_the_board_and_in_the_headline():
    base = {"backbone": "b", "top5": 100.0, "recall_at_1": 50.0, "map": 60.0, "simulated": True}
    metrics = pd.DataFrame(
        [
            {
                **base,
                "scope": "across",
                "superclass": "all",
                "level": "subclass",
                "top1": 70.0,
                "top1_ci95_lo": 61.0,
                "top1_ci95_hi": 78.5,
            },
        ]
    )
    n = 80
    answers = pd.DataFrame(
        {
            "model": "tiny_vlm",
            "task": "hierarchical",
            "level": "subclass",
            "form": "choice",
            "rotation": 0,
            "group_id": np.arange(n),
            "correct": np.arange(n) % 5 != 0,  # 80 %
            "correct_published": np.arange(n) % 5 != 0,
            "image": [f"i{k}.jpg" for k in range(n)],
            "class": "Laysan Albatross",
            "simulated": True,
        }
    )
    lvlm = fgbmk_lvlm_metrics(answers, seed=0)
    cis = lvlm[lvlm.metric.str.startswith("accuracy_ci95")].set_index("metric").value
    assert cis["accuracy_ci95_lo"] < 80 < cis["accuracy_ci95_hi"]
    board = fgbmk_leaderboard(metrics, pd.DataFrame(), lvlm).set_index("model")
    assert (board.loc["b", "ci95_lo_subclass"], board.loc["b", "ci95_hi_subclass"]) == (61.0, 78.5)
    assert board.loc["tiny_vlm", "ci95_lo_subclass"] == cis["accuracy_ci95_lo"]
    long = model_headlines({"fgbmk_leaderboard": board.reset_index()}, {}, HEADLINES)
    got = long.set_index(["model", "family"])
    assert got.loc[("b", "fgbmk"), ["ci_low", "ci_high"]].tolist() == [61.0, 78.5]
    assert got.loc[("tiny_vlm", "fgbmk"), "ci_low"] == cis["accuracy_ci95_lo"]
