"""The eight published matching cues of MMVMBench and the reference code's `match_type` parsing rules."""

from __future__ import annotations

import ast
from dataclasses import dataclass

# Code -> abbreviation, in the published order (MMVMEvalKit `report_acc_mmatch`).
CUES: dict[int, str] = {1: "CL", 2: "SP", 3: "TM", 4: "SZ", 5: "RP", 6: "OO", 7: "BR", 8: "OM"}
# The object attribute that carries each cue in our generator (CL colour, SP shape, ... OM marker).
ATTRIBUTES = ("colour", "shape", "text", "size", "relation", "azimuth", "binding", "marker")
CUE_ATTRIBUTE = dict(zip(CUES, ATTRIBUTES, strict=True))
# The reference code's parsing (MMVMEvalKit 34ecca2 `report_acc_mmatch`, VLMEvalKit e8e78f0
# `MMVMBench.report_acc_mmatch`, the same lines): `eval` the cell; when that raises, [1, 5]; then each element
# that is not one of the eight codes (by ==, so 1.0 and True count as 1) counts as 2 (SP). So "[]" counts in no
# cue, "['1']" in SP, "'15'" (a string: its characters) in SP twice, "[1, 1]" in CL twice.
UNPARSABLE_FALLBACK = (1, 5)
UNKNOWN_CODE_FALLBACK = 2


@dataclass(frozen=True)
class ParsedMatchType:
    """The cue codes of one row, in the reference's multiplicity, and the fallback that produced them."""

    codes: tuple[int, ...]
    fallback: str = ""


def format_match_type(codes) -> str:
    """The published text form of a cue list, e.g. "[1, 5]"."""
    return "[" + ", ".join(str(int(c)) for c in codes) + "]"


def _code(element: object) -> int | None:
    """The cue code an element counts in by the reference's `mt not in match_type_hit.keys()` test."""
    try:
        return next((c for c in CUES if element == c), None)
    except (TypeError, ValueError):  # an element that cannot be compared
        return None


def parse_match_type(value: object, strict: bool = False, where: str = "") -> ParsedMatchType:
    """Cue codes of a `match_type` cell as the reference parses them, with the fallback recorded; strict=True
    raises a ValueError naming `where` instead."""
    text = value if isinstance(value, str) else None  # NaN / None cells: eval raises -> [1, 5]
    parsed: object = None
    ok = False
    if text is not None:
        try:
            parsed = ast.literal_eval(text.strip())
            ok = parsed is not None
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            ok = False
    if strict:
        codes = [parsed] if isinstance(parsed, int) and not isinstance(parsed, bool) else parsed
        if not ok or not isinstance(codes, (list, tuple)) or not codes:
            raise ValueError(
                f"{where}: match_type {value!r} is not a list of cue codes 1-8; write it like [1, 5]"
            )
        unknown = [c for c in codes if not (isinstance(c, int) and c in CUES)]
        if unknown:
            raise ValueError(
                f"{where}: match_type {value!r} holds unknown cue code(s) {unknown}; codes are 1-8"
            )
        return ParsedMatchType(tuple(int(c) for c in codes))
    if not ok:
        return ParsedMatchType(UNPARSABLE_FALLBACK, "unparsable")
    if isinstance(parsed, (int, float, complex)):
        code = _code(parsed)
        return ParsedMatchType((UNKNOWN_CODE_FALLBACK if code is None else code,), "scalar")
    elements = list(parsed)  # str: its characters; dict: its keys (as the reference's loop iterates)
    if not elements:
        return ParsedMatchType((), "no_cue")
    codes = [_code(e) for e in elements]
    exact = all(c is not None and type(e) is int for c, e in zip(codes, elements, strict=True))
    fallback = "" if exact else "unknown_code"
    return ParsedMatchType(tuple(UNKNOWN_CODE_FALLBACK if c is None else c for c in codes), fallback)
