"""The correlation study: bootstrap statistics, CIs, sign flips, subsets, name errors, the OmniProbe table."""

import numpy as np
import pandas as pd
import pytest
from scipy.stats import pearsonr, spearmanr

from soco_pipeline.analysis.bootstrap import (
    bootstrap_correlation,
    bootstrap_delta,
    pair_seed,
    resample_counts,
    resample_indices,
    resampled_statistic,
)
from soco_pipeline.analysis.correlation import (
    AnalysisConfig,
    AnalysisConfigError,
    correlation_table,
    headline_table,
    load_analysis_config,
)
from soco_pipeline.analysis.figure import save_correlation_figure
from soco_pipeline.analysis.reference import (
    ReferenceDataError,
    combine_scores,
    leaderboard_scores,
    load_downstream,
    load_name_map,
    load_omniprobe,
    normalise_scores,
    select_models,
)

pytestmark = pytest.mark.unit


def with_exact_r(x: np.ndarray, r: float, rng) -> np.ndarray:
    """y whose sample Pearson correlation with x is exactly r."""
    xs = (x - x.mean()) / x.std()
    z = rng.normal(size=len(x))
    z = z - z.mean()
    z = z - (z @ xs) / (xs @ xs) * xs
    z = z / z.std()
    return r * xs + np.sqrt(1 - r * r) * z


def scores_table(x, ys: dict, models=None, higher_better=None) -> pd.DataFrame:
    """A long score table: benchmark `bench/score` = x and downstream `task/<name>` = ys[name]."""
    models = models or [f"m{i:02d}" for i in range(len(x))]
    rows = [dict(model=m, task="bench", metric="score", value=v) for m, v in zip(models, x, strict=True)]
    for name, y in ys.items():
        hb = (higher_better or {}).get(name, True)
        rows += [
            dict(model=m, task="down", metric=name, value=v, higher_better=hb)
            for m, v in zip(models, y, strict=True)
        ]
    return normalise_scores(pd.DataFrame(rows), "constructed")


def config(**kw) -> AnalysisConfig:
    base = dict(
        seed=7,
        n_resamples=10_000,
        benchmarks={"b": ("bench", "score")},
        not_downstream=("bench",),
        min_models=5,
    )
    return AnalysisConfig(**{**base, **kw})


def test_vectorized_statistics_match_scipy_per_resample():
    rng = np.random.default_rng(0)
    x, y = np.round(rng.normal(size=22), 1), rng.normal(size=22)  # rounded: ties in x
    idx = resample_indices(22, 300, rng)
    counts = resample_counts(idx)
    ref_p = [pearsonr(x[i], y[i])[0] for i in idx]
    ref_s = [spearmanr(x[i], y[i])[0] for i in idx]
    np.testing.assert_allclose(resampled_statistic("pearson", counts, x, y), ref_p, atol=1e-10)
    np.testing.assert_allclose(resampled_statistic("spearman", counts, x, y), ref_s, atol=1e-10)


def test_known_r_is_estimated_inside_its_ci_and_spearman_matches_scipy():
    rng = np.random.default_rng(1)
    x = rng.normal(size=30)
    y = with_exact_r(x, 0.6, rng)
    table = correlation_table(scores_table(x, {"y": y}), config())
    p = table[table.statistic == "pearson"].iloc[0]
    s = table[table.statistic == "spearman"].iloc[0]
    assert p.estimate == pytest.approx(0.6, abs=1e-12)
    assert p.ci_low < 0.6 < p.ci_high and p.ci_high - p.ci_low < 0.8
    assert p.n == 30 and p.n_resamples == 10_000
    assert s.estimate == pytest.approx(spearmanr(x, y)[0], abs=1e-12)
    assert s.ci_low < s.estimate < s.ci_high


def test_seeded_bootstrap_is_reproducible_and_seed_dependent():
    rng = np.random.default_rng(2)
    x = rng.normal(size=20)
    scores = scores_table(x, {"y": with_exact_r(x, 0.5, rng)})
    a = correlation_table(scores, config(seed=3))
    b = correlation_table(scores, config(seed=3))
    c = correlation_table(scores, config(seed=4))
    pd.testing.assert_frame_equal(a, b)
    assert (a.estimate == c.estimate).all()
    assert not np.allclose(a[["ci_low", "ci_high"]], c[["ci_low", "ci_high"]])


