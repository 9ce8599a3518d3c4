"""A copy of a clone must not write into the original's Dagster instance (issue 58).

`storage/dagster/dagster.yaml` holds the absolute storage root the Makefile wrote into it; `cp -a` keeps that
file (and its mtime), so the copy's runs used to land in the original's run history. Here a demo-like project
(the Makefile, the dagster.yaml template, pyproject.toml, workspace.yaml) gets its instance from the Makefile
and one run, is copied with `cp -a`, and the copy runs through each entry point: `make` (the rule every target
runs first) and a `soco` command (`project_defaults` + `prepare_instance`, no make). The original's instance
must hold exactly its one run and its artifact folder nothing new; the copy's dagster.yaml names the copy."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from soco_pipeline.cli.project import instance_storage
from soco_pipeline.storage import PROJECT_ROOT
from tests.faults import child_env
from tests.needs import need

pytestmark = [pytest.mark.pipeline, pytest.mark.timeout(300)]

# one Dagster run of a trivial asset in the instance a `soco` command would open from `cwd` (or, with
# "--as-is", the DAGSTER_HOME the environment names), then the number of runs that instance holds
RUN = """
import sys
from pathlib import Path
import dagster as dg
from soco_pipeline.cli.project import prepare_instance, project_defaults

@dg.asset
def probe() -> int:
    return 1

cwd, mode = Path(sys.argv[1]), sys.argv[2]
with project_defaults(cwd=cwd):
    if mode == "soco":
        prepare_instance()  # what `soco run` / `soco evaluate` do before they open the instance
    with dg.DagsterInstance.get() as instance:
        if mode != "count":
            assert dg.materialize([probe], instance=instance).success
        print("runs", len(instance.get_run_records()))
"""


def env() -> dict[str, str]:
    """A child's environment without the storage and instance of the test session (the Makefile's defaults)."""
    return {k: v for k, v in child_env().items() if k not in ("DAGSTER_HOME", "SOCO_STORAGE")}


def runs(project: Path, mode: str) -> tuple[int, str]:
    done = subprocess.run(
        [sys.executable, "-c", RUN, str(project), mode],
        capture_output=True,
        text=True,
        timeout=180,
        env=env(),
        cwd=project,
    )
    assert done.returncode == 0, done.stderr
    return int(done.stdout.split("runs", 1)[1]), done.stderr


def make_instance(project: Path) -> str:
    """`make <DAGSTER_HOME>/dagster.yaml` in `project`: the step `make demo` / `make ui` run first."""
    target = project / "storage" / "dagster" / "dagster.yaml"
    done = subprocess.run(
        ["make", "-s", "-C", str(project), str(target)], capture_output=True, text=True, timeout=60, env=env()
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.fixture
def original(tmp_path) -> Path:
    """A demo-like project with its instance written by the Makefile and one run in it."""
    need(shutil.which("make") is not None, "make")
    project = (tmp_path / "original").resolve()
    project.mkdir()
    for name in ("Makefile", "dagster.yaml", "pyproject.toml", "workspace.yaml"):
        shutil.copy2(PROJECT_ROOT / name, project / name)
    make_instance(project)
    assert runs(project, "run")[0] == 1
    return project


@pytest.mark.parametrize("entry", ["make", "soco"])
def test_a_cp_a_copy_of_a_clone_runs_in_its_own_instance(original, entry):
    yaml_path = Path("storage") / "dagster" / "dagster.yaml"
    assert instance_storage((original / yaml_path).read_text()) == str(original / "storage")
    artifacts = sorted((original / "storage" / "dagster").rglob("*"))
    copy = original.parent / "copy"
    subprocess.run(["cp", "-a", str(original), str(copy)], check=True, timeout=60)
    assert instance_storage((copy / yaml_path).read_text()) == str(original / "storage")  # the trap
    if entry == "make":
        said = make_instance(copy)
        assert f"rewriting {copy / yaml_path} for the storage root {copy / 'storage'}" in said
        count, _ = runs(copy, "run")
    else:
        count, said = runs(copy, "soco")
        assert f"rewrote {copy / yaml_path} for the storage root {copy / 'storage'}" in said
        assert f"(it named {original / 'storage'})" in said
    assert instance_storage((copy / yaml_path).read_text()) == str(copy / "storage")
    assert count == 2  # the run copied with the storage, and the copy's own
    assert runs(original, "count")[0] == 1  # no run of the copy reached the original
    assert sorted((original / "storage" / "dagster").rglob("*")) == artifacts  # nor any file
    assert make_instance(copy) == ""  # up to date now: nothing rewritten, nothing said
