"""The LVLM side's reference answerers on the first screen, and re-scoring without a model call.

The loopback server runs as a child process behind ordinary `openai` specs; the oracle must score
100 / 100 and the seeded random answerer near chance; the server is gone (by pid) after the block.
Re-materializing answers asks the server nothing (cache), and a new parser rule changes the scores
with the server's request counter unchanged."""

import json
import os
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pandas as pd
import pytest

from soco_pipeline.cli import soco as cli
from soco_pipeline.cli.demo_lvlm import run_lvlm_demo
from soco_pipeline.cli.freshness import Freshness
from soco_pipeline.defs.definitions import build_definitions
from soco_pipeline.lvlm.loopback import loopback_answerers
from soco_pipeline.lvlm.rescore import rescore_lvlm
from soco_pipeline.report.page import build_report
from soco_pipeline.settings import Settings
from soco_pipeline.storage import write_parquet_atomic
from soco_pipeline.trust.provenance import validate_record
from tests.dagster_server import write_instance_yaml
from tests.eee_helpers import eee_checked_here, exported_eee
from tests.lvlm_helpers import small_tables

pytestmark = pytest.mark.pipeline

UPSTREAM = ["image_set", "keypoints", "image_pairs", "correspondences", "four_choice", "descriptions"]


def _storage(tmp_path):
    storage = tmp_path / "storage"
    tables = small_tables(tmp_path / "data", categories=("car", "bus"), per_category=3)
    for name in UPSTREAM:
        write_parquet_atomic(tables[name], str(storage / "tables" / f"{name}.parquet"))
    return storage


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_demo_block_prints_the_lvlm_board_beside_the_references(tmp_path):
    storage = _storage(tmp_path)
    lines = []
    (tmp_path / "home").mkdir()
    with dg.instance_for_test(temp_dir=str(tmp_path / "home")) as instance:
        board = run_lvlm_demo(instance, log=lines.append, storage_root=str(storage))
    pid = int(lines[0].split("(pid ")[1].split(")")[0])
    assert _gone(pid)
    rows = board.set_index("model")
    oracle, rnd = rows.loc["loopback_oracle"], rows.loc["loopback_random"]
    for s in ("vis", "vis_desc", "desc"):
        assert oracle[f"{s}_average"] == 100 and oracle[f"{s}_circular"] == 100
        assert 5 <= rnd[f"{s}_average"] <= 50 and rnd[f"{s}_circular"] < 30
    assert (board.kind == "reference").any() and rows.loc["random", "vis_circular"] == pytest.approx(0.390625)
    assert not rows.loc["loopback_oracle", "partial"]
    rec = json.loads((storage / "results" / "records" / "lvlm" / "loopback_oracle.json").read_text())
    validate_record(rec)
    assert rec["results"]["vis/circular"]["value"] == 100 and rec["family"] == "soco_lvlm"
    assert rec["n-samples"]["item_rows"]["requested"] == rec["n-samples"]["item_rows"]["evaluated"] > 0
    # the results page shows the LVLM board, its CIs and examples (images, raw answer, parsed letter)
    index = Path(build_report(Settings(storage_root=str(storage))))
    page = index.read_text()
    assert "What the LVLMs answered" in page and "raw: <code>The answer is" in page and "lvlm_ci.png" in page
    images = [s.split('"')[0] for s in page.split('src="')[1:]]
    assert any(i.startswith("lvlm/loopback_oracle/") for i in images)
    assert all((index.parent / i).is_file() for i in images)


# what `make demo`'s LVLM block runs (cli/demo.main), in a process of its own: the board as JSON on the last line
DEMO_BLOCK = (
    "import dagster as dg\n"
    "from soco_pipeline.cli.demo_lvlm import run_lvlm_demo\n"
    "board = run_lvlm_demo(dg.DagsterInstance.get())\n"
    "print(board.to_json(orient='records'))\n"
)
LVLM_ASSETS = ["lvlm_items", "lvlm_answers", "lvlm_metrics", "lvlm_results_record", "lvlm_leaderboard"]


