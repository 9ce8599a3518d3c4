"""Why our number differs from the published one: the gap measured knob by knob in KNOB_ORDER (a prediction
knob re-runs a variant spec, a scoring knob re-scores); the steps add up to aligned minus ours."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

import pandas as pd

from soco_pipeline.backbones.spec import BackboneSpec, InputPolicy, spec_hash
from soco_pipeline.evaluation.metrics import compute_metrics
from soco_pipeline.evaluation.protocol import ProtocolConfig
from soco_pipeline.taxonomy import Taxonomy
from soco_pipeline.trust.published import KNOBS, closest_published

# the order the knobs are aligned in: prediction knobs first (re-runs), then scoring knobs (re-scoring)
KNOB_ORDER = ("input_size", "layer", "alpha")
KIND = {"input_size": "prediction", "layer": "prediction", "alpha": "scoring"}
LABEL = {"input_size": "input", "layer": "layer", "alpha": "alpha"}
FOLDED = {"grid": "input_size"}  # the grid is set by the input policy: aligned with the input size
HEADLINE_METRIC = "soc"
GAP_COLUMNS = (
    "model reference family metric step knob kind ours_setting published_setting before after effect "
    "ours aligned published reason sentence"
).split()
STEP_COLUMNS = "step knob kind ours_setting published_setting before after effect reason".split()

Predict = Callable[[BackboneSpec], pd.DataFrame]  # the predictions of a spec (variant) on the evaluated pairs
Score = Callable[[pd.DataFrame, float], dict[str, float]]  # predictions, alpha -> {metric: value 0-100}


class GapError(ValueError):
    """A knob value the gap cannot align (its message names the knob, the value and the fix)."""


@dataclass(frozen=True)
class Knob:
    """One differing knob: its name, our value and the published one (the published table's vocabulary)."""

    name: str
    ours: str
    published: str

    @property
    def kind(self) -> str:
        """prediction (re-run) or scoring (re-scored)."""
        return KIND[self.name]


def knob_steps(ours: dict[str, str], published: pd.Series) -> tuple[list[Knob], list[str]]:
    """The differing knobs the pipeline aligns, in KNOB_ORDER, and the names of those it does not reach."""
    steps, unreached = [], []
    for knob in KNOBS:
        theirs, mine = str(published.get(knob, "") or ""), str(ours.get(knob, "") or "")
        if not theirs or not mine or theirs == mine:
            continue
        name = FOLDED.get(knob, knob)
        if name in KIND:
            if name not in {s.name for s in steps}:
                steps.append(Knob(name, str(ours[name]), str(published[name])))
        else:
            unreached.append(knob)
    steps.sort(key=lambda k: KNOB_ORDER.index(k.name))
    return steps, unreached


def _policy(value: str) -> tuple[str, int]:
    policy, _, number = value.partition(":")
    if policy not in ("nearest_multiple", "fixed_grid") or not number.isdigit():
        raise GapError(
            f"input_size {value!r}: expected nearest_multiple:<px> or fixed_grid:<cells> "
            "(assets/reference/published.csv's input_size column)"
        )
    return policy, int(number)


def aligned_spec(spec: BackboneSpec, knob: Knob) -> BackboneSpec:
    """`spec` with one prediction knob at the published value: a variant with its own spec hash."""
    if knob.name == "input_size":
        policy, value = _policy(knob.published)
        return dataclasses.replace(spec, input=InputPolicy(policy, value, spec.input.resize))
    if knob.name == "layer":
        layer = -1 if knob.published == "last" else int(knob.published)
        if not any(k == "layer" for k, _ in spec.options):
            raise GapError(
                f"spec {spec.name!r} ({spec.kind}) has no `layer` option to align with the published one"
            )
        options = tuple((k, layer if k == "layer" else v) for k, v in spec.options)
        return dataclasses.replace(spec, options=options)
    raise GapError(f"knob {knob.name!r} is not a prediction knob; it is re-scored")


def reachable(spec: BackboneSpec, knob: Knob) -> bool:
    """Whether `knob` can be aligned for `spec` (a layer only where the kind takes a block index)."""
    if knob.name != "layer":
        return True
    layer = dict(spec.options).get("layer")
    return isinstance(layer, int) and not isinstance(layer, bool)


def short_value(knob: str, value: str) -> str:
    """A knob value as the sentence shows it: `nearest_multiple:800` -> 800, `fixed_grid:60` -> 60 cells."""
    if knob == "input_size" and ":" in value:
        policy, number = value.split(":", 1)
        return number if policy == "nearest_multiple" else f"{number} cells"
    return value


def unreached_reason(spec: BackboneSpec, simulated: bool, unreached: list[str]) -> str:
    """Why the rest of the gap is unexplained: what differs that the pipeline cannot align."""
    reasons = []
    if spec.kind == "oracle":
        reasons.append("weights differ: an oracle, not the published model")
    elif spec.weights == "none":
        reasons.append("weights differ: random init")
    else:
        reasons.append("weights may differ")
    reasons.append("data differ: simulated set" if simulated else "data may differ")
    reasons += [f"{k} not re-run" for k in unreached]
    return "; ".join(reasons)


def measure_gap(
    spec: BackboneSpec,
    ours_knobs: dict[str, str],
    published: pd.DataFrame,
    predictions: pd.DataFrame,
    predict: Predict,
    score: Score,
    simulated: bool,
    family: str,
) -> pd.DataFrame:
    """GAP_COLUMNS rows of one model: per differing knob in KNOB_ORDER, then an `unexplained` row."""
    if not spec.reference:
        return pd.DataFrame(columns=GAP_COLUMNS)
    runs: dict[str, pd.DataFrame] = {spec_hash(spec): predictions}  # by variant key: each runs once
    scores: dict[tuple[str, float], dict[str, float]] = {}

    def value(s: BackboneSpec, alpha: float, metric: str) -> float:
        key = spec_hash(s)
        if key not in runs:
            runs[key] = predict(s)
        if (key, alpha) not in scores:
            scores[(key, alpha)] = score(runs[key], alpha)
        return scores[(key, alpha)].get(metric, float("nan"))

    rows = []
    our_alpha = float(ours_knobs["alpha"])
    theirs = published[(published["model"] == spec.reference) & (published["family"] == family)]
    for metric in dict.fromkeys(theirs["metric"]):
        row = closest_published(ours_knobs, theirs[theirs["metric"] == metric])
        current, alpha = spec, our_alpha
        ours = value(current, alpha, metric)
        if row is None or pd.isna(ours):
            continue
        steps, unreached = knob_steps(ours_knobs, row)
        unreached += [k.name for k in steps if not reachable(spec, k)]
        steps = [k for k in steps if reachable(spec, k)]
        base = {
            "model": spec.name,
            "reference": spec.reference,
            "family": family,
            "metric": metric,
            "ours": ours,
            "published": float(row["value"]),
        }
        before, out = ours, []
        for i, knob in enumerate(steps, 1):
            if knob.kind == "prediction":
                current = aligned_spec(current, knob)
            else:
                alpha = float(knob.published)
            after = value(current, alpha, metric)
            out.append(base | _step(i, knob.name, knob.kind, knob.ours, knob.published, before, after))
            before = after
        why = unreached_reason(spec, simulated, unreached)
        rest = ("unexplained", "unexplained", "", str(row["setting"]), before, float(row["value"]), why)
        out.append(base | _step(len(steps) + 1, *rest))
        rows += [r | {"aligned": before} for r in out]
    table = pd.DataFrame(rows, columns=GAP_COLUMNS)
    table["sentence"] = gap_sentence(table)
    return table


def _step(i: int, knob, kind, ours_setting, published_setting, before: float, after: float, reason=""):
    """One GAP_COLUMNS step row's own columns (the model's come from the caller)."""
    cells = (i, knob, kind, ours_setting, published_setting, before, after, after - before, reason)
    return dict(zip(STEP_COLUMNS, cells, strict=True))


def gap_sentence(rows: pd.DataFrame, metric: str = HEADLINE_METRIC) -> str:
    """One sentence of a model's gap on `metric` ('input 480 → 800: +6.1; ... unexplained −3.1')."""
    mine = rows[rows["metric"] == metric].sort_values("step")
    parts = []
    for r in mine.itertuples(index=False):
        effect = f"{r.effect:+.1f}".replace("-", "\u2212")
        if r.knob == "unexplained":
            parts.append(f"unexplained {effect} ({r.reason})")
        else:
            label = LABEL[r.knob]
            parts.append(
                f"{label} {short_value(r.knob, r.ours_setting)} \u2192 "
                f"{short_value(r.knob, r.published_setting)}: {effect}"
            )
    return "; ".join(parts)


def headline_values(metrics: pd.DataFrame, alpha: float) -> dict[str, float]:
    """{metric: value} of a metrics table (compute_metrics) at `alpha`: scope all, official reduction."""
    at = metrics[
        (metrics["scope"] == "all")
        & (metrics["reduction"] == "official")
        & ((metrics["alpha"] - alpha).abs() < 1e-9)
    ]
    return {str(m): float(v) for m, v in zip(at["metric"], at["value"], strict=True)}


@dataclass(frozen=True)
class GapInputs:
    """What a variant run and a re-scoring reuse: data and pair tables, taxonomy, protocol, cache."""

    image_set: pd.DataFrame
    image_pairs: pd.DataFrame
    correspondences: pd.DataFrame
    keypoints: pd.DataFrame
    taxonomy: Taxonomy
    protocol: ProtocolConfig
    features_root: str
    backbone_context: dict
    device: str = "cpu"
    log: Callable[[str], None] | None = None

    def predict(self, spec: BackboneSpec) -> pd.DataFrame:
        """A variant spec's predictions: features through its own cache folder, then the matching."""
        from soco_pipeline.evaluation.matching import predict
        from soco_pipeline.features import FeatureStore, extract_features

        manifest = extract_features(
            spec, self.image_set, self.features_root, context=self.backbone_context, log=self.log
        )
        store = FeatureStore.from_manifest(self.features_root, manifest)
        args = (self.image_pairs, self.correspondences, self.keypoints, self.image_set, store)
        return predict(*args, self.protocol, spec.name, device=self.device)

    def score(self, predictions: pd.DataFrame, alpha: float) -> dict[str, float]:
        """{metric: value} of `predictions` re-scored at `alpha` (official reduction, all categories)."""
        tables = (predictions, None, self.correspondences, self.keypoints, self.image_set, self.image_pairs)
        table = compute_metrics(*tables, self.taxonomy, self.protocol, alphas=(alpha,))
        return headline_values(table, alpha)


def with_gap_notes(board: pd.DataFrame, gaps: pd.DataFrame) -> pd.DataFrame:
    """The SOCO board with `gap_note`: each referencing model's gap sentence, empty elsewhere."""
    name = "model" if "model" in board.columns else "backbone"
    notes = (
        gaps.drop_duplicates("model").set_index("model")["sentence"]
        if len(gaps) and "sentence" in gaps.columns
        else pd.Series(dtype=str)
    )
    return board.assign(gap_note=board[name].map(notes).fillna("").astype(str))
