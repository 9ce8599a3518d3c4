"""The results page escapes everything (issue 38, stored XSS): markup put into every text column of every
table it renders, and into the model names, reaches the page as text; the page carries its header (date,
commit, machine, what is simulated), the summary, per family a headline table with the board folded, the
FG-BMK findings, and the correlation figure captioned with its source."""

import re

import pytest
from markupsafe import escape

from soco_pipeline.report.page import build_report
from tests.report_fixtures import write_storage

pytestmark = pytest.mark.unit

MARKUP = "<script>alert(1)</script><img src=x onerror=alert(2)>"


def test_markup_in_every_text_column_is_escaped(tmp_path):
    settings, boards = write_storage(tmp_path / "storage", MARKUP)
    page = open(build_report(settings)).read()
    assert "<script" not in page and "onerror=alert" not in page.replace(str(escape("onerror=alert")), "")
    assert "<img src=x" not in page
    escaped = str(escape(MARKUP))
    for name, df in boards.items():
        for col in df.columns:
            if df[col].dtype != object:
                continue
            for value in df[col].astype(str).unique():
                assert str(escape(value)) in page, (name, col, value)
    assert page.count(escaped) >= 20


def test_the_page_has_its_sections_and_captions(tmp_path):
    settings, _ = write_storage(tmp_path / "storage")
    page = open(build_report(settings)).read()
    for section in (
        "header",
        "summary",
        "backbones",
        "lvlm",
        "mmvm",
        "fgbmk",
        "tpips",
        "correlation",
        "panels",
    ):
        assert f'id="{section}"' in page, section
    assert re.search(r"<dt>Date</dt><dd>\d{4}-\d\d-\d\d \d\d:\d\d UTC</dd>", page)
    assert re.search(r"<dt>Commit</dt><dd>([0-9a-f]{12}|unknown)", page)
    assert "<dt>Machine</dt>" in page and "CPUs" in page
    simulated = page[page.index('id="simulated"') :].split("</p>")[0]
    assert "embedded generator" in simulated and "MMVM items (simulated: procedural" in simulated
    assert "FGBMK data" in simulated and "TPIPS triplets and votes (simulated annotators" in simulated
    # the summary: one row per model, one headline per family with its CI
    summary = page[page.index('id="summary"') : page.index('id="backbones"')]
    assert all(f"<th>{f}</th>" in summary for f in ("soco", "soco_lvlm", "fgbmk", "mmvm", "tpips"))
    # the header, the 5 backbones and the 2 evaluated LVLMs (SOCO-LVLM's headline, as model_headlines has it)
    assert summary.count("<tr>") == 1 + 5 + 2 and re.search(r"\d+\.\d \[\d+\.\d, \d+\.\d\]", summary)
    # the data source once above the MMVM table, not in every row; the board folded
    mmvm = page[page.index('id="mmvm"') :].split("</section>")[0]
    assert mmvm.count("procedural MMVM cases") == 2  # headline table's note + the folded board's note
    assert "<details><summary>Every column of the mmvm board</summary>" in mmvm
    assert "cue:matching_cue_number_0" not in mmvm.split("<details>")[0]  # headline columns only
    # FG-BMK and TPIPS say why specs differing only in input size get identical rows
    fgbmk, tpips = page[page.index('id="fgbmk"') :], page[page.index('id="tpips"') :]
    assert (
        "FG-BMK&#39;s own policy for every backbone (resize 128, centre crop 112" in fgbmk.split("<table")[0]
    )
    assert "TPIPS extracts every backbone at 64 x 64 px" in tpips.split("<table")[0]
    assert page.count("get identical rows here") == 2
    assert 'id="fgbmk-findings"' in page and "within-superclass retrieval beats across" in page
    assert "[partial: limit=2/category]" in page
    correlation = page[page.index('id="correlation"') :]
    assert "models published by OmniProbe (not this run&#39;s backbones)" in correlation
    assert "reference/omniprobe_results.csv" in correlation
    assert "nan" not in re.sub(r"<[^>]+>", " ", page).lower().split()