@pytest.mark.timeout(900)  # two passes of the block (the second in a fresh process, as `make demo` again)
def test_a_second_demo_block_on_the_same_storage_is_all_cached(tmp_path, monkeypatch):
    """Issue 53: the LVLM block of a second `make demo` on the same storage, nothing changed, materializes no
    asset: the loopback server starts on another port, its spec files change, their data version does not
    (lvlm/specs.spec_version). No model call, no run, the same board and tables; and the summary assets it
    makes again are fresh for the demo's own summary stage (same settings fingerprint)."""
    storage = _storage(tmp_path)
    home = tmp_path / "home"
    write_instance_yaml(home, storage)
    monkeypatch.setenv("SOCO_STORAGE", str(storage))
    env = {**os.environ, "DAGSTER_HOME": str(home)}

    def fresh_block() -> tuple[list[str], str]:
        done = subprocess.run(
            [sys.executable, "-c", DEMO_BLOCK], env=env, capture_output=True, text=True, timeout=600
        )
        assert done.returncode == 0, done.stderr[-3000:]
        lines = done.stdout.strip().splitlines()
        return lines[:-1], lines[-1]

    def stored() -> tuple[int, dict[str, list[int]], dict[str, bytes]]:
        with dg.DagsterInstance.from_config(str(home)) as instance:
            runs = len(instance.get_runs())
            made = {
                key: [
                    r.storage_id for r in instance.fetch_materializations(dg.AssetKey(key), limit=100).records
                ]
                for key in LVLM_ASSETS
            }
        files = {str(p.relative_to(storage)): p.read_bytes() for p in sorted(storage.rglob("lvlm_*.parquet"))}
        return runs, made, files

    first_log: list[str] = []
    # the first pass here, the second in a new process
    with dg.DagsterInstance.from_config(str(home)) as instance:
        first_board = run_lvlm_demo(instance, log=first_log.append).to_json(orient="records")
    runs, made, files = stored()
    assert runs > 0 and all(made.values()) and files
    specs = {p.name: p.read_text() for p in (storage / "lvlm" / "demo_specs").glob("*.yaml")}
    second_log, second_board = fresh_block()
    assert "cached, skipped" not in "\n".join(first_log)
    assert specs != {p.name: p.read_text() for p in (storage / "lvlm" / "demo_specs").glob("*.yaml")}
    assert stored() == (runs, made, files)  # no run, no materialization, the tables byte-identical
    assert second_board == first_board
    skipped = [line for line in second_log if line.endswith("cached, skipped")]
    assert [s.split(": ")[0].strip() for s in skipped] == [
        "LVLM lvlm_items",
        "LVLM loopback_oracle",
        "LVLM loopback_random",
        "LVLM lvlm_leaderboard, model_headlines, model_summary, results_database, results_report",
    ]
    assert second_log[-1].endswith("(0 model calls)")
    with dg.DagsterInstance.from_config(str(home)) as instance:
        summary = ["model_headlines", "model_summary", "results_database", "results_report"]
        assert Freshness(build_definitions(), instance).fresh([dg.AssetKey(k) for k in summary])


