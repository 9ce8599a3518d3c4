"""TPIPS's released odd-one-out format, read as released and written from our tables (issue #54): a fixture of
our own in that format keeps exactly the rows, shares and counts the format defines; bad lines are refused
naming the file, the line and the fix; our generated set exported to the format and read back gives the same
tables, image ids included (our extra field `image_ids`; a release's file, which has none, reads with the paths
as ids); the config takes `image_root` and `split`."""

from __future__ import annotations

import json

import pandas as pd
import pytest
import yaml
from PIL import Image

from soco_pipeline.tasks.tpips.config import DEFAULT_PATH, TpipsConfigError, load_config
from soco_pipeline.tasks.tpips.export import export_release
from soco_pipeline.tasks.tpips.formats import TpipsFormatError, load_afc_jsonl
from soco_pipeline.tasks.tpips.release import is_release_file, read_release
from soco_pipeline.tasks.tpips.schemas import ooo_problems
from soco_pipeline.tasks.tpips.source import (
    afc_table,
    official_afc,
    official_images,
    official_ooo,
    ooo_table,
    renders,
    source_note,
)
from tests.tpips_helpers import tiny_config, write_release_fixture

pytestmark = pytest.mark.unit


def test_a_release_file_keeps_what_the_format_defines(tmp_path):
    expect = write_release_fixture(tmp_path)
    assert is_release_file(str(expect["file"]))
    got = read_release(str(expect["file"]), str(expect["image_root"]), judgements="human")
    rows = got.rows
    # one row per usable (triplet, factor): names as written, y = the shares (normalised where they do not sum
    # to 1), image ids = the paths as written, the whole file in the reader's split
    assert rows.triplet_id.tolist() == [f"ooo_test.jsonl:{line}" for line, *_ in expect["rows"]]
    assert rows.aspect.tolist() == [name for _, name, _, _ in expect["rows"]]
    assert rows[["y_0", "y_1", "y_2"]].to_numpy().tolist() == [y for _, _, y, _ in expect["rows"]]
    assert rows[["image_0", "image_1", "image_2"]].to_numpy().tolist() == [p for *_, p in expect["rows"]]
    assert (rows.split == "test").all() and (rows.judgements == "human").all()
    assert rows.votes.map(len).eq(0).all() and rows.cannot_tell.eq(0).all()  # the release carries no counts
    assert (
        got.images == expect["images"]
    )  # nested folders and foreign names, the dropped triplet's not listed
    s = got.summary
    assert (s["lines"], s["factors"], s["kept"]) == (expect["lines"], expect["factors"], len(expect["rows"]))
    assert s["skipped_factors"] == expect["skipped"] == len(s["skipped"])
    assert s["dropped_lines"] == [f"{expect['file']}:{n}" for n in expect["dropped_lines"]]
    assert s["renormalised"] == expect["renormalised"] and s["label_not_top"] == 0
    assert any('label "p3"' in x for x in s["skipped"]) and any("no label" in x for x in s["skipped"])


def _one(tmp_path, **changes) -> str:
    for name in ("a.png", "b.png", "c.png"):
        (tmp_path / name).write_bytes(b"png")
    line = {"p0_path": "a.png", "p1_path": "b.png", "p2_path": "c.png"}
    line |= {"factors": [{"name": "colour", "label": "p0", "probs": [0.6, 0.2, 0.2]}]}
    line = {k: v for k, v in (line | changes).items() if v is not None}
    path = tmp_path / "ooo.jsonl"
    path.write_text(json.dumps(line) + "\n")
    return str(path)


