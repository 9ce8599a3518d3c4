"""Issue #38's MMVM rows, injected for real: a repeated index in MMVMBench.tsv, an unreadable answer cell and
an unparsable prediction in a workbook, frames that are not images, and a judge that is down, erroring or
answering garbage (the LVLM harness's error guards; the board counts decided and failed rows)."""

from __future__ import annotations

import base64
import socket

import numpy as np
import pandas as pd
import pytest

from soco_pipeline.lvlm.backends import Reply
from soco_pipeline.lvlm.backends.openai import OpenAIBackend
from soco_pipeline.lvlm.run import LvlmRunError
from soco_pipeline.tasks.mmvm.answers import Judge, score_predictions
from soco_pipeline.tasks.mmvm.metrics import accuracy_table
from soco_pipeline.tasks.mmvm.official import MmvmFormatError, import_vlmevalkit
from soco_pipeline.tasks.mmvm.prompt import QUESTION, build_options
from tests.lvlm_helpers import openai_spec
from tests.mmvm_release import jpeg_b64, small_mmvmbench_tsv

pytestmark = pytest.mark.unit


def test_a_clean_tsv_imports(tmp_path):
    small_mmvmbench_tsv(tmp_path / "MMVMBench.tsv")
    items = import_vlmevalkit(str(tmp_path / "MMVMBench.tsv"), str(tmp_path / "imgs"))
    assert items["answer"].tolist() == ["A", "B", "E", "C"] and items["query_absent"].tolist() == [0, 0, 1, 0]


def test_duplicate_index_is_refused_naming_both_rows(tmp_path):
    path = tmp_path / "MMVMBench.tsv"
    table = small_mmvmbench_tsv(path)
    table.loc[3, "index"] = 1  # rows 3 and 5 of the file (the header is line 1)
    table.to_csv(path, sep="\t", index=False)
    with pytest.raises(MmvmFormatError, match=r"MMVMBench.tsv: index '1' occurs on rows \[3, 5\]"):
        import_vlmevalkit(str(path), str(tmp_path / "imgs"))
    assert not (tmp_path / "imgs").exists()  # refused before any frame was written


@pytest.mark.parametrize(
    "frame",
    [
        base64.b64encode(b"this is text, not a JPEG " * 8).decode(),
        base64.b64encode(bytes(range(256)) * 2).decode(),
    ],
    ids=["base64_of_text", "random_bytes"],
)
def test_frames_that_are_not_images_are_refused_at_import(tmp_path, frame):
    path = tmp_path / "MMVMBench.tsv"
    table = small_mmvmbench_tsv(path)
    table.loc[2, "image"] = repr([jpeg_b64(9), frame])
    table.to_csv(path, sep="\t", index=False)
    with pytest.raises(MmvmFormatError, match=r"row 4 \(index 2\): frame 2: not a readable image"):
        import_vlmevalkit(str(path), str(tmp_path / "imgs"))


def _workbook(predictions, answers) -> pd.DataFrame:
    _, options, _ = build_options([2, 1, 3, 4])
    return pd.DataFrame(
        {
            "index": np.arange(len(answers)),
            "question": QUESTION + options,
            "answer": answers,
            "match_type": "[1]",
            "prediction": predictions,
        }
    )


def test_unreadable_answer_cell_is_an_error_naming_the_row():
    wb = _workbook(["A", "B", "C"], ["A", "", "C"])
    with pytest.raises(
        MmvmFormatError, match=r"wb.xlsx: row 3 \(index 1\): answer '' is not one of its options"
    ):
        score_predictions(wb, where="wb.xlsx")
    with pytest.raises(MmvmFormatError, match=r"row 4 \(index 2\): answer 'Q' "):
        score_predictions(_workbook(["A", "B", "C"], ["A", "B", "Q"]))


def test_unparsable_prediction_is_never_right():
    t = score_predictions(_workbook(["", "I cannot tell", "A or B", "E"], ["A", "B", "C", "E"]))
    assert t["correct"].tolist() == [False, False, False, True]
    assert t["parsed"].tolist() == ["", "", "", "E"]


class _Scripted:
    """A judge backend that replies by a fixed rule: an error, or garbage text (a test double, named so)."""

    max_concurrency = 1
    batch_size = 4

    def __init__(self, text: str = "", error: str = "") -> None:
        self.text, self.error, self.calls = text, error, 0

    def answer_batch(self, requests):
        self.calls += len(requests)
        return [Reply(self.text, 0.0, 1, self.error) for _ in requests]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


FREE_TEXT = ["the first one", "number two", "it is the third", "I am not sure"] * 3


@pytest.mark.parametrize("mode", ["matcher", "yes_no"])
def test_a_judge_that_is_down_stops_the_scoring(mode):
    spec = openai_spec(f"http://127.0.0.1:{_free_port()}/v1", "judge", retries=1, max_consecutive_failures=3)
    judge = Judge(OpenAIBackend(spec), mode, name="judge", max_consecutive_failures=3)
    with pytest.raises(LvlmRunError, match=r"MMVM judge judge \(" + mode + r"\): \d+ rows in a row failed"):
        score_predictions(_workbook(FREE_TEXT, ["A", "B", "C", "E"] * 3), judge)


@pytest.mark.parametrize("mode", ["matcher", "yes_no"])
def test_an_erroring_judge_breaks_the_error_rate_guard(mode):
    judge = Judge(_Scripted(error="HTTP 500"), mode, max_error_rate=0.1, max_consecutive_failures=0)
    with pytest.raises(LvlmRunError, match=r"failed on 12 of 12 rows, more than max_error_rate 0.1"):
        score_predictions(_workbook(FREE_TEXT, ["A", "B", "C", "E"] * 3), judge)


@pytest.mark.parametrize("mode", ["matcher", "yes_no"])
def test_a_judge_answering_garbage_is_counted_and_guarded(mode):
    backend = _Scripted(text="the weather is nice")
    judge = Judge(backend, mode, max_error_rate=0.1, max_consecutive_failures=0)
    with pytest.raises(LvlmRunError, match=r"failed on 12 of 12 rows"):
        score_predictions(_workbook(FREE_TEXT, ["A", "B", "C", "E"] * 3), judge)
    # under a lenient guard the rows are scored, and the board says how many the judge decided and failed on
    lenient = Judge(backend, mode, max_error_rate=1.0, max_consecutive_failures=0)
    t = score_predictions(_workbook(FREE_TEXT + ["A"], ["A", "B", "C", "E"] * 3 + ["A"]), lenient)
    board = accuracy_table(t, "wb", "lvlm")
    decided, failed = int(board["judge_decided"].iat[0]), int(board["judge_failed"].iat[0])
    assert (decided, failed) == ((0, 13) if mode == "yes_no" else (0, 12))
    assert not t["correct"].iloc[:12].any()
