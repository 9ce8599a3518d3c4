"""The official SOCO-LVLM answer parser (the rules and their order of `evaluate_soco_c.py`).

Case-insensitive; the first rule that yields a letter wins:

1. the last ``\\boxed{X}``;
2. the last ``final answer (is|:) X`` (both words optional after "answer", a ``$`` allowed);
3. when exactly one distinct standalone letter A-D occurs in the text, that letter;
4. otherwise the last ``X. Point Y`` / ``X: Point Y``, then the last ``The correct answer is X``, then a
   letter at the very start of the text;
5. otherwise "" (counted as wrong).

Quirk kept on purpose: matching is case-insensitive, so the English article "a" is a standalone
letter A for rule 3 ("a point ... B" has two distinct letters and falls through to rule 4).
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

LETTERS = "ABCD"
_X = "([A-D])"
_NOT_ALNUM_AFTER = "(?![A-Za-z0-9])"
_FLAGS = re.IGNORECASE

_EXPLICIT = (
    re.compile(r"\\boxed\s*\{\s*" + _X + r"\s*\}", _FLAGS),
    re.compile(r"final\s+answer\s*(?:is|:)?\s*\$?\s*" + _X + _NOT_ALNUM_AFTER, _FLAGS),
)
_STANDALONE = re.compile(r"(?<![A-Za-z0-9])" + _X + _NOT_ALNUM_AFTER, _FLAGS)
_FALLBACK = (
    re.compile(_X + r"\s*[:.]\s*Point\s*[A-D]", _FLAGS),
    re.compile(r"The\s+correct\s+answer\s+is\s*" + _X, _FLAGS),
    re.compile(r"^\s*" + _X + _NOT_ALNUM_AFTER, _FLAGS),  # `^` without MULTILINE: the text's start only
)


def parse_answer(text: object) -> str:
    """The letter A-D a model's answer text gives by the official rules, or "" when none does."""
    s = "" if text is None or (isinstance(text, float) and np.isnan(text)) else str(text)
    for pattern in _EXPLICIT:
        found = pattern.findall(s)
        if found:
            return found[-1].upper()
    distinct = dict.fromkeys(m.upper() for m in _STANDALONE.findall(s))
    if len(distinct) == 1:
        return next(iter(distinct))
    for pattern in _FALLBACK:
        found = pattern.findall(s)
        if found:
            return found[-1].upper()
    return ""


def parse_answers(texts: pd.Series) -> pd.Series:
    """parse_answer over a column of answer texts (NaN/None give "")."""
    # Regexes over free text: one call per distinct string is the vectorised form here.
    uniq = pd.unique(texts.astype(object).where(texts.notna(), ""))
    table = {u: parse_answer(u) for u in uniq}
    return texts.astype(object).where(texts.notna(), "").map(table).astype(str)
