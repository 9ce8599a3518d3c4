"""`soco run SPEC` (issue 36): one command adds a spec and materializes exactly that model's partitions and the
boards, through the demo's run machinery and the same instance; a rerun skips what is cached; it ends with
the model's headline per family (CI, rank) and the summary of every model, in 120 columns. A rerun of an
unchanged spec launches no run at all (issue 53).

The first `soco run` is the module's fixture; the rerun and the second model each hold whichever order they
run in (a rerun of the first model is cached either way; the second model's partition is its own)."""

import contextlib
import csv
import io
import os
import shutil
import subprocess
from pathlib import Path

import dagster as dg
import pytest

from soco_pipeline.cli import soco as cli
from soco_pipeline.storage import PROJECT_ROOT
from tests.dagster_server import VENV_BIN, write_instance_yaml
from tests.tiny_families import tiny_family_env

pytestmark = [pytest.mark.pipeline, pytest.mark.timeout(1500)]


def _soco_run(*args: str) -> str:
    """`soco run ARGS` in this process; its standard output (it must exit 0, with no Dagster WARNING line on
    standard error: cli/run_console.py keeps Dagster's notes in the run's log)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(["run", *args])
    assert code == 0, out.getvalue()[-3000:] + err.getvalue()[-3000:]
    assert "WARNING" not in out.getvalue() + err.getvalue(), err.getvalue()[-3000:]
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
        with (tmp / "oracle_part.yaml").open("a") as f:  # names a published model: published_comparison
            f.write("reference: DINOv2-B/14\n")
        out = _soco_run(str(tmp / "oracle_part.yaml"), "--families", "soco,mmvm")
        yield {"home": home, "specs": specs, "tmp": tmp, "out": out, "runs": _runs(home), "storage": storage}


def test_soco_run_adds_the_spec_evaluates_and_prints_the_summary(first):
    out, runs = first["out"], first["runs"]
    assert (first["specs"] / "oracle_part.yaml").read_bytes() == (
        first["tmp"] / "oracle_part.yaml"
    ).read_bytes()
    lines = out.splitlines()
    assert max(map(len, lines)) <= 120, max(lines, key=len)
    assert "nan" not in out.lower() and "DEBUG" not in out and "FAILED" not in out
    assert "[1/" in out and "soco / backbone oracle_part" in out and "mmvm / backbone oracle_part" in out
    assert "oracle_part: headline per family" in out and "ceiling, not ranked" in out  # an oracle: no model
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


def _stored(storage) -> dict[str, bytes]:
    """Every Parquet table under `storage` (the boards, the per-model tables): {path: bytes}."""
    return {str(p.relative_to(storage)): p.read_bytes() for p in sorted(storage.rglob("*.parquet"))}


def test_the_same_command_again_through_the_console_script_materializes_nothing(first):
    """Issue 53, through the console script in a fresh process: a second `soco run` of the unchanged spec
    reports every step cached (Dagster's stale status: every asset fresh), launches no run, materializes
    nothing, and leaves every stored table, the boards included, byte-identical."""
    with dg.DagsterInstance.from_config(str(first["home"])) as instance:
        events = instance.get_event_records(
            dg.EventRecordsFilter(event_type=dg.DagsterEventType.ASSET_MATERIALIZATION), limit=100000
        )
    before, tables = (len(_runs(first["home"])), len(events)), _stored(first["storage"])
    board = sql_rows(first["storage"], "select * from leaderboard order by backbone")
    done = subprocess.run(
        [str(VENV_BIN / "soco"), "run", str(first["tmp"] / "oracle_part.yaml"), "--families", "soco,mmvm"],
        env=dict(os.environ),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    steps = [line for line in done.stdout.splitlines() if line.startswith("[")]
    assert len(steps) >= 6 and all(line.endswith(": cached, skipped") for line in steps), done.stdout
    with dg.DagsterInstance.from_config(str(first["home"])) as instance:
        events = instance.get_event_records(
            dg.EventRecordsFilter(event_type=dg.DagsterEventType.ASSET_MATERIALIZATION), limit=100000
        )
    assert (len(_runs(first["home"])), len(events)) == before
    assert _stored(first["storage"]) == tables
    assert sql_rows(first["storage"], "select * from leaderboard order by backbone") == board


def test_a_second_model_runs_only_its_own_partition_and_the_boards(first):
    """With no --families: every family, SOCO and the three task families, each with a step of its own (the
    concept oracle scores on SOCO and FG-BMK, and gets MMVM's and TPIPS's not-applicable rows), the steps of
    one phase in one Dagster run."""
    before = len(_runs(first["home"]))
    out = _soco_run(str(first["tmp"] / "oracle_concept.yaml"))
    runs = _runs(first["home"])
    added = runs[: len(runs) - before]
    for family in ("soco", "mmvm", "fgbmk", "tpips"):  # each step ran (soco run exits 0: none failed)
        assert f"{family} / backbone oracle_concept" in out, family
    assert {p for _, p, _ in added if p} == {"oracle_concept"}
    # one run for the model's rows of every family, one for the items new to this storage (FG-BMK's and
    # TPIPS's), one for every board with the summary (cli/joined_runs.py)
    assert sorted(job for job, *_ in added) == ["demo_boards", "demo_items", "demo_model"]
    assert "oracle_concept: headline per family" in out and "ceiling, not ranked" in out
    summary = out[out.index("Summary: one row per model") :]
    assert summary.index("| oracle_part (ceiling)") < summary.index(
        "| oracle_concept (ceiling)"
    )  # higher SOC


def sql_rows(storage, query: str) -> list[dict]:
    """`soco sql QUERY --format csv` through the console script in a fresh process, on `storage`: its rows."""
    env = {**os.environ, "SOCO_STORAGE": str(storage)}
    done = subprocess.run(
        [str(VENV_BIN / "soco"), "sql", query, "--format", "csv"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, (query, done.stderr)
    return list(csv.DictReader(io.StringIO(done.stdout)))


def test_soco_run_materializes_published_comparison_queried_as_the_docs_query_it(first):
    """docs/results.md's query of `published_comparison`, through the console script in a fresh process."""
    query = "select model, metric, ours, published, difference, differing_knobs from published_comparison"
    (row,) = sql_rows(first["storage"], query + " where metric = 'soc'")
    assert (row["model"], row["metric"]) == ("oracle_part", "soc")
    assert float(row["published"]) == pytest.approx(67.86)  # OmniProbe, S = 800 snapped (first of the ties)
    assert float(row["difference"]) == pytest.approx(float(row["ours"]) - 67.86, abs=1e-6)
    assert "input_size: ours nearest_multiple:480, published nearest_multiple:800" in row["differing_knobs"]


def test_soco_run_measures_the_gap_knob_by_knob_and_prints_the_sentence(first):
    """`published_gap` of the spec that names DINOv2-B/14: the input size re-run as a variant (its own
    feature-cache folder), the steps adding up to the aligned run, the sentence on the card, board and page."""
    query = (
        "select model, metric, step, knob, ours_setting, published_setting, ours, effect, aligned, published, "
        "reason from published_gap where model = 'oracle_part' order by metric, step"
    )
    rows = sql_rows(first["storage"], query)
    soc = [r for r in rows if r["metric"] == "soc"]
    assert [(r["knob"], r["ours_setting"], r["published_setting"]) for r in soc] == [
        ("input_size", "nearest_multiple:480", "nearest_multiple:800"),
        ("unexplained", "", "798"),
    ]
    for metric in {r["metric"] for r in rows}:
        mine = [r for r in rows if r["metric"] == metric]
        steps = sum(float(r["effect"]) for r in mine if r["knob"] != "unexplained")
        assert abs(steps - (float(mine[0]["aligned"]) - float(mine[0]["ours"]))) < 1e-6, metric
        assert float(mine[-1]["effect"]) == pytest.approx(
            float(mine[0]["published"]) - float(mine[0]["aligned"])
        )
    assert "an oracle" in soc[-1]["reason"] and "simulated" in soc[-1]["reason"]
    folders = list((first["storage"] / "features" / "oracle_part").iterdir())
    assert len(folders) == 2  # ours and the 800 variant: each its own spec hash
    card = first["out"]
    assert "why it differs (SOC): input 480 \u2192 800: " in card and "unexplained " in card
    page = (first["storage"] / "report" / "index.html").read_text()
    assert "why_it_differs" in page and "input 480 \u2192 800" in page


def test_the_protocol_atlas_is_a_view_and_leaves_the_oracles_out(first):
    """`protocol_atlas` after `soco run`: one row per (metric, single-knob change); both models here are oracles,
    controls, so no ranking is compared (n_models 0, tau null), and the page shows the atlas's table."""
    query = "select metric, knob, n_models, tau, n_flipped from protocol_atlas order by metric, knob"
    rows = sql_rows(first["storage"], query)
    knobs = {(r["metric"], r["knob"]) for r in rows}
    assert ("soc", "alpha 0.1 -> 0.05") in knobs and ("soc", "reduction official -> keypoint") in knobs
    assert {r["n_models"] for r in rows} == {"0"} and {r["tau"] for r in rows} == {""}
    page = (first["storage"] / "report" / "index.html").read_text()
    assert '<section id="protocol-atlas">' in page


def test_the_published_queries_of_docs_results_md_run_as_written(first):
    """Every SQL block of docs/results.md over published_comparison, published_gap or protocol_atlas, run as
    written through the console script on this run's results."""
    import re

    docs = (PROJECT_ROOT / "docs" / "results.md").read_text()
    blocks = re.findall(r"```sql\n(.*?)```", docs, flags=re.S)
    wanted = [
        b for b in blocks if re.search(r"\b(published_comparison|published_gap|protocol_atlas|gap_note)\b", b)
    ]
    assert len(wanted) >= 4, wanted
    for block in wanted:
        for query in [q.strip() for q in block.split(";") if q.strip()]:
            assert sql_rows(first["storage"], query), query  # rows, not only a header


def _variant(first, base: str, name: str) -> str:
    """A copy of shipped spec `base` with seed 1 under the model name `name` (a new model): its path."""
    text = (PROJECT_ROOT / "assets" / "backbones" / f"{base}.yaml").read_text().replace("seed: 0", "seed: 1")
    path = first["tmp"] / f"{name}.yaml"
    path.write_text(text)
    return str(path)


def _console_run(*args: str) -> subprocess.CompletedProcess:
    """`soco run ARGS` through the console script in a fresh process."""
    return subprocess.run(
        [str(VENV_BIN / "soco"), "run", *args],
        env=dict(os.environ),
        capture_output=True,
        text=True,
        timeout=900,
    )


def test_several_specs_run_in_one_command_with_the_boards_once(first):
    """`soco run A B` through the console script: both specs added, each model's stages in a run of its own,
    the data and items cached, one boards run; both cards and both models on the board. Again: all cached."""
    part, concept = (
        _variant(first, "oracle_part", "part_seed1"),
        _variant(first, "oracle_concept", "concept_seed1"),
    )
    before = len(_runs(first["home"]))
    done = _console_run(part, concept, "--families", "soco,mmvm")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    out = done.stdout
    added = _runs(first["home"])[: len(_runs(first["home"])) - before]
    assert sorted((job, p) for job, p, _ in added) == [
        ("demo_boards", None),
        ("demo_model", "concept_seed1"),
        ("demo_model", "part_seed1"),
    ]
    for model in ("part_seed1", "concept_seed1"):
        assert (first["specs"] / f"{model}.yaml").is_file()
        assert f"soco / backbone {model}" in out and f"mmvm / backbone {model}" in out
        assert f"{model}: headline per family" in out
    assert out.index("part_seed1: headline per family") < out.index("concept_seed1: headline per family")
    board = {r["backbone"] for r in sql_rows(first["storage"], "select backbone from leaderboard")}
    assert {"part_seed1", "concept_seed1", "oracle_part"} <= board
    summary = out[out.index("Summary: one row per model") :]
    assert "| part_seed1" in summary and "| concept_seed1" in summary

    runs = len(_runs(first["home"]))
    again = _console_run(part, concept, "--families", "soco,mmvm")
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    steps = [line for line in again.stdout.splitlines() if line.startswith("[")]
    assert steps and all(line.endswith(": cached, skipped") for line in steps), again.stdout
    assert len(_runs(first["home"])) == runs


def test_a_bad_spec_among_several_adds_none_and_names_itself(first):
    """One spec that fails its check, or two files of one model name: an error naming it, no spec added, no run."""
    good = _variant(first, "oracle_part", "part_seed2")
    bad = first["tmp"] / "broken_seed.yaml"
    shipped = (PROJECT_ROOT / "assets" / "backbones" / "oracle_part.yaml").read_text()
    bad.write_text(shipped.replace("stride: 4", "stride: -4"))
    runs = len(_runs(first["home"]))
    done = _console_run(good, str(bad), "--families", "soco")
    assert done.returncode != 0 and "broken_seed" in done.stderr, done.stderr[-3000:]
    twin = first["tmp"] / "twin"
    twin.mkdir(exist_ok=True)
    (twin / "part_seed2.yaml").write_text(Path(good).read_text())
    done = _console_run(good, str(twin / "part_seed2.yaml"), "--families", "soco")
    assert done.returncode != 0 and "'part_seed2' is given twice" in done.stderr, done.stderr[-3000:]
    assert (
        not (first["specs"] / "part_seed2.yaml").exists()
        and not (first["specs"] / "broken_seed.yaml").exists()
    )
    assert len(_runs(first["home"])) == runs


def test_a_backbone_and_an_lvlm_in_one_command(first):
    """A backbone spec and an LVLM spec (a loopback server) in one `soco run` through the console script: each
    model's stages in a run of its own partition set, the boards once, a card for each."""
    from soco_pipeline.lvlm.server import serve
    from tests.lvlm_helpers import RandomAnswerer

    part = _variant(first, "oracle_part", "part_seed3")
    with serve(RandomAnswerer()) as srv:
        vlm = first["tmp"] / "random_vlm.yaml"
        vlm.write_text(
            f"backend: openai\nmodel: random\nbase_url: {srv.base_url}\napi_key_env: SOCO_PIPELINE_TEST_KEY\n"
            "max_concurrency: 4\nretries: 1\nbackoff_base: 0.01\n"
        )
        before = len(_runs(first["home"]))
        done = subprocess.run(
            [str(VENV_BIN / "soco"), "run", part, str(vlm), "--families", "soco", "--limit", "1"],
            env={**os.environ, "SOCO_PIPELINE_TEST_KEY": "test-key"},
            capture_output=True,
            text=True,
            timeout=900,
        )
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        assert srv.requests > 0
    added = _runs(first["home"])[: len(_runs(first["home"])) - before]
    partitions = [(job, p) for job, p, _ in added if p]
    assert sorted(p for _, p in partitions) == ["part_seed3", "random_vlm"], added
    assert [job for job, p, _ in added if p is None].count("demo_boards") == 1, added
    assert (first["tmp"] / "lvlms" / "random_vlm.yaml").is_file()
    for model in ("part_seed3", "random_vlm"):
        assert f"{model}: headline per family" in done.stdout, done.stdout[-3000:]