def _factor(**changes) -> list[dict]:
    return [{"name": "colour", "label": "p0", "probs": [0.6, 0.2, 0.2]} | changes]


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        (
            {"p1_path": None},
            r"ooo.jsonl:1: missing field\(s\) \['p1_path'\]; a released odd-one-out line holds",
        ),
        ({"p2_path": ""}, r"ooo.jsonl:1: 'p2_path' must be an image path"),
        ({"factors": _factor(probs=[0.5, 0.5])}, r"ooo.jsonl:1 factor 0 \('colour'\): 'probs' must list 3"),
        ({"factors": _factor(probs=[0.6, -0.2, 0.6])}, r"ooo.jsonl:1 factor 0 .*non-negative finite numbers"),
        (
            {"factors": _factor(probs=[0.6, "0.2", 0.2])},
            r"ooo.jsonl:1 factor 0 .*non-negative finite numbers",
        ),
        ({"factors": _factor(probs=[True, 0, 0])}, r"ooo.jsonl:1 factor 0 .*non-negative finite numbers"),
        ({"factors": _factor(probs=[0, 0, 0])}, r"sum to 0 \(no vote\); give the shares or drop the factor"),
        ({"factors": _factor(name="")}, r"ooo.jsonl:1 factor 0: no 'name'; give the aspect"),
        ({"factors": _factor() * 2}, r"ooo.jsonl:1 factor 1: factor 'colour' twice in one triplet"),
        (
            {"p0_path": "missing/a.png"},
            r"ooo.jsonl:1: image 'missing/a.png' does not exist under the image root",
        ),
        (
            {"factors": _factor(votes=[3, 1, 0])},
            r"votes \[3, 1, 0\] \+ cannot_tell 0 != the annotator count 5",
        ),
        ({"factors": _factor(votes=[1, 3, 1])}, r"does not give the shares 'probs'"),
        ({"split": "holdout"}, r"ooo.jsonl:1: split 'holdout' is not one of"),
        (
            {"image_ids": ["a", "b", "c"]},
            r"ooo.jsonl:1: extra field 'image_ids' must map p0, p1, p2 to non-empty image ids",
        ),
        ({"image_ids": {"p0": "a", "p1": "b"}}, r"ooo.jsonl:1: extra field 'image_ids' must map p0, p1, p2"),
        ({"image_ids": {"p0": "a", "p1": " ", "p2": "c"}}, r"extra field 'image_ids' must map p0, p1, p2"),
        (
            {"image_ids": {"p0": "x", "p1": "x", "p2": "c"}},
            r"ooo.jsonl:1: image id 'x' names 'b.png' here but 'a.png' on line 1; one id names one image",
        ),
    ],
)
def test_bad_release_lines_are_refused_naming_file_line_and_fix(tmp_path, changes, message):
    with pytest.raises(TpipsFormatError, match=message):
        read_release(_one(tmp_path, **changes))


def test_an_unusable_label_is_skipped_and_counted_not_refused(tmp_path):
    got = read_release(_one(tmp_path, factors=_factor() + _factor(name="pose", label="p4", probs="junk")))
    assert got.rows.aspect.tolist() == ["colour"] and got.summary["skipped_factors"] == 1
    got = read_release(_one(tmp_path, factors=_factor(label="odd")))
    assert got.rows.empty and got.images == [] and got.summary["dropped_triplets"] == 1


def _generated(tmp_path):
    """The generated set's tpips_images, tpips_ooo and tpips_afc, made as the assets make them."""
    cfg = tiny_config(6, 4)
    images, triplets, items, _ = renders(cfg, str(tmp_path / "renders"))
    ooo, _ = ooo_table(cfg, images, triplets)
    afc, _ = afc_table(cfg, images, items)
    return cfg, ooo, afc, images


def _official(cfg, path, **source):
    return cfg.with_updates(
        source={"kind": "official", "path": str(path), "judgements": "simulated"} | source
    )


def test_export_to_the_release_and_back_gives_the_same_tables(tmp_path):
    cfg, ooo, afc, images = _generated(tmp_path)
    out = tmp_path / "export"
    counts = export_release(ooo, afc, images, str(out))
    assert counts["triplets"] == ooo.triplet_id.nunique() and counts["ooo_rows"] == len(ooo)
    first = json.loads((out / "ooo.jsonl").read_text().splitlines()[0])
    assert {"p0_path", "p1_path", "p2_path", "factors"} <= set(first)
    assert {"name", "label", "probs"} <= set(first["factors"][0])
    # the generator's ids have no file suffix: the paths written differ from them, the ids ride along
    assert first["p0_path"] == first["image_ids"]["p0"] + ".png"
    assert json.loads((out / "afc.jsonl").read_text().splitlines()[0])["image_ids"].keys() == {
        "ref",
        "x0",
        "x1",
    }
    back_cfg = _official(cfg, out, split="val")  # every exported line names its own split
    back, summary = official_ooo(back_cfg)
    assert summary["format"] == "release" and summary["skipped_factors"] == summary["dropped_triplets"] == 0
    # identical tables, image ids included
    pd.testing.assert_frame_equal(back, ooo)
    afc_back, _ = official_afc(back_cfg)
    pd.testing.assert_frame_equal(afc_back, afc)
    assert not ooo_problems(back, back_cfg, released=True)
    # tpips_images: every image the tables name, in the same order, with the same id, size, category and role;
    # its uri is its file under the image root (the folder written), with the same bytes. (The generator's own
    # columns, its factor values and object_area, are not in the release; images no kept row names are not
    # written.)
    images_back = official_images(back_cfg)
    named = {*ooo.image_0, *ooo.image_1, *ooo.image_2, *afc.ref, *afc.x0, *afc.x1}
    kept = images[images.image_id.isin(named)].reset_index(drop=True)
    cols = ["image_id", "width", "height", "category", "role"]
    pd.testing.assert_frame_equal(images_back[cols], kept[cols])
    assert images_back.uri.str.startswith(f"{out}/").all()
    assert [open(u, "rb").read() for u in images_back.uri] == [open(u, "rb").read() for u in kept.uri]
    # and a release read, written and read again is the same, image ids included
    export_release(back, afc_back, images_back, str(tmp_path / "again"))
    again_cfg = _official(cfg, tmp_path / "again")
    pd.testing.assert_frame_equal(official_ooo(again_cfg)[0], back)
    pd.testing.assert_frame_equal(official_afc(again_cfg)[0], afc_back)
    pd.testing.assert_frame_equal(official_images(again_cfg)[cols], images_back[cols])
    with pytest.raises(FileExistsError, match="pass --force"):
        export_release(back, afc_back, images_back, str(tmp_path / "again"))


