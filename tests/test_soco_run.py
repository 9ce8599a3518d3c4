"""`soco run SPEC` (issue 36): one command adds a spec and materializes exactly that model's partitions and the
boards, through the demo's run machinery and the same instance; a rerun skips what is cached; it ends with
the model's headline per family (CI, rank) and the summary of every model, in 120 columns. A rerun of an
unchanged spec launches no run at all (issue 53).

The first `soco run` is the module's fixture; the rerun and the second model each hold whichever order they
run in (a rerun of the first model is cached either way; the second model's partition is its own)."""

import contextlib
import io
import shutil

import dagster as dg
import pytest

from soco_pipeline import cli
from soco_pipeline.storage import PROJECT_ROOT
from tests.dagster_server import write_instance_yaml
from tests.tiny_families import tiny_family_env

pytestmark = [pytest.mark.pipeline, pytest.mark.timeout(1500)]


def _soco_run(*args: str) -> str:
    """`soco run ARGS` in this process; its standard output (it must exit 0)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = cli.main(["run", *args])
    assert code == 0, out.getvalue()[-3000:]
    return out.getvalue()


def _runs(home):
    with dg.DagsterInstance.from_config(str(home)) as instance:
        return [
            (r.job_name, r.tags.get("dagster/partition"), r.tags.get("soco/source"))
            for r in instance.get_runs()
        ]


@pytest.fixture(scope="module")
def first(tmp_path_factory):
    """A tiny embedded data set (two categories, four images each), an empty spec folder, our instance; then
    `soco run oracle_part.yaml --families soco,mmvm` in it: its output and the runs it launched."""
    tmp = tmp_path_factory.mktemp("soco_run")
    home, storage, specs = tmp / "home", tmp / "storage", tmp / "backbones"
    specs.mkdir()
    write_instance_yaml(home, storage)
    with pytest.MonkeyPatch.context() as mp:
        for var, value in {
            "DAGSTER_HOME": str(home),
            "SOCO_STORAGE": str(storage),
            "SOCO_BACKBONES_DIR": str(specs),
            "SOCO_LVLMS_DIR": str(tmp / "lvlms"),
            "SOCO_CATEGORIES": "car,dog",
            "SOCO_IMAGES_PER_CATEGORY": "4",
            **tiny_family_env(tmp / "families"),
        }.items():
            mp.setenv(var, value)
        for name in ("oracle_part", "oracle_concept"):
            shutil.copy(PROJECT_ROOT / "assets" / "backbones" / f"{name}.yaml", tmp / f"{name}.yaml")
        out = _soco_run(str(tmp / "oracle_part.yaml"), "--families", "soco,mmvm")
        yield {"home": home, "specs": specs, "tmp": tmp, "out": out, "runs": _runs(home)}


def test_soco_run_adds_the_spec_evaluates_and_prints_the_summary(first):
    out, runs = first["out"], first["runs"]
    assert (first["specs"] / "oracle_part.yaml").read_bytes() == (
        first["tmp"] / "oracle_part.yaml"
    ).read_bytes()
    lines = out.splitlines()
    assert max(map(len, lines)) <= 120, max(lines, key=len)
    assert "nan" not in out.lower() and "DEBUG" not in out and "FAILED" not in out
    assert "[1/" in out and "soco / backbone oracle_part" in out and "mmvm / backbone oracle_part" in out
    assert "oracle_part: headline per family" in out and "1 of 1" in out
    assert "| soco   | SOC PCK@0.1 " in out  # the part oracle's SOC headline in its card
    summary = out[out.index("Summary: one row per model") :]
    assert "| oracle_part" in summary and "| soco " in summary and "headlines: soco = SOC PCK@0.1" in summary
    assert "instance_oracle" not in summary  # the MMVM board's check row is no model
    assert (first["tmp"] / "storage" / "report" / "index.html").is_file()
    assert {source for *_, source in runs} == {"soco run"}
    assert {p for _, p, _ in runs if p} == {"oracle_part"}


def test_the_same_command_again_runs_nothing(first):
    """Issue 53: a second `soco run` of an unchanged spec is all cached, the boards included (each made after
    the model's rows and the spec file's last edit)."""
    before = len(_runs(first["home"]))
    again = _soco_run(str(first["tmp"] / "oracle_part.yaml"), "--families", "soco,mmvm")
    steps = [line for line in again.splitlines() if line.startswith("[")]
    assert steps and all(line.endswith(": cached, skipped") for line in steps), again
    for step in (
        "data and pairs",
        "soco / backbone oracle_part",
        "mmvm items",
        "mmvm / backbone oracle_part",
    ):
        assert any(step in line for line in steps), again
    assert len(_runs(first["home"])) == before


def test_a_second_model_runs_only_its_own_partition_and_the_boards(first):
    before = len(_runs(first["home"]))
    out = _soco_run(str(first["tmp"] / "oracle_concept.yaml"), "--families", "soco")
    runs = _runs(first["home"])
    added = runs[: len(runs) - before]
    assert {p for _, p, _ in added if p} == {"oracle_concept"}
    assert "demo_data_and_pairs" not in {job for job, *_ in added}
    assert "oracle_concept: headline per family" in out and "2 of 2" in out
    summary = out[out.index("Summary: one row per model") :]
    assert summary.index("| oracle_part") < summary.index("| oracle_concept")  # part oracle: higher SOC
