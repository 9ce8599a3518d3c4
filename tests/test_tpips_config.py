"""The TPIPS config is refused at load, naming the file and the field, for every rule the run depends on
(issue #38): a negative triplet count, a wrong type, an unknown field, "overall" in 2AFC, a prompt without its
clause, an official source without its folder."""

from __future__ import annotations

import pytest
import yaml

from soco_pipeline.tasks.tpips.config import DEFAULT_PATH, TpipsConfigError, load_config

pytestmark = pytest.mark.unit


def _write(tmp_path, edit) -> str:
    doc = yaml.safe_load(DEFAULT_PATH.read_text())
    edit(doc)
    path = tmp_path / "tpips.yaml"
    path.write_text(yaml.safe_dump(doc, allow_unicode=True))
    return str(path)


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda d: d["triplets"].update(n=-4), r"field 'triplets.n' must be > 0, got -4; fix the value"),
        (lambda d: d["triplets"].update(n=0), r"field 'triplets.n' must be > 0, got 0"),
        (lambda d: d.update(seed="zero"), r"field 'seed' must be int, got 'zero'"),
        (lambda d: d["learned"].update(epochs=True), r"field 'learned.epochs' must be int, got True"),
        (
            lambda d: d["observer"].update(n_anotators=5),
            r"unknown field\(s\) \['n_anotators'\] in 'observer'",
        ),
        (
            lambda d: d["observer"].update(temperature=0),
            r"field 'observer.temperature' must be > 0.0, got 0;",
        ),
        (
            lambda d: d["triplets"].update(vary_min=5, vary_max=3),
            r"vary_max \(3\) must be >= triplets.vary_min",
        ),
        (lambda d: d["triplets"].update(splits={"val": 1.0}), r"triplets.splits must name train and test"),
        (
            lambda d: d["afc"]["aspects"].update(editing=["colour", "overall"]),
            r"the paper's 2AFC has no overall",
        ),
        (
            lambda d: d["afc"].update(sources=["editing", "image_to_3d"]),
            r"\['image_to_3d'\] cannot be generated",
        ),
        (
            lambda d: d["lvlm"].update(triplet_prompt="Which image, {aspect}?"),
            r"must hold exactly one \{clause\}",
        ),
        (lambda d: d.update(aspects=["colour", "pose"]), r"'aspects' must include 'overall'"),
        (lambda d: d["source"].update(kind="official"), r"source.kind official needs source.path"),
        (lambda d: d["source"].update(kind="imported"), r"field 'source.kind' is 'imported'; use one of"),
    ],
)
def test_a_bad_config_is_refused_at_load_naming_the_file_and_field(tmp_path, edit, message):
    path = _write(tmp_path, edit)
    with pytest.raises(TpipsConfigError, match=message) as err:
        load_config(path)
    assert str(err.value).startswith(f"{path}: ")


def test_an_official_source_needs_its_files(tmp_path):
    path = _write(tmp_path, lambda d: d["source"].update(kind="official", path="no_such_folder"))
    with pytest.raises(TpipsConfigError, match=r"field 'source.path': .*no_such_folder holds no ooo.jsonl"):
        load_config(path)
    (tmp_path / "données").mkdir()
    (tmp_path / "données" / "ooo.jsonl").write_text("")
    path = _write(tmp_path, lambda d: d["source"].update(kind="official", path="données"))
    cfg = load_config(path)  # relative to the config file's folder
    assert cfg.source.path == str((tmp_path / "données").resolve()) and cfg.source.votes_are == "human"
    assert load_config().source.votes_are == "simulated"


def test_missing_file_and_bad_yaml_are_named(tmp_path):
    with pytest.raises(TpipsConfigError, match=r"TPIPS config file .*nope.yaml does not exist"):
        load_config(tmp_path / "nope.yaml")
    (tmp_path / "bad.yaml").write_text("seed: [1,\n")
    with pytest.raises(TpipsConfigError, match=r"bad.yaml: not valid YAML"):
        load_config(tmp_path / "bad.yaml")


def test_the_prompts_fill_the_clause():
    lvlm = load_config().lvlm
    assert lvlm.ask(lvlm.triplet_prompt, "overall") == (
        "Which image is the most different of the three overall? Answer with 1, 2 or 3."
    )
    assert "in terms of pose?" in lvlm.ask(lvlm.pairwise_prompt, "pose")
