"""The TPIPS JSONL readers refuse what would corrupt the scores silently (issue #38), naming the file, the line
and the fix: boolean votes, a repeated (item, aspect), an id naming two items, unknown splits and 2AFC sources,
an "overall" 2AFC line; what the published pruning removes is counted and named."""

from __future__ import annotations

import json

import pytest

from soco_pipeline.tasks.tpips.formats import TpipsFormatError, load_afc_jsonl, load_ooo_jsonl

pytestmark = pytest.mark.unit


def _ooo(tmp_path, *changes: dict) -> str:
    for name in ("a.png", "b.png", "c.png", "d.png"):
        (tmp_path / name).write_bytes(b"png")
    base = {
        "triplet_id": "t0",
        "images": ["a.png", "b.png", "c.png"],
        "aspect": "colour",
        "votes": [3, 1, 0],
        "cannot_tell": 1,
        "split": "test",
    }
    path = tmp_path / "ooo.jsonl"
    path.write_text("\n".join(json.dumps(base | c) for c in changes) + "\n")
    return str(path)


def _afc(tmp_path, *changes: dict) -> str:
    for name in ("r.png", "x.png", "y.png"):
        (tmp_path / name).write_bytes(b"png")
    base = {
        "item_id": "i0",
        "ref": "r.png",
        "x0": "x.png",
        "x1": "y.png",
        "aspect": "colour",
        "votes": [4, 1],
    }
    path = tmp_path / "afc.jsonl"
    path.write_text("\n".join(json.dumps(base | {"source": "editing"} | c) for c in changes) + "\n")
    return str(path)


@pytest.mark.parametrize(
    "lines, message",
    [
        (
            [{"votes": [True, 3, 0]}],
            r"ooo.jsonl:1: 'votes' must be 3 non-negative integers \(not true/false\)",
        ),
        (
            [{"votes": [4, 0, 0], "cannot_tell": True}],
            r"ooo.jsonl:1: 'cannot_tell' must be a non-negative integer",
        ),
        ([{}, {"votes": [4, 0, 0]}], r"ooo.jsonl:2: item 't0' is asked 'colour' again \(first on line 1\)"),
        (
            [{}, {"aspect": "pose", "images": ["a.png", "b.png", "d.png"]}],
            r"ooo.jsonl:2: item 't0' has .*line 1",
        ),
        (
            [{}, {"aspect": "pose", "split": "train"}],
            r"ooo.jsonl:2: item 't0' has .*'split': 'train'.* line 1",
        ),
        ([{"split": "dev"}], r"ooo.jsonl:1: split 'dev' is not one of \['train', 'val', 'test'\]"),
        ([{"aspect": "glossiness"}], r"ooo.jsonl:1: aspect 'glossiness' is not in the config's vocabulary"),
        ([{"triplet_id": ""}], r"ooo.jsonl:1: 'triplet_id' must be a non-empty string"),
    ],
)
def test_bad_ooo_lines_are_refused_naming_the_line(tmp_path, lines, message):
    with pytest.raises(TpipsFormatError, match=message):
        load_ooo_jsonl(_ooo(tmp_path, *lines), aspects=["colour", "pose", "overall"])


@pytest.mark.parametrize(
    "lines, message",
    [
        ([{"votes": [False, 5]}], r"afc.jsonl:1: 'votes' must be 2 non-negative integers"),
        ([{}, {"votes": [1, 4]}], r"afc.jsonl:2: item 'i0' is asked 'colour' again \(first on line 1\)"),
        (
            [{}, {"aspect": "pose", "source": "novel_view"}],
            r"afc.jsonl:2: item 'i0' has .*novel_view.* line 1",
        ),
        (
            [{"source": "dreambooth"}],
            r"afc.jsonl:1: source 'dreambooth' is not one of \['editing', 'novel_view'\]",
        ),
        (
            [{"aspect": "overall"}],
            r"afc.jsonl:1: 2AFC aspect 'overall': the paper's 2AFC has no overall aspect",
        ),
    ],
)
def test_bad_afc_lines_are_refused_naming_the_line(tmp_path, lines, message):
    with pytest.raises(TpipsFormatError, match=message):
        load_afc_jsonl(_afc(tmp_path, *lines), sources=["editing", "novel_view"])


def test_pruned_lines_are_counted_and_named(tmp_path):
    ooo, summary = load_ooo_jsonl(
        _ooo(tmp_path, {}, {"aspect": "pose", "votes": [1, 1, 0], "cannot_tell": 3}, {"aspect": "size"}),
        judgements="human",
    )
    assert len(ooo) == 2 and (ooo.judgements == "human").all() and ooo.image_0.tolist() == ["a.png"] * 2
    assert summary["lines"] == 3 and summary["kept"] == 2 and summary["pruned_cannot_tell"] == 1
    assert summary["pruned_lines"] == [f"{tmp_path}/ooo.jsonl:2"]
    afc, summary = load_afc_jsonl(
        _afc(tmp_path, {}, {"aspect": "pose", "votes": [2, 2], "cannot_tell": 1}, {"aspect": "size"})
    )
    assert (
        len(afc) == 2
        and summary["pruned_ties"] == 1
        and summary["pruned_lines"] == [f"{tmp_path}/afc.jsonl:2"]
    )