def test_rescoring_answers_makes_no_model_call(tmp_path, monkeypatch, capsys):
    storage = _storage(tmp_path)
    specs = tmp_path / "specs"
    (tmp_path / "home").mkdir()
    with (
        dg.instance_for_test(temp_dir=str(tmp_path / "home")) as instance,
        loopback_answerers(str(storage / "tables"), specs) as lb,
    ):
        defs = build_definitions(storage_root=str(storage), lvlms_dir=str(specs))
        instance.add_dynamic_partitions("lvlms", lb.models)

        def mat(keys, partition=None, run_config=None):
            assert dg.materialize(
                list(defs.assets),
                selection=dg.AssetSelection.assets(*keys),
                instance=instance,
                resources=defs.resources,
                partition_key=partition,
                run_config=run_config,
            ).success

        mat(["lvlm_items"])
        mat(["lvlm_answers", "lvlm_metrics"], "loopback_oracle")
        asked = lb.requests()
        items = pd.read_parquet(storage / "tables" / "lvlm_items.parquet")
        assert asked == len(items) > 0  # one call per item row
        mat(["lvlm_answers", "lvlm_metrics"], "loopback_oracle")  # stored answers: nothing asked again
        assert lb.requests() == asked
        answers = pd.read_parquet(storage / "tables" / "lvlm_answers" / "loopback_oracle.parquet")
        before = pd.read_parquet(storage / "tables" / "lvlm_metrics" / "loopback_oracle.parquet")

        def bare_letter_only(texts: pd.Series) -> pd.Series:  # a stricter parser rule
            return texts.where(texts.str.fullmatch("[ABCD]"), "")

        after = rescore_lvlm(answers, bare_letter_only)
        top = after[(after.scope == "all")].set_index(["setting", "metric"]).value
        assert (before[before.scope == "all"].value == 100).all() and (top == 0).all()
        assert lb.requests() == asked  # re-scored without a single model call
        # a partial run: 1 item group per setting, flagged in the LVLM leaderboard
        cfg = {"ops": {"lvlm_answers": {"config": {"items_per_setting": 1}}}}
        mat(["lvlm_answers", "lvlm_metrics"], "loopback_random", cfg)
        assert lb.requests() == asked + 3 * 4  # 3 settings x 4 rotations
        mat(["lvlm_leaderboard"])
        board = pd.read_parquet(storage / "tables" / "lvlm_leaderboard.parquet").set_index("model")
        assert (
            board.loc["loopback_random", "partial"]
            and board.loc["loopback_random", "subset"] == "items=1/setting"
        )
        pid = lb.pid
    assert _gone(pid)
    # the paired comparison and the record of stored LVLM answers, from the command line (no server needed)
    monkeypatch.setenv("SOCO_STORAGE", str(storage))
    monkeypatch.setenv("SOCO_LVLMS_DIR", str(specs))
    assert cli.main(["compare", "loopback_oracle", "loopback_random", "--lvlm", "--format", "json"]) == 0
    out = capsys.readouterr().out
    rows = json.loads(out[out.index("[") :])
    assert {r["metric"] for r in rows} == {
        f"{s}/{m}" for s in ("vis", "vis_desc", "desc") for m in ("average", "circular")
    }
    assert all(
        r["value_a"] == 100 and r["n_units"] == 1 for r in rows
    )  # the random run's 1 group per setting
    assert (
        cli.main(
            ["export-results", "loopback_random", str(tmp_path / "r.json"), "--format", "record", "--lvlm"]
        )
        == 0
    )
    rec = json.loads((tmp_path / "r.json").read_text())
    validate_record(rec)
    assert rec["n-samples"]["item_groups"]["evaluated"] == 3 and rec["subset"]["partial"]
    assert rec["n-samples"]["item_groups"]["requested"] > 3
    # the same as Every Eval Ever records (issue 55): one result per valued metric, its sidecar the answers
    if eee_checked_here():
        env = {"SOCO_STORAGE": str(storage), "SOCO_LVLMS_DIR": str(specs)}
        (agg,), samples = exported_eee(env, tmp_path / "eee", "loopback_random", "--lvlm")
        want = {
            f"{rec['family']}.{m}": r["value"] for m, r in rec["results"].items() if r["value"] is not None
        }
        assert {
            r["evaluation_result_id"]: r["score_details"]["score"] for r in agg["evaluation_results"]
        } == want
        (lines,) = samples.values()
        assert {x["evaluation_result_id"] for x in lines} == set(want)
        # `--family lvlm` names the same track as `--lvlm`
        (agg_family,), _ = exported_eee(env, tmp_path / "eee-family", "loopback_random", "--family", "lvlm")
        assert [r["score_details"] for r in agg_family["evaluation_results"]] == [
            r["score_details"] for r in agg["evaluation_results"]
        ]
