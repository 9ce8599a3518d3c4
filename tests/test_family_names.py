"""No central module keys anything by a task family's name (issue 57): the commands that list, run, record or
score the families (`cli/run.py`, `cli/leaderboard.py`, `cli/family_record.py`, `cli/workbook.py`) and everything in
`report/`, `evaluation/` (and `trust/`) read the registry (`soco_pipeline.tasks.family_specs()`) instead.
Read with `ast`: a string (not a docstring) or a name that is a declared family's name, or starts with it
(`mmvm`, `"fgbmk_findings"`, `tpips_board`), is a hit; prose in capitals ("MMVM: match types") is not.
SOCO's name (tasks/core.py) likewise, but only as a whole string or name (`"soco"`, `soco_board`): `soco` is
also the command (`soco run`) and the package (`soco_pipeline`); trust/ stands below tasks/, so its callers
pass the family's name (`SOCO.name`, `SOCO.record_name`).
Likewise no family core (`tasks/<family>/`) compares a `kind` with a backbone kind's name or looks a table up by a
backbone spec's kind: a family asks for capabilities (backbones/kinds.py), never for a kind.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from soco_pipeline.backbones.kinds import kinds
from soco_pipeline.tasks import family_specs
from soco_pipeline.tasks.core import SOCO

pytestmark = pytest.mark.unit

PACKAGE = Path(__file__).resolve().parents[1] / "soco_pipeline"
COMMANDS = ("cli/run.py", "cli/leaderboard.py", "cli/family_record.py", "cli/workbook.py")
FOLDERS = ("report", "evaluation", "trust")


def central_files() -> list[Path]:
    """The command modules and every module of the central folders."""
    files = [PACKAGE / c for c in COMMANDS]
    assert all(p.is_file() for p in files), "a command module moved: update COMMANDS"
    return sorted(files + [p for f in FOLDERS for p in (PACKAGE / f).rglob("*.py")])


def family_name_hits(source: str, names: list[str]) -> list[tuple[int, str]]:
    """(line, text) of each string constant (docstrings left out) or name in `source` that is one of `names`
    or starts with one of them followed by `_`, as a whole word."""
    pattern = re.compile(rf"\b({'|'.join(map(re.escape, names))})(_\w+)?\b")
    tree = ast.parse(source)
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    hits = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            text = node.value
        elif isinstance(node, ast.Name | ast.arg | ast.Attribute):
            text = getattr(node, "id", None) or getattr(node, "arg", None) or node.attr
        else:
            continue
        if pattern.search(text):
            hits.append((node.lineno, text))
    return sorted(hits)


def test_no_central_module_names_a_family():
    names = sorted(family_specs())
    found = [
        f"{path.relative_to(PACKAGE.parent)}:{line}: {text[:80]!r}"
        for path in central_files()
        for line, text in family_name_hits(path.read_text(), names)
    ]
    assert not found, (
        "family names in central modules (move the knowledge into the family's FamilySpec, "
        "soco_pipeline/tasks/<family>/family.py, and read it through family_specs()):\n" + "\n".join(found)
    )


# The word, not the family: the settings resource's key, and the SQL view name that docs and users query.
NOT_THE_FAMILY = {("cli/run.py", "soco"), ("report/results_db.py", "soco_history")}


def core_name_hits(source: str, name: str) -> list[tuple[int, str]]:
    """`family_name_hits` for the core's `name` whole (or `name_...`), the package name left out."""
    whole = re.compile(rf"{name}(_\w+)?")
    return [
        (n, t) for n, t in family_name_hits(source, [name]) if whole.fullmatch(t) and t != "soco_pipeline"
    ]


def test_no_central_module_names_soco():
    found = [
        f"{path.relative_to(PACKAGE.parent)}:{line}: {text!r}"
        for path in central_files()
        for line, text in core_name_hits(path.read_text(), SOCO.name)
        if (str(path.relative_to(PACKAGE)), text) not in NOT_THE_FAMILY
    ]
    assert not found, "SOCO's name in central modules (read tasks/core.py's SOCO):\n" + "\n".join(found)
    planted = 'x = "soco run"\nif family == "soco":\n    soco_board = "soco_pipeline.cli.soco"\n'
    assert core_name_hits(planted, "soco") == [(2, "soco"), (3, "soco_board")]


def test_the_family_name_detector_finds_keys_and_names_but_not_prose():
    source = '''
"""The mmvm board (a docstring)."""
ORDER = ["lvlm", "mmvm"]
def board(fgbmk_board):
    """fgbmk here is prose."""
    return read(f"{x}/tpips_findings.parquet"), "MMVM: match types", "mmvmbench"
'''
    hits = family_name_hits(source, ["fgbmk", "mmvm", "tpips"])
    assert hits == [(3, "mmvm"), (4, "fgbmk_board"), (6, "/tpips_findings.parquet")]


def is_spec_kind(node: ast.AST) -> bool:
    """Whether `node` is a backbone spec's kind: `spec.kind` (or `<...>spec.kind`, `backbone_spec.kind`)."""
    return (
        isinstance(node, ast.Attribute)
        and node.attr == "kind"
        and isinstance(node.value, ast.Name)
        and node.value.id.endswith("spec")
    )


def kind_switches(source: str, names: list[str]) -> list[tuple[int, str]]:
    """(line, kind) of each comparison of a `kind` (a name or an attribute) with a string in `names`, and
    (line, "lookup") of each table keyed by a backbone spec's kind: `t[spec.kind]`, `t.get(spec.kind)`,
    `spec.kind in TABLE` (per-kind data is read through backbones/kinds.py `per_kind`, by capability)."""
    hits = []
    for node in ast.walk(ast.parse(source)):
        subscript = isinstance(node, ast.Subscript) and is_spec_kind(node.slice)
        get = (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "get"
            and any(map(is_spec_kind, node.args[:1]))
        )
        member = isinstance(node, ast.Compare) and any(isinstance(op, ast.In | ast.NotIn) for op in node.ops)
        if subscript or get or (member and is_spec_kind(node.left)):
            hits.append((node.lineno, "lookup"))
        if not isinstance(node, ast.Compare):
            continue
        sides = [node.left, *node.comparators]
        if not any(getattr(s, "id", getattr(s, "attr", None)) == "kind" for s in sides):
            continue
        for side in sides:
            for c in ast.walk(side):
                if isinstance(c, ast.Constant) and c.value in names:
                    hits.append((node.lineno, c.value))
    return hits


def test_no_family_core_switches_on_a_backbone_kind():
    """`spec.kind == "timm"` in a family core silently degrades a new kind: a family asks for capabilities."""
    names = kinds()
    found = [
        f"{path.relative_to(PACKAGE.parent)}:{line}: {kind!r}"
        for family in family_specs()
        for path in sorted((PACKAGE / "tasks" / family).rglob("*.py"))
        for line, kind in kind_switches(path.read_text(), names)
    ]
    assert not found, "backbone-kind switches in family cores (declare a capability):\n" + "\n".join(found)
    planted = 'if spec.kind in ("timm", "packaged"):\n    pass\nif src.kind == "official":\n    pass\n'
    assert kind_switches(planted, names) == [(1, "lookup"), (1, "timm"), (1, "packaged")]
    planted = (
        "a = cfg.layers.get(spec.kind)\nb = TABLE[backbone_spec.kind]\nc = spec.kind not in MODEL_KINDS\n"
    )
    planted += "d = {'x': 1}[self.kind]\ne = missing_capabilities(spec.kind, NEEDS)\n"
    assert kind_switches(planted, names) == [(1, "lookup"), (2, "lookup"), (3, "lookup")]
