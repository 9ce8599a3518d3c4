"""The eight published matching cues of MMVMBench and the reference code's `match_type` parsing rules."""

from __future__ import annotations

import ast
from dataclasses import dataclass

# Code -> abbreviation, in the published order (MMVMEvalKit `report_acc_mmatch`).
CUES: dict[int, str] = {1: "CL", 2: "SP", 3: "TM", 4: "SZ", 5: "RP", 6: "OO", 7: "BR", 8: "OM"}
CUE_NAMES: dict[int, str] = {
    1: "colour",
    2: "shape/posture",
    3: "textual/logo markers",
    4: "size",
    5: "relative position",
    6: "object orientation/movement",
    7: "binding relationship",
    8: "object markers",
}
# The object attribute that carries each cue in our generator.
CUE_ATTRIBUTE: dict[int, str] = {
    1: "colour",
    2: "shape",
    3: "text",
    4: "size",
    5: "relation",
    6: "azimuth",
    7: "binding",
    8: "marker",
}
# The reference code's fallbacks (MMVMEvalKit and VLMEvalKit `report_acc_mmatch`): a match_type that does
# not evaluate to a list counts as [1, 5]; a code outside 1-8 counts as 2 (SP).
UNPARSABLE_FALLBACK = (1, 5)
UNKNOWN_CODE_FALLBACK = 2


@dataclass(frozen=True)
class ParsedMatchType:
    """The cue codes of one row and which fallback, if any, produced them ("" | "unparsable" | "unknown_code")."""

    codes: tuple[int, ...]
    fallback: str = ""


def format_match_type(codes) -> str:
    """The published text form of a cue list, e.g. "[1, 5]"."""
    return "[" + ", ".join(str(int(c)) for c in codes) + "]"


def parse_match_type(value: object, strict: bool = False, where: str = "") -> ParsedMatchType:
    """Cue codes of a `match_type` cell with the reference fallbacks, recorded in the result.

    strict=True raises a ValueError naming `where` instead of falling back (for our own files).
    The reference evaluates the cell with Python `eval`; we only accept literals (ast.literal_eval).
    """
    try:
        parsed = ast.literal_eval(str(value).strip())
        codes = [parsed] if isinstance(parsed, int) else list(parsed)
        if not codes or not all(isinstance(c, int) and not isinstance(c, bool) for c in codes):
            raise ValueError("not a list of ints")
    except (ValueError, SyntaxError, TypeError) as e:
        if strict:
            raise ValueError(
                f"{where}: match_type {value!r} is not a list of cue codes 1-8 ({e}); write it like [1, 5]"
            ) from None
        return ParsedMatchType(UNPARSABLE_FALLBACK, "unparsable")
    unknown = [c for c in codes if c not in CUES]
    if unknown:
        if strict:
            raise ValueError(
                f"{where}: match_type {value!r} holds unknown cue code(s) {unknown}; codes are 1-8"
            )
        return ParsedMatchType(
            tuple(c if c in CUES else UNKNOWN_CODE_FALLBACK for c in codes), "unknown_code"
        )
    return ParsedMatchType(tuple(codes))
