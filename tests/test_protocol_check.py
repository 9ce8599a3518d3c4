"""`--protocol P` on stored predictions (trust/protocol_check.py), on files written here: every knob that
changes the predictions is refused, scoring knobs pass, and the protocol checked against is the one the
stored record says the predictions were made under, not today's protocol file."""

from __future__ import annotations

import json
import typing

import pytest
import yaml

from soco_pipeline.evaluation.protocol import (
    DEFAULT_PROTOCOL_PATH,
    MATCHING_KNOBS,
    ProtocolConfig,
    ProtocolError,
    load_protocol,
)
from soco_pipeline.trust.protocol_check import rescoring_protocol, stored_protocol

pytestmark = pytest.mark.unit

# a valid value other than the default for every prediction knob that has one (assets/protocol.yaml)
OTHER_VALUE = {
    "keypoint_scaling": "exact",
    "prediction_point": "center",
    "upsample": True,
    "soft_argmax": True,
    "soft_argmax_window": 7,
    "soft_argmax_temperature": 0.1,
    "geo_min_candidates": 3,
    "compute_dtype": "float16",
}
ONE_VALUE = ("size_policy", "source_sampling", "four_choice_tie_break")  # a Literal of one value: no other


def protocol_file(folder, **knobs) -> str:
    """assets/protocol.yaml with `knobs` changed, written under `folder`."""
    doc = yaml.safe_load(DEFAULT_PROTOCOL_PATH.read_text()) | knobs
    path = folder / f"protocol-{len(list(folder.iterdir()))}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return str(path)


def test_the_prediction_knobs_are_the_ones_listed_here():
    """Every knob this file changes is in MATCHING_KNOBS (dropping one lets it through the check), and the
    knobs it cannot change allow one value only."""
    assert set(MATCHING_KNOBS) == set(OTHER_VALUE) | set(ONE_VALUE)
    hints = typing.get_type_hints(ProtocolConfig)
    assert all(len(typing.get_args(hints[knob])) == 1 for knob in ONE_VALUE), {k: hints[k] for k in ONE_VALUE}


@pytest.mark.parametrize("knob", sorted(OTHER_VALUE))
def test_every_prediction_knob_is_refused(knob, tmp_path):
    stored = load_protocol()
    requested = protocol_file(tmp_path, **{knob: OTHER_VALUE[knob]})
    with pytest.raises(ProtocolError) as e:
        rescoring_protocol(requested, stored, "the stored record r.json", "m")
    change = f"{knob}: {getattr(stored, knob)!r} -> {OTHER_VALUE[knob]!r} would change the predictions"
    assert change in str(e.value) and "Re-run predictions under that protocol" in str(e.value)


def test_scoring_knobs_rescore(tmp_path):
    requested = protocol_file(tmp_path, alphas=[0.05, 0.1], headline_alpha=0.05, threshold="inclusive")
    got = rescoring_protocol(requested, load_protocol(), "the stored record r.json", "m")
    assert got.headline_alpha == 0.05 and got.threshold == "inclusive"


def test_the_check_reads_the_stored_record_not_todays_file(tmp_path):
    """Predictions stored under prediction_point=center (the record says so) while today's file says
    top_left: asking for center re-scores, asking for today's top_left is refused."""
    made_under = load_protocol(protocol_file(tmp_path, prediction_point="center"))
    records = tmp_path / "storage" / "results" / "records"
    records.mkdir(parents=True)
    (records / "m.json").write_text(json.dumps({"config": {"protocol": made_under.as_dict()}}))
    today = str(DEFAULT_PROTOCOL_PATH)
    stored, source = stored_protocol(str(tmp_path / "storage"), "m", today)
    assert stored.prediction_point == "center" and "m.json" in source
    rescoring_protocol(protocol_file(tmp_path, prediction_point="center", alphas=[0.1]), stored, source, "m")
    with pytest.raises(ProtocolError, match="prediction_point: 'center' -> 'top_left'"):
        rescoring_protocol(today, stored, source, "m")
    # without a record the run's protocol file is what the predictions were made under
    fallback, source = stored_protocol(str(tmp_path / "other"), "m", today)
    assert fallback.prediction_point == "top_left" and today in source
