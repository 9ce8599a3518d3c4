"""Average and circular accuracy, per scope; chance levels; specs and the item protocol."""

import numpy as np
import pandas as pd
import pytest

from soco_pipeline.lvlm.items import sample_items
from soco_pipeline.lvlm.loopback import SPEC_TEMPLATES, write_specs
from soco_pipeline.lvlm.metrics import RANDOM_CIRCULAR, lvlm_leaderboard, lvlm_metrics
from soco_pipeline.lvlm.protocol import LvlmProtocolError, load_lvlm_protocol
from soco_pipeline.lvlm.specs import LvlmSpecError, load_spec, parse_spec, scan_specs, spec_data_version
from soco_pipeline.storage import PROJECT_ROOT

pytestmark = pytest.mark.unit


def _answers(correct: np.ndarray, setting="vis", groups_per_cat: int | None = None) -> pd.DataFrame:
    n = len(correct)
    g = np.arange(n) // 4
    cats = np.where(g % 2 == 0, "car", "dog") if groups_per_cat is None else np.repeat(["car", "dog"], n // 2)
    return pd.DataFrame(
        {
            "model": "m",
            "setting": setting,
            "g_index": g,
            "rotation": np.arange(n) % 4,
            "pair_group": cats,
            "supercategory": np.where(cats == "car", "transportation", "animals"),
            "correct": correct,
            "error": "",
            "answer": "A",
            "parsed": np.where(correct, "A", "B"),
        }
    )


def test_average_and_circular_by_hand():
    # 3 items: all right; 3 of 4 right; none right.
    correct = np.array([1, 1, 1, 1, 1, 1, 0, 1, 0, 0, 0, 0], dtype=bool)
    m = lvlm_metrics(_answers(correct)).set_index(["scope", "group", "metric"])["value"]
    assert m[("all", "all", "average")] == pytest.approx(100 * 7 / 12)
    assert m[("all", "all", "circular")] == pytest.approx(100 / 3)
    # groups 0 and 2 are car, group 1 dog
    assert m[("category", "car", "circular")] == pytest.approx(50)
    assert m[("category", "dog", "average")] == pytest.approx(75)
    assert m[("supercategory", "animals", "circular")] == 0


def test_random_picks_give_25_and_0_4():
    rng = np.random.default_rng(0)
    n_groups = 200_000
    correct = rng.integers(0, 4, n_groups * 4) == 0
    m = lvlm_metrics(_answers(correct)).set_index(["scope", "group", "metric"])["value"]
    assert abs(m[("all", "all", "average")] - 25.0) < 0.3
    assert abs(m[("all", "all", "circular")] - RANDOM_CIRCULAR) < 0.06
    assert RANDOM_CIRCULAR == pytest.approx(0.390625)


def test_leaderboard_carries_reference_random_and_best_backbone():
    m = lvlm_metrics(_answers(np.ones(8, dtype=bool)))
    backbones = pd.DataFrame(
        {"backbone": ["a", "b"], "four_choice": [60.0, 70.0], "four_choice_circular": [40.0, 55.0]}
    )
    board = lvlm_leaderboard(m, backbones).set_index("model")
    assert board.loc["m", "vis_circular"] == 100 and board.loc["m", "kind"] == "evaluated"
    assert board.loc["random", "desc_average"] == 25
    assert (
        board.loc["GPT-4o", "desc_circular"] == 37.6 and "SOCO project page" in board.loc["GPT-4o", "source"]
    )
    assert board.loc["Qwen3-VL-8B", "vis_circular"] == 34.2
    assert board.loc["b (4-choice, best backbone)", "vis_circular"] == 55


def test_leaderboard_shows_errors_and_unparsable_answers():
    """Rows that failed and answers the parser read no letter from are counted per model on the board."""
    a = _answers(np.zeros(12, dtype=bool))
    a.loc[:3, "error"] = "HTTP 500"  # 4 failed rows
    a.loc[4:6, "parsed"] = ""  # 3 of the 8 answers received gave no letter
    m = lvlm_metrics(a)
    row = m[(m.scope == "all") & (m.metric == "average")].iloc[0]
    assert (row.n_rows, row.n_errors, row.n_unparsable) == (12, 4, 3)
    board = lvlm_leaderboard(m, reference=pd.DataFrame()).set_index("model")
    assert board.loc["m", "n_errors"] == 4 and board.loc["m", "unparsable_pct"] == pytest.approx(100 * 3 / 8)
    assert np.isnan(board.loc["random", "n_errors"])


def test_specs_validate_and_presets_load(tmp_path):
    presets = sorted((PROJECT_ROOT / "assets" / "lvlm_presets").glob("*.yaml"))
    assert len(presets) >= 4
    for p in presets:
        spec = load_spec(p)
        assert spec.name == p.stem
    assert load_spec(PROJECT_ROOT / "assets" / "lvlm_presets" / "gpt4o.yaml").api_key_env == "OPENAI_API_KEY"
    ok = {"backend": "openai", "model": "m", "base_url": "http://127.0.0.1:8000/v1/"}
    assert parse_spec(ok, "x").base_url == "http://127.0.0.1:8000"
    for bad, match in [
        ({**ok, "backend": "grpc"}, "backend"),
        ({**ok, "base_url": "127.0.0.1"}, "base_url"),
        ({**ok, "api_key_env": "sk-abc 123"}, "NAME of an environment variable"),
        ({**ok, "base_url": "https://user:sk-secret@api.example.com"}, "credentials"),
        ({**ok, "temperatur": 0}, "unknown field"),
        ({**ok, "settings": ["vis", "audio"]}, "settings"),
        ({**ok, "max_concurrency": 0}, "max_concurrency"),
        ({"backend": "transformers", "model": "m", "dtype": "int3"}, "dtype"),
    ]:
        with pytest.raises(LvlmSpecError, match=match):
            parse_spec(bad, "x", "x.yaml")
    # The active folder holds no spec (every real model needs a server or weights); scanning copes.
    assert scan_specs(PROJECT_ROOT / "assets" / "lvlms") == ({}, {})
    assert scan_specs(tmp_path / "missing") == ({}, {})
    (tmp_path / "broken.yaml").write_text("backend: openai\n")
    valid, invalid = scan_specs(tmp_path)
    assert not valid and "model" in invalid["broken"]


def test_a_specs_data_version_leaves_out_what_changes_no_answer(tmp_path):
    """Issue 53: the demo's loopback specs are written with the server's free port, a new one each start; the
    port names no model, so the spec's data version (lvlm_spec's, what staleness compares) stays. A port of
    a server elsewhere, the model and a sampling setting do move it; a comment does not."""
    first = write_specs(tmp_path / "a", "http://127.0.0.1:40001")
    second = write_specs(tmp_path / "b", "http://127.0.0.1:40002")
    assert first.keys() == second.keys() == {p.stem for p in SPEC_TEMPLATES.glob("*.yaml")}
    for name in first:
        assert first[name].read_text() != second[name].read_text()  # the files do differ: the port
        assert spec_data_version(first[name]) == spec_data_version(second[name])
    assert scan_specs(tmp_path / "a")[0] == scan_specs(tmp_path / "b")[0]
    oracle = first["loopback_oracle"].read_text()
    version = spec_data_version(first["loopback_oracle"])

    def version_of(text: str) -> str:
        path = tmp_path / "c" / "loopback_oracle.yaml"
        path.parent.mkdir(exist_ok=True)
        path.write_text(text)
        return spec_data_version(path)

    assert version_of("# a comment\n" + oracle) == version
    assert version_of(oracle.replace("127.0.0.1:40001", "localhost:40001")) != version  # another host
    assert version_of(oracle.replace("model: oracle", "model: random")) != version
    assert version_of(oracle.replace("temperature: 0", "temperature: 0.5")) != version
    remote = oracle.replace("127.0.0.1:40001", "10.0.0.5:8000")
    assert version_of(remote) != version_of(remote.replace(":8000", ":8001"))  # not on this machine: kept
    assert version_of("backend: openai\n") != version  # a spec that does not load: its file's hash


def test_protocol_file_and_item_sample(tmp_path):
    proto = load_lvlm_protocol()
    assert proto.query_color == "#E23A3A" and proto.candidate_color == "#2F8F4E"
    text = (PROJECT_ROOT / "assets" / "lvlm_protocol.yaml").read_text()
    bad = tmp_path / "p.yaml"
    bad.write_text(text.replace('query_color: "#E23A3A"', 'query_color: "red"'))
    with pytest.raises(LvlmProtocolError, match="query_color"):
        load_lvlm_protocol(bad)
    four = pd.DataFrame(
        {
            "pair_id": [f"p{i}" for i in range(40)],
            "src_keypoint": "k",
            **{c: "x" for c in ["option_a", "option_b", "option_c", "option_d"]},
            "answer": 0,
        }
    )
    pairs = pd.DataFrame(
        {
            "pair_id": four.pair_id,
            "level": "intra",
            "pair_group": np.repeat(["car", "dog"], 20),
            "src_image": "a",
            "trg_image": "b",
            "src_category": "car",
            "trg_category": "car",
        }
    )
    from dataclasses import replace

    a = sample_items(four, pairs, replace(proto, items_per_group=5), seed=0)
    b = sample_items(four, pairs, replace(proto, items_per_group=5), seed=0)
    c = sample_items(four, pairs, replace(proto, items_per_group=5), seed=1)
    assert a.groupby("pair_group").size().tolist() == [5, 5]
    pd.testing.assert_frame_equal(a, b)
    assert set(a.pair_id) != set(c.pair_id)