def test_stored_rows_are_reused_only_where_their_inputs_are_unchanged(monkeypatch):
    """A row takes a stored row's interval when its bootstrap reads the same values, seed key and settings;
    a model without downstream values changes no row, a changed value resamples its rows only, and the
    table equals a fresh one either way."""
    from soco_pipeline.analysis import correlation as corr

    rng = np.random.default_rng(5)
    x = rng.normal(size=12)
    scores = scores_table(x, {"y": with_exact_r(x, 0.5, rng), "z": rng.normal(size=12)})
    cfg = config(n_resamples=500)
    stored = correlation_table(scores, cfg)
    assert stored.inputs_sha.str.fullmatch(r"[0-9a-f]{16}").all()
    assert stored.groupby(["task", "metric"]).inputs_sha.nunique().eq(1).all()  # pearson, spearman: one draw

    calls = []
    real = corr.bootstrap_correlations
    monkeypatch.setattr(corr, "bootstrap_correlations", lambda *a, **k: calls.append(a) or real(*a, **k))
    # a new model with a benchmark score and no downstream value enters no bootstrap
    extra = pd.concat([scores, scores_table([9.0], {}, models=["new"])], ignore_index=True)
    again = correlation_table(extra, cfg, stored)
    assert calls == []
    pd.testing.assert_frame_equal(again, stored)
    # one downstream value changed: only that metric's bootstrap runs again, and the rows are a fresh table's
    changed = scores.copy()
    changed.loc[(changed.metric == "z") & (changed.model == "m03"), "value"] += 1.0
    mixed = correlation_table(changed, cfg, stored)
    assert len(calls) == 1
    pd.testing.assert_frame_equal(mixed, correlation_table(changed, cfg))
    assert (
        mixed.set_index(["metric", "statistic"])
        .inputs_sha["y"]
        .equals(stored.set_index(["metric", "statistic"]).inputs_sha["y"])
    )
    # other settings, another seed: nothing is reused
    calls.clear()
    correlation_table(scores, config(n_resamples=600), stored)
    correlation_table(scores, config(n_resamples=500, seed=8), stored)
    assert len(calls) == 4
    # a table stored before the column existed is not reused
    calls.clear()
    correlation_table(scores, cfg, stored.drop(columns="inputs_sha"))
    assert len(calls) == 2


def test_a_stored_figure_is_reused_only_when_its_files_are_the_recorded_ones(tmp_path):
    from soco_pipeline.analysis.figure import file_sha, headline_sha, stored_figure

    table = load_analysis_config(n_resamples=200)
    scores = combine_scores(load_omniprobe(), load_downstream(), name_map=load_name_map())
    t = correlation_table(scores, table)
    stem = str(tmp_path / "correlation_all")
    figs = save_correlation_figure(t, stem, "all")
    recorded = {fmt: file_sha(data) for fmt, data in figs.items()}
    assert stored_figure(stem, recorded) == figs
    assert headline_sha(t, "all") == headline_sha(t.copy(), "all") != headline_sha(t, "main")
    moved = t.copy()
    moved.loc[moved.headline & (moved.benchmark == "soc"), "estimate"] += 0.01
    assert headline_sha(moved, "all") != headline_sha(t, "all")
    (tmp_path / "correlation_all.svg").write_text("<svg/>")  # overwritten since (a failed run, say)
    assert stored_figure(stem, recorded) is None
    assert stored_figure(str(tmp_path / "missing"), recorded) is None


def test_ci_covers_the_true_r_in_at_least_90_percent_of_simulated_data_sets():
    rho, n, runs = 0.5, 20, 200
    rng = np.random.default_rng(11)
    cov = [[1, rho], [rho, 1]]
    covered = 0
    for k in range(runs):
        x, y = rng.multivariate_normal([0, 0], cov, size=n).T
        iv = bootstrap_correlation(x, y, resample_indices(n, 10_000, pair_seed(0, "coverage", str(k))))
        covered += iv.low <= rho <= iv.high
    assert covered / runs >= 0.90, covered


