"""Feature backbones on MMVM items: mask-pooled object descriptors, cosine argmax and a None threshold by the
item set's `NoneRule` (docs/mmvm.md, "Feature backbones")."""

from __future__ import annotations

import json
from dataclasses import dataclass

import cv2
import numpy as np
import pandas as pd

from soco_pipeline.tasks.mmvm.prompt import ITEM_KEYS, LETTERS, read_labels

PREDICTION_COLUMNS = [
    "model",
    "method",
    *ITEM_KEYS,
    "forced_letter",
    "predicted",
    "max_similarity",
    "threshold",
    "correct",
    "correct_forced",
    "none_mode",
    "none_rule",
    "status",
    "reason",
]
NOT_APPLICABLE = "not_applicable"


def coverage_weights(labels: np.ndarray, wanted: list[int], grid_h: int, grid_w: int) -> np.ndarray:
    """(len(wanted), grid_h * grid_w) share of each map cell every wanted label covers."""
    h, w = labels.shape
    side = max(h, w)
    padded = np.zeros((side, side), labels.dtype)
    padded[:h, :w] = labels
    out = np.zeros((len(wanted), grid_h * grid_w), np.float32)
    for i, lb in enumerate(wanted):  # one area resize per object (a handful per frame)
        m = (padded == lb).astype(np.float32)
        cov = cv2.resize(m, (grid_w, grid_h), interpolation=cv2.INTER_AREA).ravel()
        if cov.sum() <= 0 and m.any():
            rows, cols = np.nonzero(m)
            r = min(grid_h - 1, int(rows.mean() * grid_h / side))
            c = min(grid_w - 1, int(cols.mean() * grid_w / side))
            cov[r * grid_w + c] = 1.0
        out[i] = cov
    return out


def pool_frame(fmap: np.ndarray, labels: np.ndarray, wanted: list[int]) -> np.ndarray:
    """(len(wanted), C) L2-normalised mask-pooled descriptors from a C x h x w map."""
    c, gh, gw = fmap.shape
    weights = coverage_weights(labels, wanted, gh, gw)
    used = np.flatnonzero(weights.any(0))  # only the cells some object covers (a small share of the map)
    pooled = weights[:, used] @ fmap.reshape(c, -1)[:, used].T.astype(np.float32)
    pooled /= np.maximum(weights.sum(1, keepdims=True), 1e-12)
    return pooled / np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)


def pooled_descriptors(
    objects: pd.DataFrame, images: pd.DataFrame, store
) -> dict[tuple[str, int], np.ndarray]:
    """{(image_id, label): descriptor} of every object, from a FeatureStore of the frames' dense maps."""
    out = {}
    uris = dict(zip(images["image_id"], images["labels_uri"], strict=True))
    for image_id, objs in objects.groupby("image_id", sort=False):  # one map read per frame
        fmap, _ = store.get(image_id)
        wanted = objs["label"].astype(int).tolist()
        desc = pool_frame(fmap, read_labels(uris[image_id]), wanted)
        out.update({(image_id, lb): d for lb, d in zip(wanted, desc, strict=True)})
    return out


def oracle_descriptors(
    objects: pd.DataFrame, seed: int = 0, noise: float = 0.01
) -> dict[tuple[str, int], np.ndarray]:
    """The instance-identity oracle: a one-hot of each object's identity plus small seeded noise."""
    codes, uniq = pd.factorize(objects["identity"])
    rng = np.random.default_rng(seed)
    vec = np.eye(len(uniq), dtype=np.float32)[codes] + noise * rng.standard_normal((len(codes), len(uniq)))
    vec /= np.linalg.norm(vec, axis=1, keepdims=True)
    return {(i, int(lb)): v for i, lb, v in zip(objects["image_id"], objects["label"], vec, strict=True)}


def item_similarities(
    items: pd.DataFrame, cases: pd.DataFrame, objects: pd.DataFrame, descriptors: dict
) -> list[np.ndarray]:
    """Per item, the cosine similarity of the query to each shown candidate (in `labels` order)."""
    frames = cases.set_index("case_id")[["frame0", "frame1"]]
    q = objects[(objects["frame"] == 0) & (objects["role"] == "query")].set_index("case_id")["label"]
    out = []
    for it in items.itertuples(index=False):  # per item: a (k, C) @ (C,) product
        f0, f1 = frames.loc[it.case_id]
        qd = descriptors[(f0, int(q.loc[it.case_id]))]
        cd = np.stack([descriptors[(f1, int(lb))] for lb in json.loads(it.labels)])
        out.append(cd @ qd)
    return out


