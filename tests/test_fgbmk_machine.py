"""FG-BMK machine-oriented protocol: embedded set, readers, global-feature cache, probe, retrieval, metrics."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
import torch.nn.functional as F

from soco_pipeline.features.global_cache import GlobalFeatures, extract_global, read_global
from soco_pipeline.features.global_extractors import VariantOracle
from soco_pipeline.tasks.fgbmk.config import load_config
from soco_pipeline.tasks.fgbmk.embedded import ensure_embedded, hierarchy
from soco_pipeline.tasks.fgbmk.linear_probe import train_probe
from soco_pipeline.tasks.fgbmk.metrics import macro_recall_at_1, retrieval_map
from soco_pipeline.tasks.fgbmk.readers import FgbmkFormatError, read_machine_dataset
from soco_pipeline.tasks.fgbmk.retrieval import class_scores, train_retrieval
from soco_pipeline.trust.headline import wilson_interval

pytestmark = pytest.mark.unit

SMALL = {"learning_rates": [0.01, 0.05], "epochs": 1, "epoch_length": 30, "batch_size": 32}


def _config(**train):
    return load_config(linear_probe={**SMALL, **train}, retrieval={**SMALL, "embed_dim": 16, **train})


def _oracle_feats(labels, prefix, k, margin=1.0, noise=0.05):
    recs = pd.DataFrame({"image_id": [f"{prefix}{i}" for i in range(len(labels))], "label": labels})
    parts = VariantOracle("label", k, margin=margin, noise=noise).forward(None, recs)
    return GlobalFeatures(recs.image_id.to_numpy(), *[p.numpy() for p in parts])


def _random_feats(n, dim, seed, prefix):
    rng = np.random.default_rng(seed)
    a, b, c = (rng.normal(size=(n, dim)).astype(np.float32) for _ in range(3))
    return GlobalFeatures(np.array([f"{prefix}{i}" for i in range(n)], dtype=object), a, b, c)


def test_embedded_set_layout_labels_and_determinism(tmp_path):
    cfg = load_config(embedded={"images_per_subclass": {"train": 1, "test": 1}})
    subs = ["zebra", "horse", "taxi", "car", "chair"]
    items = ensure_embedded(str(tmp_path / "a"), cfg.embedded, seed=3, subclasses=subs, workers=1)
    assert items.simulated.all() and len(items) == 10 and set(items.split) == {"train", "test"}
    h = hierarchy()
    row = items[items.subclass == "zebra"].iloc[0]
    assert (row.superclass, row["class"]) == ("animals", "horse")
    assert (
        h.subclass_id.is_unique
        and (
            h.groupby("class").subclass_id.agg(lambda s: s.max() - s.min() + 1) == h.groupby("class").size()
        ).all()
    )  # children contiguous
    ds = read_machine_dataset(str(tmp_path / "a"))
    assert ds.classes[int(row.subclass_id)] == "zebra" and len(ds.train) == 5
    lv = read_machine_dataset(str(tmp_path / "a" / "levels" / "superclass"), image_root=str(tmp_path / "a"))
    assert set(lv.classes[i] for i in lv.test.label) == {"animals", "transportation", "furniture"}
    again = ensure_embedded(str(tmp_path / "b"), cfg.embedded, seed=3, subclasses=subs, workers=1)
    assert (tmp_path / "a" / items.path[0]).read_bytes() == (tmp_path / "b" / again.path[0]).read_bytes()
    assert items.drop(columns=["uri"]).equals(again.drop(columns=["uri"]))
    assert set(items.colour) <= {
        "red",
        "orange",
        "yellow",
        "green",
        "blue",
        "purple",
        "pink",
        "brown",
        "black",
        "white",
        "grey",
    }
    assert items[items.subclass == "zebra"].texture.eq("striped").all()


@pytest.mark.parametrize(
    "content,needle",
    [
        ("a.jpg 0\n", ":1: malformed line"),
        ("a.jpg,x\n", ":1: label 'x' is not an integer"),
        ("a.jpg,0\nb.jpg,7\n", ":2: label 7 is outside the classes"),
        ("missing.jpg,0\n", ":1: image"),
    ],
)
def test_machine_reader_rejects_bad_lines(tmp_path, content, needle):
    for name in ("a.jpg", "b.jpg"):
        (tmp_path / name).write_bytes(b"x")
    (tmp_path / "classes.txt").write_text("one\ntwo\n")
    (tmp_path / "train.csv").write_text(content)
    (tmp_path / "test.csv").write_text("a.jpg,1\n")
    with pytest.raises(FgbmkFormatError, match="train.csv" + needle):
        read_machine_dataset(str(tmp_path))


def test_machine_reader_commas_and_multilabel(tmp_path):
    (tmp_path / "x,y.jpg").write_bytes(b"x")
    (tmp_path / "train.csv").write_text("x,y.jpg,1 3\n\n")
    (tmp_path / "test.csv").write_text("x,y.jpg,2\n")
    ds = read_machine_dataset(str(tmp_path))
    assert ds.classes is None and ds.num_classes == 4
    assert ds.train.path[0] == "x,y.jpg" and ds.train.labels[0] == [1, 3] and ds.train.label[0] == -1


def test_global_cache_checksummed_and_resumable(tmp_path):
    cfg = load_config(embedded={"images_per_subclass": {"train": 1, "test": 1}})
    items = ensure_embedded(str(tmp_path / "set"), cfg.embedded, subclasses=["zebra", "taxi"], workers=1)
    items = items.assign(label=(items.subclass == "taxi").astype(int))
    ex = VariantOracle("label", 2)
    first = extract_global(ex, items.iloc[:2], str(tmp_path / "cache"), cfg.global_features)
    logs = []
    full = extract_global(ex, items, str(tmp_path / "cache"), cfg.global_features, logs.append)
    assert "2 cached" in logs[0] and "2 to extract" in logs[0]
    np.testing.assert_array_equal(full.subset(first.image_ids).cls_last, first.cls_last)
    folder = ex.cache_folder(str(tmp_path / "cache"), cfg.global_features)
    assert "/oracle_variant/" in folder and "/global_" in folder
    shard = sorted(Path(folder).glob("part-*.npy"))[0]
    data = bytearray(shard.read_bytes())
    data[-1] ^= 0xFF
    shard.write_bytes(bytes(data))
    with pytest.raises(Exception, match="corrupt"):
        read_global(folder)
    logs.clear()
    extract_global(ex, items, str(tmp_path / "cache"), cfg.global_features, logs.append)
    assert "2 to extract" in logs[0]  # only the damaged shard's images


def test_variant_oracle_scores_100_and_random_features_chance():
    cfg = _config()
    k = 10
    tr_lab, te_lab = np.repeat(np.arange(k), 6), np.repeat(np.arange(k), 4)
    probe = train_probe(
        _oracle_feats(tr_lab, "a", k), tr_lab, _oracle_feats(te_lab, "b", k), te_lab, cfg.linear_probe
    )
    assert probe.top1 == 100.0 and probe.top5 == 100.0
    ret = train_retrieval(
        _oracle_feats(tr_lab, "a", k), tr_lab, _oracle_feats(te_lab, "b", k), te_lab, cfg.retrieval
    )
    assert ret.recall_at_1 == 100.0 and ret.map == 100.0
    # random features: the probe's top-1 on 400 test rows lies within the Wilson 95% interval of chance (10%);
    # the best-of-grid pick is on the test split itself, so allow its upper bound.
    tr_lab, te_lab = np.repeat(np.arange(k), 20), np.repeat(np.arange(k), 40)
    rnd = train_probe(
        _random_feats(200, 32, 0, "a"), tr_lab, _random_feats(400, 32, 1, "b"), te_lab, cfg.linear_probe
    )
    lo, hi = wilson_interval(10.0, 400)
    assert lo - 3 <= rnd.top1 <= hi + 3, rnd.heads


def test_probe_matches_plain_sgd_reference():
    cfg = load_config(
        linear_probe={
            "learning_rates": [0.02],
            "n_last_blocks": [1],
            "avgpool": [False],
            "epochs": 1,
            "epoch_length": 12,
            "batch_size": 8,
            "optimizer": "sgd",  # the SGD path (the release's commented-out line) against a hand-written loop
        }
    )
    tr = _random_feats(24, 5, 0, "a")
    lab = np.arange(24) % 3
    res = train_probe(tr, lab, tr, lab, cfg.linear_probe, seed=4)
    # reference: same init, same batches, SGD momentum 0.9 and cosine lr written out by hand
    from soco_pipeline.tasks.fgbmk.linear_probe import batch_stream

    torch.manual_seed(4)
    w = torch.nn.Linear(5, 3).weight.data.normal_(0, 0.01).clone()
    b = torch.zeros(3)
    bw, bb = torch.zeros_like(w), torch.zeros_like(b)
    x, y = torch.from_numpy(tr.cls_last), torch.as_tensor(lab)
    stream, lr0, T = batch_stream(24, 8, 4), 0.02 * 8 / 256, 12
    for t in range(T):
        rows = next(stream)
        w.requires_grad_(True)
        b.requires_grad_(True)
        F.cross_entropy(x[rows] @ w.T + b, y[rows]).backward()
        lr = lr0 * (1 + np.cos(np.pi * t / T)) / 2
        with torch.no_grad():
            bw, bb = 0.9 * bw + w.grad if t else w.grad.clone(), 0.9 * bb + b.grad if t else b.grad.clone()
            w, b = w - lr * bw, b - lr * bb
    torch.testing.assert_close(res.grid.heads[0].weight.data, w.detach(), rtol=1e-5, atol=1e-7)


def test_lr_grid_picks_best_head_on_eval_split():
    cfg = _config(learning_rates=[0.0001, 0.05], epoch_length=40)
    k = 5
    lab = np.repeat(np.arange(k), 8)
    res = train_probe(
        _oracle_feats(lab, "a", k, noise=0.5),
        lab,
        _oracle_feats(lab, "b", k, noise=0.5),
        lab,
        cfg.linear_probe,
    )
    best = res.heads.top1.max()
    assert res.top1 == best and res.heads.set_index("name").top1[res.best] == best
    assert res.heads.top1.nunique() > 1  # the grid really differs


def test_projection_triplets_use_even_classes_only():
    cfg = _config()
    k = 7
    tr_lab = np.repeat(np.arange(k), 5)
    res = train_retrieval(
        _oracle_feats(tr_lab, "a", k), tr_lab, _oracle_feats(tr_lab, "b", k), tr_lab, cfg.retrieval
    )
    used = tr_lab[res.triplets.reshape(-1)]
    assert (used % 2 == 0).all() and set(used) == {0, 2, 4, 6}
    anchor, pos = res.triplets[..., 0], res.triplets[..., 1]
    assert (tr_lab[anchor] == tr_lab[pos]).all() and (anchor != pos).all()


def test_retrieval_map_and_recall_on_hand_example():
    # 3 queries, 4 classes; the true class ranks 1st, 3rd and 2nd -> AP 1, 1/3, 1/2
    scores = torch.tensor([[0.7, 0.1, 0.1, 0.1], [0.5, 0.3, 0.2, 0.0], [0.1, 0.6, 0.3, 0.0]])
    targets = F.one_hot(torch.tensor([0, 2, 2]), 4).float()
    assert retrieval_map(scores, targets) == pytest.approx(100 * (1 + 1 / 3 + 1 / 2) / 3)
    # multi-hot: relevant at ranks 1 and 3 -> (1/1 + 2/3) / 2
    assert retrieval_map(torch.tensor([[0.5, 0.3, 0.2]]), torch.tensor([[1.0, 0.0, 1.0]])) == pytest.approx(
        100 * 5 / 6
    )
    # recall@1 macro: predictions 0, 0, 1; class 0 recall 1, class 2 recall 0, class 1 predicted only -> 0
    assert macro_recall_at_1(scores, targets) == pytest.approx(100 * (1 + 0 + 0) / 3)


def test_class_scores_nearest_neighbour_wins():
    gallery = torch.tensor([[0.0], [1.0], [3.0]])
    targets = F.one_hot(torch.tensor([1, 0, 1]), 3).float()
    s = class_scores(torch.tensor([[0.9]]), gallery, targets, top_k=10)
    raw = torch.tensor([[-0.1, -0.9, -1e4]])  # class 0 at 1.0 (d 0.1), class 1 nearest at 0.0 (d 0.9)
    torch.testing.assert_close(s, raw.softmax(-1))


def test_leaderboard_summary_drop_and_correlation_rows():
    from soco_pipeline.analysis.reference import combine_scores
    from soco_pipeline.tasks.fgbmk.leaderboard import correlation_scores, fgbmk_leaderboard

    base = {"backbone": "b", "top5": 100.0, "recall_at_1": 50.0, "map": 60.0, "simulated": True}
    metrics = pd.DataFrame(
        [
            {**base, "scope": "across", "superclass": "all", "level": "subclass", "top1": 70.0},
            {**base, "scope": "across", "superclass": "all", "level": "class", "top1": 90.0},
            {**base, "scope": "across", "superclass": "all", "level": "superclass", "top1": 99.0},
            {**base, "scope": "within", "superclass": "animals", "level": "subclass", "top1": 80.0},
            {**base, "scope": "within", "superclass": "furniture", "level": "subclass", "top1": 76.0},
        ]
    )
    board = fgbmk_leaderboard(metrics, pd.DataFrame(), pd.DataFrame())
    row = board.iloc[0]
    assert row.kind == "backbone" and row.top1_within == 78.0 and row.top1_drop_across == 8.0
    scores = combine_scores(correlation_scores(board))
    assert set(scores.metric) >= {"top1_subclass", "top1_drop_across"} and (scores.task == "fgbmk").all()
    assert not scores.set_index("metric").higher_better["top1_drop_across"]


def test_published_layout_becomes_items_for_the_pipeline(tmp_path):
    from soco_pipeline.tasks.fgbmk.machine_eval import tasks_of
    from soco_pipeline.tasks.fgbmk.readers import items_from_dataset

    cfg = load_config(embedded={"images_per_subclass": {"train": 1, "test": 1}})
    ensure_embedded(str(tmp_path / "cub"), cfg.embedded, subclasses=["zebra", "horse", "taxi"], workers=1)
    items = items_from_dataset(read_machine_dataset(str(tmp_path / "cub")))
    assert len(items) == 6 and not items.simulated.any() and set(items.subclass) == {"zebra", "horse", "taxi"}
    assert (items.width == 224).all() and items.image_id.is_unique
    # one level of labels (the dataset's classes), as released: no duplicate class-level task
    assert tasks_of(items) == [("across", "all", "subclass")]