def test_paired_delta_uses_one_index_matrix():
    rng = np.random.default_rng(5)
    x1 = rng.normal(size=25)
    y = with_exact_r(x1, 0.8, rng)
    x2 = with_exact_r(y, 0.3, rng)
    idx = resample_indices(25, 10_000, pair_seed(0, "delta"))
    d = bootstrap_delta(x1, x2, y, idx)
    assert d.estimate == pytest.approx(pearsonr(x1, y)[0] - pearsonr(x2, y)[0], abs=1e-12)
    assert 0 < d.low < d.estimate < d.high
    # Identical benchmarks: every paired resample gives exactly 0.
    same = bootstrap_delta(x1, x1, y, idx)
    assert (same.estimate, same.low, same.high) == (0.0, 0.0, 0.0)


def test_error_metrics_are_sign_flipped_and_the_table_says_so():
    rng = np.random.default_rng(6)
    x = rng.normal(size=20)
    err = -with_exact_r(x, 0.7, rng)  # a better model has a lower error
    scores = scores_table(x, {"RMSE": err, "acc": -err}, higher_better={"RMSE": False, "acc": True})
    t = correlation_table(scores, config()).set_index(["metric", "statistic"])
    assert t.loc[("RMSE", "pearson"), "estimate"] == pytest.approx(0.7, abs=1e-12)
    assert (
        t.loc[("RMSE", "pearson"), "sign_flipped"] and t.loc[("RMSE", "pearson"), "metric_shown"] == "-(RMSE)"
    )
    assert (
        not t.loc[("acc", "pearson"), "sign_flipped"] and t.loc[("acc", "pearson"), "metric_shown"] == "acc"
    )
    # An empty higher_better falls back to the metric name: RMSE / Err are lower-is-better.
    raw = pd.DataFrame(
        {
            "model": ["a", "b"],
            "task": "t",
            "metric": ["SI RMSE", "Mean Err (deg)"],
            "value": [1, 2],
            "higher_better": [None, None],
        }
    )
    assert not normalise_scores(raw, "x.csv")["higher_better"].any()


def test_subset_filter_restricts_the_models():
    rng = np.random.default_rng(8)
    x = rng.normal(size=20)
    scores = scores_table(x, {"y": with_exact_r(x, 0.5, rng)})
    scores["is_main_model"] = scores["model"].isin([f"m{i:02d}" for i in range(12)])
    listed = [f"m{i:02d}" for i in range(8)]
    t = correlation_table(scores, config(subsets={"all": "all", "main": "is_main_model", "eight": listed}))
    n = t[t.statistic == "pearson"].set_index("subset")["n"]
    assert dict(n) == {"all": 20, "main": 12, "eight": 8}
    with pytest.raises(ReferenceDataError, match=r"analysis\.yaml: model name 'nobody'"):
        select_models(scores, ["m00", "nobody"], "assets/analysis.yaml")


def test_blank_and_duplicate_model_names_name_the_name_and_the_file(tmp_path):
    (tmp_path / "a.csv").write_text("model,task,metric,value\nm1,t,acc,1\n,t,acc,2\n")
    with pytest.raises(ReferenceDataError, match=r"a\.csv: line 3 has no model name"):
        load_downstream(tmp_path)
    (tmp_path / "a.csv").write_text("backbone,task,metric,value\nm1,t,acc,1\nm1,t,acc,2\n")
    with pytest.raises(ReferenceDataError, match=r"duplicate model name 'm1'.*a\.csv"):
        load_downstream(tmp_path)
    (tmp_path / "a.csv").write_text("backbone,task,metric,value\nm1,t,acc,1\n")
    (tmp_path / "b.csv").write_text("model,task,metric,value\nm1,t,acc,3\n")
    with pytest.raises(ReferenceDataError, match=r"duplicate model name 'm1'.*a\.csv, .*b\.csv"):
        load_downstream(tmp_path)
    # Two aliases of one model landing on the same (task, metric) are a duplicate too.
    (tmp_path / "b.csv").write_text("model,task,metric,value\nmodel_one,t,acc,3\n")
    (tmp_path / "map").mkdir()
    names = tmp_path / "map" / "names.csv"
    names.write_text("alias,model\nmodel_one,m1\n")
    with pytest.raises(ReferenceDataError, match=r"duplicate model name 'm1'"):
        combine_scores(load_downstream(tmp_path), name_map=load_name_map(names), map_source=str(names))
    names.write_text("alias,model\nx,m1\nx,m2\n")
    with pytest.raises(ReferenceDataError, match=r"names\.csv: duplicate alias 'x'"):
        load_name_map(names)
    names.write_text("alias,model\nmodel_one,M-1\n")
    with pytest.raises(
        ReferenceDataError, match=r"names\.csv: model name 'M-1' \(alias 'model_one'\) is missing"
    ):
        combine_scores(load_downstream(tmp_path), name_map=load_name_map(names), map_source=str(names))


