"""Typed config files (docs/config.md): the pydantic base every config model uses, and errors that name file,
field and fix, one line per problem: ``<file>: field 'input.nearest_multiple' must be > 0, got -4; ...``."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError

E = TypeVar("E", bound=Exception)

# Strict: `seed: true` or `batch_size: "4"` is a mistake, not a value to coerce; ints still fill floats.
STRICT = ConfigDict(extra="forbid", strict=True)

_TYPE_NAMES = {
    "int_type": "int",
    "int_from_float": "int",
    "float_type": "a number",
    "bool_type": "bool (true or false)",
    "string_type": "str",
    "dict_type": "a mapping",
    "model_type": "a mapping",
    "dataclass_type": "a mapping",
    "list_type": "a list",
    "tuple_type": "a list",
}
_BOUNDS = {"greater_than": ">", "greater_than_equal": ">=", "less_than": "<", "less_than_equal": "<="}


class ConfigModel(BaseModel):
    """Base of the config models: unknown fields are errors, values are checked strictly, models are frozen."""

    model_config = ConfigDict(**STRICT, frozen=True)


def field_path(loc: tuple[Any, ...]) -> str:
    """A pydantic error location as the dotted field name the user wrote (`input.nearest_multiple`)."""
    return ".".join(str(p) for p in loc)


def describe_error(err: dict[str, Any]) -> str:
    """One pydantic error as a sentence naming the field, what is wrong and the fix."""
    kind, field, value = err["type"], field_path(err["loc"]), err.get("input")
    ctx = err.get("ctx") or {}
    if kind in ("extra_forbidden", "unexpected_keyword_argument"):
        return f"unknown field(s) [{field!r}]; drop it or fix the spelling"
    if kind in ("missing", "missing_argument"):
        return f"field {field!r} is missing; add it"
    if kind == "literal_error":
        return f"field {field!r} is {value!r}; use one of {ctx.get('expected')}"
    if kind in _TYPE_NAMES:
        got = f"{value!r} ({type(value).__name__})"
        return f"field {field!r} must be {_TYPE_NAMES[kind]}, got {got}; fix the value in the file"
    if kind in _BOUNDS:
        bound = next(iter(ctx.values()), "?")
        return f"field {field!r} must be {_BOUNDS[kind]} {bound}, got {value!r}; fix the value in the file"
    if kind == "string_pattern_mismatch":
        return f"field {field!r} is {value!r}, which does not match {ctx.get('pattern')}"
    if kind in ("too_short", "too_long"):
        return f"field {field!r}: {err['msg'].lower()}"
    if kind == "value_error":  # our own validators: the message already says what to do
        msg = str(ctx.get("error", err["msg"]))
        return f"field {field!r}: {msg}" if field else msg
    return f"field {field!r}: {err['msg']} (got {value!r})"


def format_errors(
    exc: ValidationError, source: str, drop_loc: int = 0, allowed: Iterable[str] | None = None
) -> str:
    """Every problem pydantic found, one line each prefixed with the file's name; `drop_loc` leading location
    parts dropped (a discriminated union's tag), `allowed` field names shown with unknown fields."""
    errors = [{**e, "loc": e["loc"][drop_loc:]} for e in exc.errors(include_url=False)]
    # A list whose items failed is also reported as too short after validation: the item errors say it.
    inner = {e["loc"][:-1] for e in errors if e["loc"] and isinstance(e["loc"][-1], int)}
    errors = [e for e in errors if not (e["type"] == "too_short" and e["loc"] in inner)]
    unknown: dict[str, list[str]] = {}  # parent field -> unknown names, reported together
    lines = []
    for e in errors:
        if e["type"] in ("extra_forbidden", "unexpected_keyword_argument"):
            unknown.setdefault(field_path(e["loc"][:-1]), []).append(str(e["loc"][-1]))
        else:
            lines.append(describe_error(e))
    for parent, names in unknown.items():
        where = f" in {parent!r}" if parent else ""
        known = sorted(allowed) if allowed is not None and not parent else None
        hint = f"; allowed fields are {known}" if known else ""
        lines.insert(0, f"unknown field(s) {sorted(names)}{where}{hint}; drop them or fix the spelling")
    return "\n".join(f"{source}: {line}" for line in dict.fromkeys(lines))


def validate_doc(
    model: Any,
    doc: Any,
    source: str,
    error: type[E],
    what: str = "fields",
    drop_loc: int = 0,
    allowed: Iterable[str] | None = None,
) -> Any:
    """`doc` validated by a model, pydantic dataclass or TypeAdapter; `error` names file and fields."""
    if not isinstance(doc, dict):
        raise error(f"{source}: expected a mapping of {what} at the top level, got {type(doc).__name__}")
    try:
        if dataclasses.is_dataclass(model):  # a pydantic dataclass: its fields are strict, not the instance
            return model(**{str(k): v for k, v in doc.items()})
        adapter = model if isinstance(model, TypeAdapter) else TypeAdapter(model)
        return adapter.validate_python(doc)
    except ValidationError as e:
        raise error(format_errors(e, source, drop_loc, allowed)) from None


def read_yaml(path: str | Path, error: type[E], what: str = "config file") -> Any:
    """The parsed YAML of a file; a missing file or bad syntax becomes `error` naming the file."""
    path = Path(path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise error(f"{what} {path} does not exist") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise error(f"{path}: not valid YAML ({e}); fix the syntax") from None


def resolve_scale(node: Any, scale: str, scales: tuple[str, ...] = ("demo", "full")) -> Any:
    """Replace every {demo: a, full: b} mapping of a parsed document by its value at `scale`."""
    if isinstance(node, dict):
        if node and set(node) == set(scales):
            return resolve_scale(node[scale], scale, scales)
        return {k: resolve_scale(v, scale, scales) for k, v in node.items()}
    if isinstance(node, list):
        return [resolve_scale(v, scale, scales) for v in node]
    return node


def load_config_file(
    model: Any,
    path: str | Path,
    error: type[E] = ValueError,  # type: ignore[assignment]
    what: str = "config file",
    scale: str | None = None,
) -> Any:
    """The one loader of a typed config file: YAML at `path`, {demo, full} values at `scale`, then `model`."""
    doc = read_yaml(path, error, what)
    if scale is not None:
        doc = resolve_scale(doc, scale)
    fields = getattr(model, "model_fields", None)
    return validate_doc(model, doc, str(path), error, allowed=list(fields) if fields else None)
