"""The package's import rules, read from the source with `ast` (lazy imports inside functions count too):

- no module imports another module's underscore (private) names;
- no import cycle between the top-level subpackages (stages);
- the foundation modules import no stage.
"""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx
import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "soco_pipeline"
# Top-level modules every stage may import; entry points (cli, demo) sit above everything instead.
FOUNDATION = ("config", "device", "geometry", "results_db", "schemas", "settings", "storage", "tables",
              "taxonomy")


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path) -> list[tuple[str, list[str]]]:
    """(imported module, names taken from it) for every import of soco_pipeline in a file."""
    mod = module_name(path)
    package = mod if path.name == "__init__.py" else mod.rsplit(".", 1)[0]
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
            target = (base + ("." + node.module if node.module else "")) if node.level else (node.module or "")
            out.append((target, [a.name for a in node.names]))
        elif isinstance(node, ast.Import):
            out += [(a.name, []) for a in node.names]
    return [(t, names) for t, names in out if t == "soco_pipeline" or t.startswith("soco_pipeline.")]


FILES = sorted(PACKAGE.rglob("*.py"))


def test_no_module_takes_another_modules_private_names():
    found = [
        f"{module_name(p)} imports {name} from {target}"
        for p in FILES
        for target, names in imports(p)
        for name in names
        if name.startswith("_") and not name.startswith("__") and target != module_name(p)
    ]
    assert not found, "give these a public name (or merge the modules):\n" + "\n".join(found)


def stage_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


def test_no_import_cycle_between_subpackages():
    graph = nx.DiGraph()
    for p in FILES:
        src = stage_of(module_name(p))
        for target, _ in imports(p):
            dst = stage_of(target)
            if src and dst and src != dst:
                graph.add_edge(src, dst, where=module_name(p))
    cycles = list(nx.simple_cycles(graph))
    detail = [" -> ".join(c + c[:1]) + f" (e.g. {graph.edges[c[0], c[1 % len(c)]]['where']})" for c in cycles]
    assert not cycles, "import cycles between subpackages:\n" + "\n".join(detail)


@pytest.mark.parametrize("name", FOUNDATION)
def test_the_foundation_imports_no_stage(name):
    path = PACKAGE / f"{name}.py"
    assert path.is_file(), f"foundation module {name} is listed but {path} does not exist"
    stages = sorted({t for t, _ in imports(path) if stage_of(t) not in (None, *FOUNDATION)})
    assert not stages, f"{name} imports stages {stages}; the foundation must not"