def test_a_release_read_back_keeps_its_paths_as_ids(tmp_path):
    # a file of the release itself (no extra fields) read, exported and read again: the ids stay the paths
    expect = write_release_fixture(tmp_path)
    cfg = _official(tiny_config(), expect["file"], image_root=str(expect["image_root"]))
    ooo, images = official_ooo(cfg)[0], official_images(cfg)
    assert images.image_id.tolist() == expect["images"]
    export_release(ooo, official_afc(cfg)[0], images, str(tmp_path / "out"))
    back_cfg = _official(tiny_config(), tmp_path / "out")
    pd.testing.assert_frame_equal(official_ooo(back_cfg)[0], ooo)
    back_images = official_images(back_cfg)
    assert back_images.image_id.tolist() == expect["images"]
    assert back_images.uri.tolist() == [str(tmp_path / "out" / p) for p in expect["images"]]


def _lines(path, *lines) -> str:
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return str(path)


def test_one_image_id_names_one_file(tmp_path):
    for name in ("a.png", "b.png", "c.png"):
        (tmp_path / name).write_bytes(b"png")
    paths = {"p0_path": "a.png", "p1_path": "b.png", "p2_path": "c.png"}
    factors = {"factors": _factor()}
    ids = {"image_ids": {"p0": "A", "p1": "B", "p2": "C"}}
    got = read_release(_lines(tmp_path / "ooo.jsonl", paths | factors | ids, paths | factors | ids))
    assert got.rows[["image_0", "image_1", "image_2"]].to_numpy().tolist() == [["A", "B", "C"]] * 2
    assert got.images == ["A", "B", "C"] and got.paths == {"A": "a.png", "B": "b.png", "C": "c.png"}
    # a line without ids names its images by path: "a.png" is then an id of a.png, not of b.png
    bad = paths | factors | {"image_ids": {"p0": "b.png", "p1": "x", "p2": "y"}}
    with pytest.raises(
        TpipsFormatError, match=r"ooo.jsonl:2: image id 'b.png' names 'a.png' here but 'b.png' on line 1"
    ):
        read_release(_lines(tmp_path / "ooo.jsonl", paths | factors, bad))
    # our 2AFC layout: the same rule, and `image_ids` read as the ids
    afc = {
        "ref": "a.png",
        "x0": "b.png",
        "x1": "c.png",
        "aspect": "colour",
        "votes": [4, 1],
        "source": "editing",
    }
    afc_ids = {"image_ids": {"ref": "A", "x0": "B", "x1": "C"}}
    rows, _ = load_afc_jsonl(_lines(tmp_path / "afc.jsonl", afc | afc_ids))
    assert rows[["ref", "x0", "x1"]].to_numpy().tolist() == [["A", "B", "C"]]
    clash = afc | {"aspect": "pose", "x1": "a.png"} | afc_ids
    with pytest.raises(TpipsFormatError, match=r"afc.jsonl:2: image id 'C' names 'a.png' here but 'c.png'"):
        load_afc_jsonl(_lines(tmp_path / "afc.jsonl", afc | afc_ids, clash))
    with pytest.raises(TpipsFormatError, match=r"afc.jsonl:1: extra field 'image_ids' must map ref, x0, x1"):
        load_afc_jsonl(_lines(tmp_path / "afc.jsonl", afc | {"image_ids": {"ref": "A"}}))
    # across the two files of a folder: one id, one file
    folder = tmp_path / "set"
    folder.mkdir()
    for name in ("a.png", "b.png", "c.png"):
        Image.new("RGB", (4, 4)).save(folder / name)
    _lines(folder / "ooo.jsonl", paths | factors | ids)
    _lines(folder / "afc.jsonl", afc | {"image_ids": {"ref": "B", "x0": "A", "x1": "C"}})
    cfg = _official(tiny_config().with_updates(afc={"sources": ["editing"]}), folder)
    with pytest.raises(TpipsFormatError, match=r"afc.jsonl: image id 'B' names 'a.png' there but 'b.png' in"):
        official_images(cfg)
    _lines(folder / "afc.jsonl", afc | afc_ids)
    assert official_images(cfg).image_id.tolist() == ["A", "B", "C"]


