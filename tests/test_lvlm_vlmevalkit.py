"""VLMEvalKit interop: TSV export/import round trip (with image reuse by index), imported items run through
the harness, and prediction workbooks (xlsx and tsv) scored by the official parser."""

import ast
import base64

import pandas as pd
import pytest

from soco_pipeline.lvlm.backends.openai import OpenAIBackend
from soco_pipeline.lvlm.cache import AnswerCache
from soco_pipeline.lvlm.metrics import lvlm_metrics
from soco_pipeline.lvlm.run import run_model
from soco_pipeline.lvlm.server import serve
from soco_pipeline.lvlm.vlmevalkit import (
    TSV_COLUMNS,
    VlmEvalKitError,
    export_tsv,
    import_tsv,
    score_workbook,
    setting_of,
)
from soco_pipeline.storage import read_bytes
from tests.lvlm_helpers import RandomAnswerer, answer_key, openai_spec, small_items

pytestmark = pytest.mark.unit


@pytest.fixture(scope="module")
def items(tmp_path_factory):
    return small_items(tmp_path_factory.mktemp("vek_items"), items_per_group=3)


def test_export_then_import_round_trips_every_setting(items, tmp_path):
    for setting, n_images in (("vis", 2), ("vis_desc", 2), ("desc", 1)):
        path = tmp_path / f"soco_pipeline_{setting}.tsv"
        n = export_tsv(items, setting, path)
        src = items[items.setting == setting].sort_values("index", ignore_index=True)
        assert n == len(src)
        tsv = pd.read_csv(path, sep="\t", dtype={"image": str})
        assert list(tsv.columns) == TSV_COLUMNS
        first = tsv.image.iloc[0]
        imgs = ast.literal_eval(first) if n_images == 2 else [first]
        assert len(imgs) == n_images
        assert base64.b64decode(imgs[-1]) == read_bytes(src.trg_render.iloc[0])
        assert setting_of(path) == setting
        back = import_tsv(path, str(tmp_path / "imported"))
        for col in ["index", "g_index", "rotation", "question", "A", "B", "C", "D", "answer"]:
            assert back[col].astype(str).tolist() == src[col].astype(str).tolist(), (setting, col)
        assert [read_bytes(p) for p in back.trg_render] == [read_bytes(p) for p in src.trg_render]
        if n_images == 2:
            assert [read_bytes(p) for p in back.src_render] == [read_bytes(p) for p in src.src_render]
        else:
            assert back.src_render.isna().all()


def test_short_image_value_reuses_another_rows_image(items, tmp_path):
    path = tmp_path / "soco_lvlm_txt_c.tsv"
    export_tsv(items, "desc", path)
    tsv = pd.read_csv(path, sep="\t", dtype={"image": str, "index": str})
    tsv.loc[1, "image"] = tsv.loc[0, "index"]  # row 1 now shows row 0's image
    tsv.to_csv(path, sep="\t", index=False)
    back = import_tsv(path, str(tmp_path / "imported"))
    assert back.setting.iloc[0] == "desc"
    assert back.trg_render.iloc[1] == back.trg_render.iloc[0]
    tsv.loc[2, "image"] = "999999"
    tsv.to_csv(path, sep="\t", index=False)
    with pytest.raises(VlmEvalKitError, match="999999"):
        import_tsv(path, str(tmp_path / "imported"))


def test_imported_items_run_and_workbooks_score_like_the_harness(items, tmp_path):
    path = tmp_path / "soco_lvlm_img_c.tsv"
    export_tsv(items, "vis", path)
    imported = import_tsv(path, str(tmp_path / "imported"))
    with serve(RandomAnswerer(seed=3)) as srv:
        spec = openai_spec(srv.base_url, "rnd", settings=["vis"])
        res = run_model(imported, spec, OpenAIBackend(spec), AnswerCache(str(tmp_path / "cache")))
    ours = lvlm_metrics(res.answers.assign(pair_group="x", supercategory="x"))
    ours = ours[ours.scope == "all"].set_index("metric")["value"]
    # A VLMEvalKit-style workbook of the same answers, in xlsx and tsv.
    wb = imported[["index", "question", "A", "B", "C", "D", "answer", "g_index"]].assign(
        prediction=res.answers.raw_answer.to_numpy()
    )
    wb.loc[0, "prediction"] = None  # an empty cell counts as wrong, not as "nan"
    wb.to_excel(tmp_path / "rnd_soco_lvlm_img_c.xlsx", index=False)
    wb.to_csv(tmp_path / "rnd.tsv", sep="\t", index=False)
    xlsx = score_workbook(tmp_path / "rnd_soco_lvlm_img_c.xlsx")
    tsv = score_workbook(tmp_path / "rnd.tsv")
    assert xlsx["rows"] == len(imported) and xlsx["groups"] == imported.g_index.nunique()
    first_right = bool(res.answers.correct.iloc[0])
    assert xlsx["average"] == pytest.approx(ours["average"] - 100 * first_right / len(imported))
    assert tsv["average"] == xlsx["average"] and tsv["circular"] == xlsx["circular"]
    assert xlsx["table"].parsed.iloc[0] == ""
    with pytest.raises(VlmEvalKitError, match="prediction"):
        wb.drop(columns="prediction").to_csv(tmp_path / "bad.tsv", sep="\t", index=False)
        score_workbook(tmp_path / "bad.tsv")


def test_answer_key_of_imported_items_matches(items, tmp_path):
    path = tmp_path / "soco_lvlm_imgtxt_c.tsv"
    export_tsv(items, "vis_desc", path)
    imported = import_tsv(path, str(tmp_path / "imported"))
    original = items[items.setting == "vis_desc"]
    assert sorted(answer_key(imported).items()) == sorted(answer_key(original).items())


def test_command_line_import_run_score(items, tmp_path, monkeypatch, capsys):
    from soco_pipeline.lvlm.__main__ import main

    monkeypatch.setenv("SOCO_STORAGE", str(tmp_path / "storage"))
    tsv = tmp_path / "soco_lvlm_txt_c.tsv"
    export_tsv(items, "desc", tsv)
    out = tmp_path / "imported.parquet"
    assert main(["import", str(tsv), "--out", str(out)]) == 0
    imported = pd.read_parquet(out)
    assert len(imported) == (items.setting == "desc").sum()
    with serve(RandomAnswerer(seed=5)) as srv:
        spec = tmp_path / "rnd.yaml"
        spec.write_text(f"backend: openai\nmodel: m\nbase_url: {srv.base_url}\nsettings: [desc]\n")
        assert main(["run", str(spec), "--items", str(out), "--out", str(tmp_path / "answers.parquet")]) == 0
        assert srv.requests == len(imported)
    printed = capsys.readouterr().out
    assert "circular" in printed and "desc" in printed
    answers = pd.read_parquet(tmp_path / "answers.parquet")
    answers.assign(prediction=answers.raw_answer).to_csv(tmp_path / "wb.tsv", sep="\t", index=False)
    assert main(["score", str(tmp_path / "wb.tsv")]) == 0
    assert f"average {100 * answers.correct.mean():.1f}" in capsys.readouterr().out
    assert main(["score", str(tmp_path / "missing.xlsx")]) == 2
