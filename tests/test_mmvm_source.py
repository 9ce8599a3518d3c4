"""MMVM's configured source: the official layouts reach the items through the same code the assets call
(`tasks/mmvm/source.py`), foreign names kept, skipped rows counted and named, the carried None rule applied
to an import, and backbones not applicable to VLMEvalKit's mask-less TSV."""

from __future__ import annotations

import pandas as pd
import pytest

from soco_pipeline.backbones.spec import load_spec as load_backbone
from soco_pipeline.storage import PROJECT_ROOT
from soco_pipeline.tasks.mmvm.backbone_eval import backbone_predictions, oracle_predictions
from soco_pipeline.tasks.mmvm.config import MmvmConfig
from soco_pipeline.tasks.mmvm.official import MmvmFormatError
from soco_pipeline.tasks.mmvm.source import SKIPPED_NAME, load_scenes, source_items
from tests.mmvm_release import foreign_match_bench, generated, vlmevalkit_tsv
from tests.test_mmvm_core import tiny_config

pytestmark = pytest.mark.unit


@pytest.fixture(scope="module")
def release(tmp_path_factory):
    root = tmp_path_factory.mktemp("mmvm_release")
    cfg = tiny_config(cases={"train": 2, "test": 3})
    t = generated(cfg, root)
    tsv = foreign_match_bench(t, root / "release")
    vlm = vlmevalkit_tsv(t, root / "MMVMBench.tsv")
    return cfg, t, tsv, vlm, root


def _with_source(cfg, **source) -> MmvmConfig:
    return MmvmConfig.model_validate(cfg.model_dump(mode="json") | {"source": source})


def test_source_is_validated(tmp_path, release):
    cfg = release[0]
    with pytest.raises(ValueError, match="source.path is given exactly when"):
        _with_source(cfg, kind="match_bench")
    with pytest.raises(ValueError, match="match_bench does not exist"):
        _with_source(cfg, kind="match_bench", path=str(tmp_path))
    assert _with_source(cfg).source.kind == "generated"


def _tables(cfg, root, work) -> dict[str, pd.DataFrame]:
    scenes = load_scenes(cfg, str(work))
    items = source_items(
        cfg, scenes["cases"], scenes["objects"], scenes["images"], str(work / "m"), str(work)
    )
    return scenes | {"items": items}


def test_match_bench_source_keeps_foreign_names_and_carries_the_none_rule(release, tmp_path):
    cfg, t, tsv, _, root = release
    src = _with_source(cfg, kind="match_bench", path=str(root / "release"))
    tables = _tables(src, root, tmp_path)
    items = tables["items"]
    test = items[items["split"] == "test"]
    assert test["case_id"].tolist() == [f"vid{k}_clip" for k in range(len(tsv))]  # the release's folder names
    assert test["item_id"].tolist() == [f"vid{k}_clip/{1000 + k}" for k in range(len(tsv))]
    assert test["answer"].tolist() == tsv["answer"].tolist()
    assert test["data_source"].str.startswith("imported: ").all()
    assert items.loc[items["split"] == "train", "data_source"].str.startswith("simulated").all()
    oracle = oracle_predictions(tables)
    assert (oracle.loc[oracle["split"] == "test", "none_mode"] == "carried").all()
    assert oracle.loc[oracle["split"] == "test", "correct"].all()  # the identity oracle: 100 on the import
    assert "carried to the imported items" in oracle["none_rule"].iat[-1]


def test_vlmevalkit_source_skips_rows_as_vlmevalkit_does_and_names_them(release, tmp_path):
    cfg, t, _, vlm, root = release
    path = tmp_path / "MMVMBench.tsv"
    vlm.loc[1, "image"] = ""  # VLMEvalKit's skip_noimg drops it
    vlm.to_csv(path, sep="\t", index=False)
    src = _with_source(cfg, kind="vlmevalkit", path=str(path))
    logged: list[str] = []
    scenes = load_scenes(src, str(tmp_path / "w"), log=logged.append)
    items = source_items(
        src, scenes["cases"], scenes["objects"], scenes["images"], str(tmp_path / "m"), str(tmp_path / "w")
    )
    test = items[items["split"] == "test"]
    assert test["item_id"].tolist() == [f"vlmevalkit/{i}" for i in vlm["index"] if i != vlm["index"][1]]
    named = (tmp_path / "w" / SKIPPED_NAME).read_text()
    assert named.count("\n") == 1 and f"row 3 (index {vlm['index'][1]}): empty image cell" in named
    assert len(logged) == 1 and "1 row(s) skipped" in logged[0]
    spec = load_backbone(PROJECT_ROOT / "assets" / "backbones" / "dense_sift.yaml")
    pred, manifest = backbone_predictions(spec, scenes | {"items": items}, str(tmp_path / "features"))
    assert manifest is None and (pred["status"] == "not_applicable").all()
    assert "no object masks" in pred["reason"].iat[0]


def test_a_bad_row_in_the_source_is_named_not_dropped(release, tmp_path):
    cfg, _, _, vlm, _ = release
    path = tmp_path / "MMVMBench.tsv"
    bad = vlm.copy()
    bad.loc[2, "answer"] = "?"
    bad.to_csv(path, sep="\t", index=False)
    with pytest.raises(MmvmFormatError, match=r"row 4 \(index 502\): answer '\?' does not start"):
        load_scenes(_with_source(cfg, kind="vlmevalkit", path=str(path)), str(tmp_path / "w"))