def test_a_release_file_with_an_image_root_reads_through_the_source(tmp_path):
    expect = write_release_fixture(tmp_path)
    doc = yaml.safe_load(DEFAULT_PATH.read_text())
    doc["source"] = {
        "kind": "official",
        "path": "release/ooo_test.jsonl",
        "image_root": "release/Bild-Wurzel",
    }
    (tmp_path / "tpips.yaml").write_text(yaml.safe_dump(doc, allow_unicode=True))
    cfg = load_config(tmp_path / "tpips.yaml")  # both relative to the config file's folder
    assert cfg.source.image_root == str(expect["image_root"].resolve()) and cfg.source.split == "test"
    ooo, summary = official_ooo(cfg)
    assert len(ooo) == len(expect["rows"]) and (ooo.judgements == "human").all()
    assert official_afc(cfg)[0].empty  # a file holds no 2AFC set
    images = official_images(cfg)
    assert images.image_id.tolist() == expect["images"] and set(images.width) == {40, 48}
    # factor names as written: outside the config's aspects, and no check refuses them
    assert set(ooo.aspect) - set(cfg.aspects) and not ooo_problems(ooo, cfg, released=True)
    assert ooo_problems(ooo, cfg) and "aspects outside the vocabulary" in ooo_problems(ooo, cfg)[0]
    note = source_note(cfg)
    assert (
        f"{summary['skipped_factors']} factors skipped" in note
        and "no usable factor (line 4)" in note
        and "line 2: factor 'texture' no label" in note
    )


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ({"kind": "official", "path": "f.jsonl", "image_root": "nope"}, r"field 'source.image_root': .*nope"),
        (
            {"kind": "official", "path": "f.jsonl", "split": "holdout"},
            r"source.split 'holdout' is not one of",
        ),
        ({"image_root": "."}, r"source.path and source.image_root are only read with source.kind official"),
    ],
)
def test_bad_release_source_fields_are_refused(tmp_path, source, message):
    (tmp_path / "f.jsonl").write_text("")
    doc = yaml.safe_load(DEFAULT_PATH.read_text())
    doc["source"] = source
    (tmp_path / "tpips.yaml").write_text(yaml.safe_dump(doc))
    with pytest.raises(TpipsConfigError, match=message):
        load_config(tmp_path / "tpips.yaml")


def test_the_simulated_label_and_the_board_notes_follow_the_data():
    from soco_pipeline.report.console import headlines_from_boards
    from soco_pipeline.report.page import simulated_parts
    from soco_pipeline.tasks.tpips.leaderboard import board_markdown, board_notes

    settings = type("Settings", (), {"source": "official"})()
    for marker, simulated in (("human", False), ("simulated", True)):
        board = pd.DataFrame({"model": ["m"], "method": ["mid"], "ooo": [50.0], "judgements": [marker]})
        assert headlines_from_boards({"tpips": board}).simulated.tolist() == [simulated]
        assert any("TPIPS" in p for p in simulated_parts(settings, {"tpips": board})) == simulated
    # the shipped config generates data with seed 0, a design seed: the board says so under its marker
    notes = board_notes(load_config())
    assert notes == [
        "data seed 0 is a design seed (design 0-9, report 100-105; docs/tpips.md): the learned heads' figures "
        "are design figures"
    ]
    assert board_notes(load_config().with_updates(seed=100)) == []
    board = pd.DataFrame({"model": ["m"], "method": ["mid"], "ooo": [50.0], "judgements": ["simulated"]})
    assert board_markdown(board, notes).split("\n")[:2] == [
        "judgements: simulated (a noisy-observer model, not people)",
        notes[0],
    ]


def test_our_layout_keeps_working_with_an_image_root(tmp_path):
    from tests.tpips_helpers import write_official_fixture

    expect = write_official_fixture(tmp_path / "images")
    (tmp_path / "set").mkdir()
    for name in ("ooo.jsonl", "afc.jsonl"):
        (tmp_path / "images" / name).rename(tmp_path / "set" / name)
    cfg = _official(
        tiny_config().with_updates(afc={"sources": ["editing", "novel_view"]}),
        tmp_path / "set",
        image_root=str(tmp_path / "images"),
    )
    assert not is_release_file(str(tmp_path / "set" / "ooo.jsonl"))
    ooo, summary = official_ooo(cfg)
    assert len(ooo) == expect["ooo_kept"] and summary["pruned_cannot_tell"] == 1 and "format" not in summary
    assert sorted(official_images(cfg).image_id) == sorted(expect["images"])
    assert "(our layout): 23 of 24 (triplet, aspect) lines kept" in source_note(cfg)