def forced_answers(items: pd.DataFrame, sims: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """(argmax letter, highest similarity) per item; the letter is that of the candidate's shown ID."""
    letters, best = [], []
    for it, s in zip(items.itertuples(index=False), sims, strict=True):
        ids, shown = json.loads(it.ids), json.loads(it.shown_ids)
        k = int(np.argmax(s))
        letters.append(LETTERS[shown.index(ids[k])] if ids[k] in shown else it.none_letter)
        best.append(float(s[k]))
    return np.array(letters, dtype=object), np.array(best)


def fit_threshold(best: np.ndarray, forced_right: np.ndarray, is_none: np.ndarray) -> float:
    """The None threshold that maximises training accuracy (answer None iff best similarity < threshold)."""
    order = np.argsort(best)
    b, fr, nn = best[order], forced_right[order].astype(int), is_none[order].astype(int)
    # threshold just above the i-th smallest: items 0..i answer None, the rest keep their forced answer
    right_none = np.concatenate([[0], np.cumsum(nn)])
    right_forced = np.concatenate([np.cumsum(fr[::-1])[::-1], [0]])
    acc = right_none + right_forced
    i = int(np.argmax(acc))  # i items answer None
    if i == 0:
        return float(b[0] - 1e-6) if len(b) else 0.0
    if i == len(b):
        return float(b[-1] + 1e-6)
    return float((b[i - 1] + b[i]) / 2)


@dataclass(frozen=True)
class NoneRule:
    """How a prediction set answers None: iff the best cosine < `threshold` (`source`: where it came from)."""

    mode: str
    threshold: float
    source: str

    def describe(self) -> str:
        """The rule in words, as the tables record it in `none_rule`."""
        if self.mode == "never":
            return f"never answers None ({self.source}): the argmax candidate is always the answer"
        return f"None iff the best cosine < {self.threshold:.4f} ({self.source})"


def resolve_none_rule(
    items: pd.DataFrame, forced: np.ndarray, best: np.ndarray, config=None, carried: NoneRule | None = None
) -> NoneRule:
    """The NoneRule of an item set: the config's fixed or never rule, else fitted, carried, or never."""
    mode = getattr(config, "mode", "fitted")
    if mode == "fixed":
        return NoneRule("fixed", float(config.threshold), "fixed in the config: none_rule.threshold")
    if mode == "never":
        return NoneRule("never", -np.inf, "the config says none_rule.mode: never")
    train = items["split"].to_numpy() == "train"
    if train.any():
        answer = items["answer"].to_numpy()
        tau = fit_threshold(
            best[train], forced[train] == answer[train], items["query_absent"].to_numpy(bool)[train]
        )
        source = (
            items["data_source"].astype(str) if "data_source" in items else pd.Series("", index=items.index)
        )
        imported = (
            source[~train].str.startswith("imported").any()
            and not source[train].str.startswith("imported").any()
        )
        if imported:  # an import beside the generated training split (mmvm source: match_bench)
            return NoneRule(
                "carried",
                tau,
                f"fitted on the generated training split ({int(train.sum())} items) for the same backbone and "
                "method, carried to the imported items",
            )
        return NoneRule("fitted", tau, f"fitted on the training split, {int(train.sum())} items")
    if carried is not None:
        return carried
    return NoneRule("never", -np.inf, "no training split and no threshold carried from generated data")


def carried_rule(reference_predictions: pd.DataFrame, method: str) -> NoneRule | None:
    """The fitted rule of one method in predictions on generated data (to carry), or None."""
    rows = reference_predictions[
        (reference_predictions["method"] == method) & (reference_predictions["none_mode"] == "fitted")
    ]
    if rows.empty:
        return None
    n_train = int((rows["split"] == "train").sum())
    return NoneRule(
        "carried",
        float(rows["threshold"].iat[0]),
        f"fitted on the generated training split ({n_train} items) for the same backbone and method, "
        "carried to these items",
    )


def predict_items(
    items: pd.DataFrame,
    cases: pd.DataFrame,
    objects: pd.DataFrame,
    descriptors: dict,
    model: str,
    method: str = "zero_shot",
    none_rule=None,
    carried: NoneRule | None = None,
) -> pd.DataFrame:
    """Predictions (PREDICTION_COLUMNS) of one descriptor source on every item (None by its NoneRule)."""
    sims = item_similarities(items, cases, objects, descriptors)
    forced, best = forced_answers(items, sims)
    answer = items["answer"].to_numpy()
    rule = resolve_none_rule(items, forced, best, none_rule, carried)
    tau = rule.threshold
    predicted = np.where(best < tau, items["none_letter"].to_numpy(), forced)
    out = items[ITEM_KEYS].copy()
    out.insert(0, "model", model)
    out.insert(1, "method", method)
    out["forced_letter"] = forced.astype(str)
    out["predicted"] = predicted.astype(str)
    out["max_similarity"] = best
    out["threshold"] = float(tau)
    out["correct"] = predicted == answer
    out["correct_forced"] = forced == answer
    out["none_mode"] = rule.mode
    out["none_rule"] = rule.describe()
    out["status"] = "ok"
    out["reason"] = ""
    return out[PREDICTION_COLUMNS]


def not_applicable(items: pd.DataFrame, model: str, reason: str) -> pd.DataFrame:
    """Rows marking a backbone as not applicable to MMVM (no scores), with the reason."""
    out = items[ITEM_KEYS].copy()
    out.insert(0, "model", model)
    out.insert(1, "method", "zero_shot")
    out = out.assign(forced_letter="", predicted="", max_similarity=np.nan, threshold=np.nan, correct=False)
    out = out.assign(correct_forced=False, none_mode="", none_rule="", status=NOT_APPLICABLE, reason=reason)
    return out[PREDICTION_COLUMNS]
