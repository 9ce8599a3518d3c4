"""`soco run SPEC` (issue 36): one command adds a spec and materializes exactly that model's partitions and the
boards, through the demo's run machinery and the same instance; a rerun skips what is cached; it ends with
the model's headline per family (CI, rank) and the summary of every model, in 120 columns."""

import shutil

import dagster as dg
import pytest

from soco_pipeline import cli
from soco_pipeline.storage import PROJECT_ROOT
from tests.dagster_server import write_instance_yaml
from tests.tiny_families import tiny_family_env

pytestmark = [pytest.mark.pipeline, pytest.mark.timeout(1500)]


@pytest.fixture
def env(tmp_path, monkeypatch):
    """A tiny embedded data set (two categories, four images each), an empty spec folder, our instance."""
    home, storage, specs = tmp_path / "home", tmp_path / "storage", tmp_path / "backbones"
    specs.mkdir()
    write_instance_yaml(home, storage)
    for var, value in {
        "DAGSTER_HOME": str(home),
        "SOCO_STORAGE": str(storage),
        "SOCO_BACKBONES_DIR": str(specs),
        "SOCO_LVLMS_DIR": str(tmp_path / "lvlms"),
        "SOCO_CATEGORIES": "car,dog",
        "SOCO_IMAGES_PER_CATEGORY": "4",
        **tiny_family_env(tmp_path / "families"),
    }.items():
        monkeypatch.setenv(var, value)
    for name in ("oracle_part", "oracle_concept"):
        shutil.copy(PROJECT_ROOT / "assets" / "backbones" / f"{name}.yaml", tmp_path / f"{name}.yaml")
    return {"home": home, "specs": specs, "tmp": tmp_path}


def _runs(home):
    with dg.DagsterInstance.from_config(str(home)) as instance:
        return [
            (r.job_name, r.tags.get("dagster/partition"), r.tags.get("soco/source"))
            for r in instance.get_runs()
        ]


def test_soco_run_adds_evaluates_skips_cached_and_prints_the_summary(env, capsys):
    first = env["tmp"] / "oracle_part.yaml"
    assert cli.main(["run", str(first), "--families", "soco,mmvm"]) == 0
    out = capsys.readouterr().out
    assert (env["specs"] / "oracle_part.yaml").read_bytes() == first.read_bytes()
    lines = out.splitlines()
    assert max(map(len, lines)) <= 120, max(lines, key=len)
    assert "nan" not in out.lower() and "DEBUG" not in out and "FAILED" not in out
    assert "[1/" in out and "soco / backbone oracle_part" in out and "mmvm / backbone oracle_part" in out
    assert "oracle_part: headline per family" in out and "1 of 1" in out
    assert "| soco   | SOC PCK@0.1 " in out  # the part oracle's SOC headline in its card
    summary = out[out.index("Summary: one row per model") :]
    assert "| oracle_part" in summary and "| soco " in summary and "headlines: soco = SOC PCK@0.1" in summary
    assert "instance_oracle" not in summary  # the MMVM board's check row is no model
    assert (env["tmp"] / "storage" / "report" / "index.html").is_file()
    runs = _runs(env["home"])
    assert {source for *_, source in runs} == {"soco run"}
    assert {p for _, p, _ in runs if p} == {"oracle_part"}

    # The same command again: the data, the items and the model's steps are cached; only the boards run.
    assert cli.main(["run", str(first), "--families", "soco,mmvm"]) == 0
    again = capsys.readouterr().out
    for step in (
        "data and pairs",
        "soco / backbone oracle_part",
        "mmvm items",
        "mmvm / backbone oracle_part",
    ):
        assert any(step in line and line.endswith(": cached, skipped") for line in again.splitlines()), again
    new = _runs(env["home"])[: len(_runs(env["home"])) - len(runs)]
    assert all(p is None and "leaderboard" in job or job == "demo_summary" for job, p, _ in new), new

    # A second model: only its own partition and the boards run, and the summary shows both.
    second = env["tmp"] / "oracle_concept.yaml"
    before = len(_runs(env["home"]))
    assert cli.main(["run", str(second), "--families", "soco"]) == 0
    out = capsys.readouterr().out
    added = _runs(env["home"])[: len(_runs(env["home"])) - before]
    assert {p for _, p, _ in added if p} == {"oracle_concept"}
    assert "demo_data_and_pairs" not in {job for job, *_ in added}
    assert "oracle_concept: headline per family" in out and "2 of 2" in out
    summary = out[out.index("Summary: one row per model") :]
    assert summary.index("| oracle_part") < summary.index("| oracle_concept")  # part oracle: higher SOC