def test_leaderboard_rows_join_user_tables_through_the_name_map(tmp_path):
    board = pd.DataFrame(
        {"backbone": [f"b{i}" for i in range(6)], "soc": np.arange(6.0), "knn_top1": [3.0, 1, 2, 5, 4, 0]}
    )
    user = pd.DataFrame(
        {
            "backbone": [f"b{i}" for i in range(6)],
            "task": "seg",
            "metric": "mIoU",
            "value": np.arange(6.0) * 2 + 1,
        }
    )
    scores = combine_scores(leaderboard_scores(board, ["soc", "knn_top1"]), normalise_scores(user, "u.csv"))
    cfg = config(
        benchmarks={"pipeline_soc": ("soco_pipeline", "soc"), "pipeline_knn": ("soco_pipeline", "knn_top1")},
        deltas=(("pipeline_soc", "pipeline_knn"),),
        not_downstream=("soco_pipeline",),
        n_resamples=500,
    )
    t = correlation_table(scores, cfg).set_index(["benchmark", "statistic"])
    assert t.loc[("pipeline_soc", "pearson"), "estimate"] == pytest.approx(1.0)
    assert t.loc[("pipeline_soc-pipeline_knn", "delta_pearson"), "estimate"] > 0


def test_omniprobe_table_soc_beats_knn_on_every_task_and_the_figure_is_written(tmp_path):
    scores = combine_scores(load_omniprobe(), load_downstream(), name_map=load_name_map())
    assert scores["model"].nunique() == 61
    cfg = load_analysis_config(n_resamples=1000)
    table = correlation_table(scores, cfg)
    h = headline_table(table, "all")
    assert set(h["task"]) == {"semseg", "det3d", "pose", "navi", "tracking", "snorm", "depth"}
    assert (h["r_soc_estimate"] > h["r_knn_estimate"]).all()
    assert (h["delta_estimate"] > 0).all()
    # Every downstream metric with variance, not only the headline ones.
    p = (
        table[(table.subset == "all") & (table.statistic == "pearson")]
        .pivot_table(index=["task", "metric"], columns="benchmark", values="estimate")
        .dropna()
    )
    assert len(p) >= 39 and (p["soc"] > p["knn"]).all()
    main = table[(table.subset == "main") & (table.statistic == "pearson") & (table.benchmark == "soc")]
    assert set(main["n"]) == {13}
    out = save_correlation_figure(table, str(tmp_path / "fig4"))
    assert out["png"][:8] == b"\x89PNG\r\n\x1a\n" and b"<svg" in out["svg"][:500]
    assert (tmp_path / "fig4.png").stat().st_size > 10_000 and (tmp_path / "fig4.svg").exists()


@pytest.mark.parametrize(
    "text, match",
    [
        ("- seed\n- 0\n", r"expected a mapping of fields at the top level, got list"),
        ("benchmarks:\n  soc: {task: soco}\n", r"field 'benchmarks\.soc\.metric' is missing"),
        ("benchmarks: [soc]\n", r"field 'benchmarks' must be a mapping"),
        (
            "benchmarks:\n  soc: {task: soco, metric: m}\ndeltas: [[soc]]\n",
            r"field 'deltas\.0\.1' is missing",
        ),
        ("confidence: 2\n", r"field 'confidence' must be < 1"),
        ("seed: true\n", r"field 'seed' must be int"),
        ("bootstrap: 5\n", r"unknown field\(s\) \['bootstrap'\]"),
    ],
)
def test_a_malformed_analysis_config_names_file_and_field(tmp_path, text, match):
    """Issue 27 item 6: a list at the top, a benchmark without `metric` ... used to give a bare
    AttributeError / KeyError / TypeError / IndexError without the file's name."""
    path = tmp_path / "analysis.yaml"
    path.write_text(text)
    with pytest.raises(AnalysisConfigError, match=match) as e:
        load_analysis_config(path)
    assert str(e.value).startswith(str(path))
