"""The package's import rules, read from the source with `ast` (lazy imports inside functions count too):

- no module imports another module's underscore (private) names, nor a module or test a private `dagster._*` one;
- no import cycle between the top-level subpackages (stages), nor between modules (imports inside functions
  count; those under `if TYPE_CHECKING:` do not run and do not);
- the foundation modules import no stage;
- defs/ does no file I/O, and its group folders import one another only through defs/shared/;
- no module but settings.py touches the process environment (`os.environ`, `os.getenv`, `os.putenv`).
"""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx
import pytest

pytestmark = pytest.mark.unit

PACKAGE = Path(__file__).resolve().parents[1] / "soco_pipeline"
# Top-level modules every stage may import; entry points (cli, demo) sit above everything instead.
FOUNDATION = (
    "config",
    "schemas",
    "settings",
    "storage",
    "tables",
    "taxonomy",
)


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def type_checking_nodes(tree: ast.AST) -> set[int]:
    """The ids of the import nodes under an `if TYPE_CHECKING:` block (annotations only: never run)."""
    guarded = [n for n in ast.walk(tree) if isinstance(n, ast.If) and "TYPE_CHECKING" in ast.unparse(n.test)]
    return {id(sub) for n in guarded for stmt in n.body for sub in ast.walk(stmt)}


def imports(path: Path, run_time: bool = False) -> list[tuple[str, list[str]]]:
    """(imported module, names taken from it) for every import of soco_pipeline in a file (`run_time`: but
    those under `if TYPE_CHECKING:`)."""
    mod = module_name(path)
    package = mod if path.name == "__init__.py" else mod.rsplit(".", 1)[0]
    out = []
    tree = ast.parse(path.read_text())
    skip = type_checking_nodes(tree) if run_time else set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.ImportFrom):
            base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
            target = (
                (base + ("." + node.module if node.module else "")) if node.level else (node.module or "")
            )
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


