"""The official SOCO-LVLM answer parser: each rule, their order, case-insensitivity, the article quirk."""

import pandas as pd
import pytest

from soco_pipeline.lvlm.parse import parse_answer, parse_answers

pytestmark = pytest.mark.unit

CASES = [
    # rule 1: the last \boxed{X} wins over everything else
    (r"A seems plausible but \boxed{C}", "C"),
    (r"\boxed{B} ... no wait, \boxed{ d }", "D"),
    (r"Final answer: A. \boxed{B}", "B"),
    # rule 2: the last "final answer (is|:) X", ahead of the standalone-letter rule
    ("Between B and C, the final answer is C.", "C"),
    ("final answer: $D", "D"),
    ("FINAL ANSWER B; C was close", "B"),
    ("Final answer is A. Hmm, final answer: B", "B"),
    ("the final answer is Cat", ""),  # no letter standing alone after it, no other rule matches
    # rule 3: exactly one distinct standalone letter
    ("C", "C"),
    ("b", "B"),
    ("(D)", "D"),
    ("I pick C because C is on the wheel.", "C"),
    ("Answer: Dog", ""),  # D inside a word is not standalone
    # rule 4a: several letters -> the last "X. Point Y" / "X: Point Y"
    ("A: Point A or B. Point B? I go with C: Point C", "C"),
    # rule 4b: then "The correct answer is X"
    ("Options A and B are close; the correct answer is B", "B"),
    # rule 4c: then a leading letter
    ("D, since A and B are on the other side", "D"),
    # rule 5: nothing
    ("I cannot tell.", ""),
    ("", ""),
    (None, ""),
    (float("nan"), ""),
]


@pytest.mark.parametrize("text,expected", CASES)
def test_parser_rules(text, expected):
    assert parse_answer(text) == expected


def test_rule_order_explicit_beats_single_letter_and_fallbacks():
    # One distinct standalone letter (A) would give A by rule 3, but rule 2 comes first.
    assert parse_answer("final answer: B") == "B"
    # rule 4a beats 4b even when 4b comes later in the text
    assert parse_answer("B: Point B. The correct answer is C") == "B"
    # rule 4b beats a leading letter
    assert parse_answer("A or C? The correct answer is C") == "C"


def test_the_article_a_counts_as_a_letter_as_in_the_official_script():
    # "a" is a standalone A (case-insensitive), so two distinct letters -> fall through to rule 4.
    assert parse_answer("It is a point near B") == ""
    assert parse_answer("B is a point on the wheel") == "B"  # rule 4c: the leading letter
    assert parse_answer("a") == "A"


def test_parse_answers_column():
    s = pd.Series(["A", None, r"\boxed{c}", "nothing"])
    assert parse_answers(s).tolist() == ["A", "", "C", ""]
