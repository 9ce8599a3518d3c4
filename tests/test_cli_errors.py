"""Errors that name the fix (issue 36): `soco` finds the project's instance and storage as the Makefile sets
them from any folder of the project, a relative SOCO_STORAGE resolves or the error says where it looked, an
unknown model name lists the known ones, `soco compare` on a family metric names what it supports (exit 2),
and no command prints a traceback."""

import os
from pathlib import Path

import pytest

from soco_pipeline.cli import soco as cli
from soco_pipeline.cli.project import find_project_root, project_environment, resolve_storage

pytestmark = pytest.mark.unit


@pytest.fixture
def project(tmp_path, monkeypatch) -> Path:
    """A project checkout (pyproject.toml of soco_pipeline, workspace.yaml, the dagster.yaml template) with
    two backbone specs, and an environment without DAGSTER_HOME or SOCO_STORAGE."""
    root = tmp_path / "checkout"
    (root / "docs" / "deep").mkdir(parents=True)
    (root / "pyproject.toml").write_text('[project]\nname = "soco_pipeline"\n')
    (root / "workspace.yaml").write_text("load_from: []\n")
    repo = Path(cli.__file__).resolve().parent.parent.parent
    (root / "dagster.yaml").write_text((repo / "dagster.yaml").read_text())
    specs = root / "assets" / "backbones"
    specs.mkdir(parents=True)
    for name in ("efficientnet_lite0", "vit_small_random"):
        (specs / f"{name}.yaml").write_text((repo / "assets" / "backbones" / f"{name}.yaml").read_text())
    for var in ("DAGSTER_HOME", "SOCO_STORAGE", "SOCO_DEBUG"):  # set first: restored (unset) after the test
        monkeypatch.setenv(var, "")
        monkeypatch.delenv(var)
    monkeypatch.setenv("SOCO_BACKBONES_DIR", str(specs))
    monkeypatch.setenv("SOCO_LVLMS_DIR", str(root / "assets" / "lvlms"))
    return root


def test_the_makefile_defaults_from_a_subfolder(project):
    sub = project / "docs" / "deep"
    env: dict = {}
    found = project_environment(env, cwd=sub)
    assert find_project_root(sub) == project
    assert env["SOCO_STORAGE"] == str(project / "storage")
    assert env["DAGSTER_HOME"] == str(project / "storage" / "dagster")
    written = (project / "storage" / "dagster" / "dagster.yaml").read_text()
    assert f'base_dir: "{project}/storage/dagster/history"' in written and "@STORAGE@" not in written
    assert found.how["dagster_home"].startswith("default <project>/storage/dagster")


def test_a_relative_storage_resolves_against_the_project_or_the_working_folder(project, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "mystore").mkdir(parents=True)
    # not there from the working folder: read as `make` would, from the project root
    assert resolve_storage("mystore", project, cwd=project / "docs")[0] == str(project / "mystore")
    # there from the working folder: that one
    assert resolve_storage("mystore", project, cwd=elsewhere)[0] == str(elsewhere / "mystore")
    assert resolve_storage("s3://bucket/p", project)[0] == "s3://bucket/p"


def test_no_results_names_where_it_looked_and_no_traceback(project, monkeypatch, capsys):
    monkeypatch.chdir(project / "docs" / "deep")
    monkeypatch.setenv("SOCO_STORAGE", "storage")  # relative, from another folder of the project
    assert cli.main(["sql", "select 1"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "dagster_home" not in err and len(err.splitlines()) == 1
    assert f"no results at {project}/storage/results.duckdb" in err
    assert "SOCO_STORAGE='storage' relative to the project root" in err
    assert f"Run `make demo` or `soco run SPEC` in {project}" in err
    # the defaults held for the command only: the caller's environment is as it was
    assert os.environ.get("SOCO_STORAGE") == "storage" and "DAGSTER_HOME" not in os.environ


def test_an_unknown_backbone_lists_the_known_ones(project, monkeypatch, capsys):
    monkeypatch.chdir(project)
    assert cli.main(["show", "pair_1", "--backbone", "efficientnet_lite"]) == 2
    err = capsys.readouterr().err
    assert "unknown backbone 'efficientnet_lite'. Did you mean 'efficientnet_lite0'?" in err
    assert "Known backbones: efficientnet_lite0, vit_small_random" in err
    assert cli.main(["evaluate", "dinov2_vitb41"]) == 2  # a typo is refused, not added as a partition
    assert "Known backbones: efficientnet_lite0, vit_small_random" in capsys.readouterr().err
    assert not (project / "storage" / "dagster" / "history").exists()


def test_compare_on_a_family_metric_says_what_it_supports(project, monkeypatch, capsys):
    monkeypatch.chdir(project)
    argv = ["compare", "efficientnet_lite0", "vit_small_random", "--metric", "accuracy"]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert "soco compare does not compare 'accuracy'" in err
    assert "cc, soc, soc_geo, cross_soc" in err and "soco leaderboard --family F" in err
    assert "(no rows)" not in err


def test_an_unexpected_error_is_one_line(project, monkeypatch, capsys):
    monkeypatch.chdir(project)
    monkeypatch.setenv("SOCO_SEED", "not-a-number")  # Settings() refuses it with a named message
    assert cli.main(["sql", "select 1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: SOCO_SEED='not-a-number' is not an integer") and "Traceback" not in err


def test_compare_prints_readable_p_values_in_120_columns():
    import pandas as pd

    from soco_pipeline.cli.trust import compare_text
    from soco_pipeline.evaluation.stats import COMPARE_COLUMNS

    rows = [
        [
            "four_choice_circular",
            "oracle_part",
            "oracle_concept",
            99.3,
            62.1,
            37.2,
            30.1,
            44.0,
            480,
            2,
            300,
            10,
            170,
            1e-12,
        ],
        ["soc", "oracle_part", "oracle_concept", 50.0, 50.0, 0.0, -1.0, 1.0, 480, 2, 3, 3, 474, 1.0],
    ]
    df = pd.DataFrame(rows, columns=COMPARE_COLUMNS)
    table = compare_text(df, "table")
    assert max(map(len, table.splitlines())) <= 120
    assert "|     < 0.001 |" in table and "|       1.000 |" in table and "| [30.1, 44.0] |" in table
    assert "0.00 " not in table and "< 0.001" in compare_text(df, "markdown")
    assert "1e-12" in compare_text(df, "csv")  # csv keeps every digit