def private_dagster_imports(path: Path) -> list[str]:
    """The `dagster._*` modules a file imports (anywhere in it, functions included)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        names = [node.module or ""] if isinstance(node, ast.ImportFrom) else []
        names += [a.name for a in node.names] if isinstance(node, ast.Import) else []
        found += [n for n in names if n.startswith("dagster._")]
    return found


def test_no_module_imports_a_private_dagster_module(tmp_path):
    """The brief: never import a private `dagster._*` module (they change without notice between releases);
    the detector is shown to find a lazy one."""
    planted = tmp_path / "planted.py"
    planted.write_text("def f():\n    from dagster._core.definitions import data_version\n")
    assert private_dagster_imports(planted) == ["dagster._core.definitions"]
    tests = sorted(Path(__file__).parent.rglob("*.py"))  # the tests too: they break with the same releases
    found = [
        f"{p.relative_to(PACKAGE.parent)}: {m}" for p in FILES + tests for m in private_dagster_imports(p)
    ]
    assert not found, "use Dagster's public API instead:\n" + "\n".join(found)


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


MODULES = {module_name(p): p for p in FILES}


def module_graph() -> nx.DiGraph:
    """Module -> module it imports at run time (at the top or inside a function): `from pkg import mod` is an
    edge to the module `pkg.mod`, any other name an edge to the module (or package `__init__`) that holds it."""
    graph = nx.DiGraph()
    for mod, path in MODULES.items():
        for target, names in imports(path, run_time=True):
            for dst in [f"{target}.{n}" for n in names if f"{target}.{n}" in MODULES] or [target]:
                while dst not in MODULES and "." in dst:
                    dst = dst.rsplit(".", 1)[0]
                if dst != mod:
                    graph.add_edge(mod, dst)
    return graph


def test_no_import_cycle_between_modules_function_level_imports_included():
    cycles = sorted(" -> ".join([*c, c[0]]) for c in nx.simple_cycles(module_graph()))
    assert not cycles, (
        "module import cycles (each is one concept split over two files: join them, or move the shared part "
        "down into a module both import):\n" + "\n".join(cycles)
    )


def test_the_module_cycle_detector_finds_a_function_level_cycle(tmp_path):
    graph = module_graph()
    assert graph.has_edge("soco_pipeline.cli.family_record", "soco_pipeline.tasks")  # a function-level import
    graph.add_edge("soco_pipeline.tasks", "soco_pipeline.cli.family_record")
    assert list(nx.simple_cycles(graph))


@pytest.mark.parametrize("name", FOUNDATION)
def test_the_foundation_imports_no_stage(name):
    path = PACKAGE / f"{name}.py"
    assert path.is_file(), f"foundation module {name} is listed but {path} does not exist"
    stages = sorted({t for t, _ in imports(path) if stage_of(t) not in (None, *FOUNDATION)})
    assert not stages, f"{name} imports stages {stages}; the foundation must not"


# --- defs/ is declarations only: the IO manager (defs/shared/io_manager.py) does the tables' I/O, the domain
# cores write every other artefact into a folder the settings resource names. ---------------------------------
DEFS = PACKAGE / "defs"
IO_MANAGER = DEFS / "shared" / "io_manager.py"
# Method names that read or write files (pandas, pathlib, PIL, matplotlib, fsspec, numpy/torch).
IO_METHODS = {
    "to_parquet",
    "to_csv",
    "to_pickle",
    "to_feather",
    "to_excel",
    "write_text",
    "write_bytes",
    "read_text",
    "read_bytes",
    "open",
    "mkdir",
    "makedirs",
    "unlink",
    "rmdir",
    "remove",
    "rename",
    "replace_file",
    "touch",
    "exists",
    "is_file",
    "is_dir",
    "iterdir",
    "glob",
    "rglob",
    "listdir",
    "walk",
    "savefig",
    "save",
    "dump",
    "load",
    "read_parquet",
    "read_csv",
    "copy",
    "copyfile",
    "copytree",
    "rmtree",
}
# Modules whose import in defs/ means file work; and the only names defs/ may take from soco_pipeline.storage.
IO_MODULES = {"fsspec", "upath", "shutil", "glob", "pickle", "os.path", "pathlib", "duckdb"}
# no I/O in these: names, or a transform of a table in memory
STORAGE_NAMES_ALLOWED = {"is_remote", "pid_alive", "PROJECT_ROOT", "relativize_paths"}
IO_RECEIVERS = {"storage", "fs", "shutil", "fsspec"}  # storage.write_bytes_atomic(...), shutil.move(...)


def file_io_calls(source: str) -> list[str]:
    """Every file-I/O construct in `source`, as 'line N: what' (empty: none)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        where = f"line {getattr(node, 'lineno', '?')}"
        if isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Name) and func.id in {"open", "join", "Path", "UPath"}:
                found.append(f"{where}: {func.id}(...)")
            elif isinstance(func, ast.Attribute):
                receiver = func.value
                if func.attr == "join" and not (
                    isinstance(receiver, ast.Constant) and isinstance(receiver.value, str)
                ):
                    found.append(
                        f"{where}: {ast.unparse(func)}(...) (a path join)"
                    )  # "sep".join(...) is text
                elif func.attr in IO_METHODS and not (isinstance(receiver, ast.Name) and receiver.id == "dg"):
                    found.append(f"{where}: {ast.unparse(func)}(...)")
                elif isinstance(receiver, ast.Name) and receiver.id in IO_RECEIVERS:
                    found.append(f"{where}: {ast.unparse(func)}(...)")
        elif isinstance(node, ast.Import):
            found += [
                f"{where}: import {a.name}"
                for a in node.names
                if a.name in IO_MODULES or a.name == "soco_pipeline.storage"
            ]
        elif isinstance(node, ast.ImportFrom) and node.module:
            if node.module in IO_MODULES or node.module.split(".")[0] in IO_MODULES:
                found.append(f"{where}: from {node.module} import ...")
            elif node.module == "soco_pipeline.storage":
                found += [
                    f"{where}: from soco_pipeline.storage import {a.name}"
                    for a in node.names
                    if a.name not in STORAGE_NAMES_ALLOWED
                ]
            elif node.module == "soco_pipeline" and any(a.name == "storage" for a in node.names):
                found.append(f"{where}: from soco_pipeline import storage")
            elif node.module == "os" and any(a.name == "path" for a in node.names):
                found.append(f"{where}: from os import path")
    return found


def test_the_file_io_detector_finds_what_it_must():
    sample = """
import shutil
from pathlib import Path
from soco_pipeline import storage
from soco_pipeline.storage import is_remote, join, write_bytes_atomic
open("x")
df.to_parquet(p)
storage.write_bytes_atomic(join(root, "a"), b"")
os.path.join(root, "b")
Path(root).write_text("t")
json.dump(obj, fh)
label = ", ".join(names) + "\\n".join(more)
dg.MetadataValue.path(p)
"""
    found = file_io_calls(sample)
    for what in (
        "import shutil",
        "from pathlib import ...",
        "from soco_pipeline import storage",
        "import join",
        "import write_bytes_atomic",
        "open(...)",
        "df.to_parquet(...)",
        "storage.write_bytes_atomic(...)",
        "join(...)",
        "os.path.join(...) (a path join)",
        "Path(...)",
        "Path(root).write_text(...)",
        "json.dump(...)",
    ):
        assert any(f.endswith(what) for f in found), (what, found)
    assert not any("is_remote" in f or '", ".join' in f or "MetadataValue" in f for f in found), found


