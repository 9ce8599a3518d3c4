"""`soco score-workbook mmvm FILE --judge yes_no --judge-spec SPEC` end to end: the judge is an LVLM spec of
an OpenAI-compatible server (the loopback server of the demo machinery, answering with the parity fixture's
deterministic judge); the printed accuracy equals VLMEvalKit's on the fixture, and a rerun asks the judge
nothing (its replies are cached)."""

import io

import pandas as pd
import pytest
import yaml

from soco_pipeline.cli.soco import main
from soco_pipeline.lvlm.server import serve
from tests.mmvm_parity_judge import judge_reply
from tests.test_mmvm_parity import DATA, EXPECTED

pytestmark = pytest.mark.pipeline


def test_score_workbook_with_the_yes_no_judge_of_a_spec(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("SOCO_STORAGE", str(tmp_path / "storage"))
    asked = []

    def judge(request, body):
        asked.append(request.text)
        return judge_reply(request.text)

    with serve(judge) as srv:
        spec = tmp_path / "judge.yaml"
        spec.write_text(
            yaml.safe_dump({"backend": "openai", "model": "j", "base_url": srv.base_url, "retries": 1})
        )
        argv = [
            "score-workbook",
            "mmvm",
            str(DATA / "workbook.xlsx"),
            "--judge",
            "yes_no",
            "--judge-spec",
            str(spec),
        ]
        assert main([*argv, "--format", "csv"]) == 0
        first = len(asked)
        assert main(argv) == 0
    out = capsys.readouterr().out
    table = pd.read_csv(io.StringIO(out.split("\n" + str(DATA))[0]))
    overall = table[table["breakdown"] == "overall"].iloc[0]
    assert overall["accuracy"] == pytest.approx(100 * EXPECTED["vlmevalkit_yes_no"]["acc"]["Overall"])
    assert "judge yes_no: 30 decided, 3 failed" in out
    assert first == len(set(asked)) and len(asked) == first  # identical prompts asked once; the rerun: cached
