"""The 95% intervals of evaluation/stats.py at their edges: a CI holds its own value, the cluster interval
stays in [0, 100], and a paired comparison of a model with itself is exactly zero."""

import numpy as np
import pandas as pd
import pytest

from soco_pipeline.evaluation import stats

pytestmark = pytest.mark.unit


def _scores(
    correct_per_category: list[list[int]], model: str = "m", images_per_category: int = 3
) -> pd.DataFrame:
    """SCORE_COLUMNS rows: one keypoint per pair, pair j of category c scored correct_per_category[c][j];
    target images cycle through `images_per_category` per category (the clusters)."""
    rows = []
    for c, pairs in enumerate(correct_per_category):
        for j, ok in enumerate(pairs):
            rows.append(
                {
                    "model": model,
                    "metric": "soc",
                    "group": f"cat{c}",
                    "unit": f"cat{c}_p{j}",
                    "element": "k0",
                    "cluster": f"cat{c}_img{j % images_per_category}",
                    "score": float(ok),
                }
            )
    return pd.DataFrame(rows, columns=stats.SCORE_COLUMNS)


@pytest.mark.parametrize("sizes", [(2, 5), (1, 6), (7,)])
def test_a_perfect_backbone_sits_inside_its_bootstrap_interval(sizes):
    # Every pair right in categories of 2 and 5 pairs: the estimate as a weighted sum with weights
    # 1/(K n_c) was 99.99999999999999, (1, 6) gave 100.00000000000001, while every replicate is exactly 100.
    r = stats.intervals(_scores([[1] * n for n in sizes]), n_boot=200).iloc[0]
    assert r.value == 100.0
    assert r.ci95_lo_boot_category <= r.value <= r.ci95_hi_boot_category


def test_the_bootstrap_interval_holds_its_value_on_uneven_categories():
    rng = np.random.default_rng(3)
    cats = [list(rng.integers(0, 2, size=n)) for n in (1, 3, 5, 7, 11, 2)]
    r = stats.intervals(_scores(cats), n_boot=500).iloc[0]
    official = np.mean([np.mean(c) for c in cats]) * 100
    assert r.value == pytest.approx(official, abs=1e-12)
    assert r.ci95_lo_boot_category <= r.value <= r.ci95_hi_boot_category


def test_cluster_interval_near_100_stays_below_100_and_is_asymmetric():
    # 250 pairs, one wrong: 99.6, like the demo's part oracle. value +- 1.96 SE passes 100 here.
    cats = [[1] * 50 for _ in range(5)]
    cats[2][7] = 0
    r = stats.intervals(_scores(cats, images_per_category=10), n_boot=200).iloc[0]
    assert r.value == pytest.approx(99.6)
    assert r.value + stats.Z95 * r.se_cluster_image > 100  # the symmetric interval would leave [0, 100]
    assert 0 <= r.ci95_lo_cluster_image_logit < r.value < r.ci95_hi_cluster_image_logit < 100
    assert r.ci95_hi_cluster_image_logit - r.value < r.value - r.ci95_lo_cluster_image_logit


def test_cluster_interval_at_the_ends_is_wilson_with_one_draw_per_cluster():
    perfect = stats.intervals(_scores([[1] * 4, [1] * 6]), n_boot=50).iloc[0]
    zero = stats.intervals(_scores([[0] * 4, [0] * 6]), n_boot=50).iloc[0]
    g = perfect.n_clusters
    assert g == 6 and perfect.se_cluster_image == 0
    z2 = stats.Z95**2
    assert perfect.ci95_hi_cluster_image_logit == 100.0
    assert perfect.ci95_lo_cluster_image_logit == pytest.approx(100 / (1 + z2 / g))
    assert zero.ci95_lo_cluster_image_logit == 0.0
    assert zero.ci95_hi_cluster_image_logit == pytest.approx(100 - perfect.ci95_lo_cluster_image_logit)


def test_logit_interval_matches_the_delta_method_in_the_middle():
    lo, hi = stats.logit_interval(0.5, 0.05, 20)
    half = stats.Z95 * 0.05 / 0.25
    assert (lo, hi) == pytest.approx((1 / (1 + np.exp(half)), 1 / (1 + np.exp(-half))))
    assert hi - 0.5 == pytest.approx(0.5 - lo)  # symmetric at 0.5, close to 0.5 +- 1.96 SE
    assert np.isnan(stats.logit_interval(0.5, float("nan"), 1)).all()


def test_compare_a_model_with_itself_is_exactly_zero_and_perfect_values_are_100():
    a = _scores([[1] * 2, [1] * 5])
    overall, per_cat = stats.compare(a, a.assign(model="twin"), n_boot=100)
    row = overall.iloc[0]
    assert row.value_a == row.value_b == 100.0
    assert row.delta == row.ci95_lo_boot_category == row.ci95_hi_boot_category == 0.0
    assert (per_cat["delta"] == 0).all() and row.ties == 7