@pytest.mark.parametrize(
    "path", sorted(p for p in DEFS.rglob("*.py") if p != IO_MANAGER), ids=lambda p: str(p.relative_to(DEFS))
)
def test_defs_does_no_file_io(path):
    found = file_io_calls(path.read_text())
    assert not found, (
        f"{path.relative_to(PACKAGE.parent)} does file I/O; the Dagster layer is declarations only: return the "
        f"table (the IO manager writes it) or call a domain-core function with a folder from the settings "
        f"resource:\n" + "\n".join(found)
    )


# --- group folders of defs/ import one another only through defs/shared/ ------------------------------------
def group_of(module: str) -> str | None:
    """The defs/ group folder a module belongs to (None outside a group folder, e.g. defs/definitions.py)."""
    parts = module.split(".")
    if len(parts) > 3 and parts[:2] == ["soco_pipeline", "defs"]:
        return parts[2]
    if len(parts) == 3 and parts[:2] == ["soco_pipeline", "defs"] and (DEFS / parts[2]).is_dir():
        return parts[2]
    return None


def test_defs_groups_import_each_other_only_through_shared():
    found = [
        f"{module_name(p)} imports {target}"
        for p in sorted(DEFS.rglob("*.py"))
        if (src := group_of(module_name(p))) not in (None, "shared")
        for target, _ in imports(p)
        if group_of(target) not in (None, "shared", src)
    ]
    assert not found, (
        "a defs/ group folder imports another; move what both need to defs/shared/ (or to a domain core):\n"
        + "\n".join(found)
    )


def test_the_group_import_detector_finds_what_it_must():
    assert group_of("soco_pipeline.defs.fgbmk") == "fgbmk"
    assert group_of("soco_pipeline.defs.backbones.assets") == "backbones"
    assert group_of("soco_pipeline.defs.shared.specs") == "shared"
    assert group_of("soco_pipeline.defs.definitions") is None and group_of("soco_pipeline.features") is None


# --- settings.py alone reads the environment: a variable through `variable` (declared in VARIABLES and
# docs/settings.md) or a settings field; the whole environment (a child process's) through `environment()`. ----
ENVIRONMENT_NAMES = {"environ", "environb", "getenv", "getenvb", "putenv", "unsetenv"}


def environment_uses(source: str) -> list[tuple[int, str]]:
    """(line, what) of each touch of the process environment: `os.environ` / `os.getenv` / `os.putenv` ...
    (under any alias of `os`), `from os import environ`, and a named read through settings' whole environment
    (`environment()["X"]`, `environment().get("X")`: read a variable with `variable("X")`)."""
    tree = ast.parse(source)
    imports = [a for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    aliases = {a.asname or a.name for a in imports if a.name == "os"}
    hits = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and node.attr in ENVIRONMENT_NAMES
            and getattr(node.value, "id", "") in aliases
        ):
            hits.append((node.lineno, f"{node.value.id}.{node.attr}"))
        elif isinstance(node, ast.ImportFrom) and node.module == "os":
            hits += [
                (node.lineno, f"from os import {a.name}") for a in node.names if a.name in ENVIRONMENT_NAMES
            ]
        elif isinstance(node, ast.Subscript | ast.Call):
            whole = node.value if isinstance(node, ast.Subscript) else getattr(node.func, "value", None)
            key = node.slice if isinstance(node, ast.Subscript) else (node.args or [None])[0]
            named = isinstance(key, ast.Constant) and isinstance(key.value, str)
            if named and isinstance(whole, ast.Call) and getattr(whole.func, "id", None) == "environment":
                hits.append((node.lineno, f"environment()[{key.value!r}]"))
    return sorted(hits)


def test_no_module_but_settings_touches_the_environment():
    """One place reads the environment (issue 57), so every variable is declared and listed in docs/settings.md;
    the detector is shown to find planted reads, writes and a named read through `environment()`."""
    planted = (
        "import os\nimport os as o\nfrom os import getenv\nx = os.environ.get('A')\ndef f():\n"
        "    o.putenv('B', '1')\n    os.path.join('a', 'b')\n    return environment().get('C'), {**environment()}\n"
    )
    assert [w for _, w in environment_uses(planted)] == [
        "from os import getenv",
        "os.environ",
        "o.putenv",
        "environment()['C']",
    ]
    found = [
        f"{p.relative_to(PACKAGE)}:{line}: {what}"
        for p in FILES
        if p.name != "settings.py" or p.parent != PACKAGE
        for line, what in environment_uses(p.read_text())
    ]
    assert not found, "read the environment through soco_pipeline/settings.py:\n" + "\n".join(found)
