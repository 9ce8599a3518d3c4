"""The published figures that are not OmniProbe's (assets/reference/published.csv), checked against a second
source: the paper texts they cite (../shared/papers/NNN_*.txt beside the project). The OmniProbe rows are
checked against omniprobe_results.csv (tests/test_published.py); the three SOCO project-page rows per LVLM
have no text here and are not checked.

- TPIPS: appendix Table 3 of paper 004, parsed cell by cell: its rows in order, (odd-one-out, 2AFC total)
  each (the total left out where the table has none), are the TPIPS rows of published.csv in file order;
- the others (SOCO, MMVM, FG-BMK): each value stands in a line of its paper that names the model (a word of
  its name, metric or note, or of another model whose figure the paper states with it), or anywhere in the
  paper where no line does; a value the note derives ("49.80 - 11.72") is that difference of two figures
  that both stand in the paper.
"""

from __future__ import annotations

import re

import pytest

from soco_pipeline.published_figures import load_published
from soco_pipeline.storage import PROJECT_ROOT
from tests.needs import need

pytestmark = pytest.mark.unit

PAPERS = PROJECT_ROOT.parent / "shared" / "papers"


def paper_lines(source: str) -> list[str]:
    """The lines of the paper a published row cites ('shared/papers/003' in its source)."""
    number = re.search(r"shared/papers/(\d{3})", source).group(1)
    (path,) = PAPERS.glob(f"{number}_*.txt")
    return path.read_text().splitlines()


def stands_in(value: float, line: str) -> bool:
    """Whether `value` is written in `line` as a number (49.8 also as 49.80; not inside 149.8 or 49.85)."""
    return re.search(r"(?<![\d.])" + re.escape(f"{value:g}") + r"0*(?![\d])", line) is not None


def cited_in_paper(
    model: str, metric: str, value: float, note: str, lines: list[str], peers: str = ""
) -> bool:
    """The rule for the SOCO, MMVM and FG-BMK rows (the module docstring)."""
    derived = re.search(r"(\d+\.\d+) - (\d+\.\d+)", note)
    if derived:
        a, b = map(float, derived.groups())
        return abs(a - b - value) < 1e-9 and all(any(stands_in(x, line) for line in lines) for x in (a, b))
    words = {w.lower() for w in re.split(r"[^A-Za-z0-9]+", f"{model} {metric} {note} {peers}") if len(w) >= 3}
    named = [line for line in lines if any(w in line.lower() for w in words)] or lines
    return any(stands_in(value, line) for line in named)


def table3_values() -> list[float]:
    """TPIPS appendix Table 3 (paper 004), row by row: odd-one-out, then the 2AFC total (none where '–')."""
    (line,) = [x for x in paper_lines("shared/papers/004") if "Odd-One-Out" in x and "Total" in x]
    cells = [c.strip() for c in line.split("|")]
    body = cells[cells.index("Total") + 1 :]
    rows = [body[k : k + 10] for k in range(0, len(body) - 9, 10)]
    return [float(r[i].split("±")[0]) for r in rows for i in (4, 9) if r[i] not in ("–", "")]


def test_the_tpips_rows_are_appendix_table_3_in_order():
    need(PAPERS.is_dir(), f"the paper texts at {PAPERS} (CI lays shared/ beside the clone)")
    pub = load_published()
    tpips = pub[(pub.family == "tpips") & pub.source.str.contains("shared/papers/004")]
    assert [float(v) for v in tpips.value] == table3_values()


def test_every_other_paper_figure_stands_in_its_paper():
    need(PAPERS.is_dir(), f"the paper texts at {PAPERS} (CI lays shared/ beside the clone)")
    pub = load_published()
    rows = pub[pub.source.str.contains(r"shared/papers/\d{3}") & (pub.family != "tpips")]
    assert len(rows) >= 20  # SOCO's, MMVM's and FG-BMK's
    peers = rows.groupby(["source", "metric"])["model"].agg(" ".join)  # the models a paper states together
    missing = [
        f"{r.model} {r.family} {r.metric} {r.setting}: {r.value} (not in {r.source})"
        for r in rows.itertuples()
        if not cited_in_paper(
            r.model, r.metric, float(r.value), r.note, paper_lines(r.source), peers[r.source, r.metric]
        )
    ]
    assert not missing, "published.csv differs from the paper it cites:\n" + "\n".join(missing)


def test_an_edited_figure_is_noticed():
    """The checks above on an edited copy: one TPIPS cell and one SOCO figure moved by 0.1."""
    need(PAPERS.is_dir(), f"the paper texts at {PAPERS} (CI lays shared/ beside the clone)")
    values = table3_values()
    assert [*values[:5], values[5] + 0.1, *values[6:]] != values
    lines = paper_lines("shared/papers/000")
    assert cited_in_paper("DINOv2-B/14", "soc", 60.4, "", lines)
    assert not cited_in_paper("DINOv2-B/14", "soc", 60.5, "", lines)
