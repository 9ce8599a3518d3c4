"""Tampered stored predictions (issue 38): every Parquet table the pipeline writes carries a content checksum in
its footer; `soco compare`, the results records and re-scoring read the prediction tables only when it holds,
and refuse a table altered since, or one without a checksum, naming the file and the asset to re-materialize."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from soco_pipeline.cli import soco as cli
from soco_pipeline.storage import read_parquet, write_parquet_atomic
from soco_pipeline.trust.records import load_backbone_tables

pytestmark = pytest.mark.unit


def _answers(model: str, correct: np.ndarray) -> pd.DataFrame:
    """Stored LVLM answers (the columns lvlm_scores reads): 1 setting, 4 groups x 4 rotations."""
    n = len(correct)
    return pd.DataFrame(
        {
            "model": model,
            "setting": "vis",
            "pair_group": np.where(np.arange(n) % 2, "car", "bus"),
            "g_index": np.arange(n) // 4,
            "rotation": np.arange(n) % 4,
            "pair_id": [f"p{i // 4}" for i in range(n)],
            "correct": correct,
        }
    )


def _tamper_keeping_metadata(path: Path, column: str) -> None:
    """Flip a boolean column's first value and write the file back with its footer metadata (checksum) kept."""
    footer = pq.read_metadata(path).metadata
    table = pq.read_table(path)
    values = table.column(column).to_pylist()
    values[0] = not values[0]
    changed = table.set_column(table.schema.get_field_index(column), column, pa.array(values))
    pq.write_table(changed.replace_schema_metadata(footer), path)
    assert pq.read_metadata(path).metadata[b"soco.content_xxh3"] == footer[b"soco.content_xxh3"]


def test_compare_refuses_tampered_lvlm_answers(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("SOCO_STORAGE", str(tmp_path))
    folder = tmp_path / "tables" / "lvlm_answers"
    write_parquet_atomic(_answers("a", np.ones(16, bool)), str(folder / "a.parquet"))
    write_parquet_atomic(_answers("b", np.arange(16) % 3 == 0), str(folder / "b.parquet"))
    assert cli.main(["compare", "a", "b", "--lvlm", "--format", "json"]) == 0
    capsys.readouterr()

    _tamper_keeping_metadata(folder / "b.parquet", "correct")
    assert cli.main(["compare", "a", "b", "--lvlm"]) == 2
    err = capsys.readouterr().err
    assert (
        str(folder / "b.parquet") in err
        and "altered after it was written" in err
        and "lvlm_answers[b]" in err
    )

    _answers("b", np.ones(16, bool)).to_parquet(folder / "b.parquet")  # rewritten by another tool
    assert cli.main(["compare", "a", "b", "--lvlm"]) == 2
    assert "no content checksum" in capsys.readouterr().err


@pytest.mark.parametrize("table", ["predictions", "four_choice_predictions"])
def test_records_and_rescoring_refuse_tampered_prediction_tables(tmp_path, table):
    """load_backbone_tables feeds `soco export-results` (records), `soco compare` and re-scoring under another
    protocol: a prediction table altered after it was written is refused, the other tables still read."""
    root = tmp_path / "tables"
    tiny = pd.DataFrame({"pair_id": ["p0", "p1"], "ok": [True, False]})
    for asset in ("image_set", "keypoints", "image_pairs", "correspondences", "four_choice"):
        write_parquet_atomic(tiny, str(root / f"{asset}.parquet"))
    for asset in ("feature_manifest", "predictions", "four_choice_predictions", "metrics"):
        write_parquet_atomic(tiny, str(root / asset / "vit.parquet"))
    assert load_backbone_tables(str(root), "vit")[table].ok.tolist() == [True, False]

    _tamper_keeping_metadata(root / table / "vit.parquet", "ok")
    with pytest.raises(ValueError, match="altered after it was written") as err:
        load_backbone_tables(str(root), "vit")
    assert str(root / table / "vit.parquet") in str(err.value) and f"{table}[vit]" in str(err.value)


def test_every_pipeline_table_is_verified_when_read(tmp_path):
    """The IO manager and every reader go through read_parquet: a table with a checksum is verified (a
    flipped value is caught), one without (another tool's file) still reads where no checksum is required."""
    path = tmp_path / "t.parquet"
    write_parquet_atomic(pd.DataFrame({"x": np.arange(1000), "ok": np.arange(1000) % 2 == 0}), str(path))
    assert read_parquet(str(path)).x.sum() == 499500
    _tamper_keeping_metadata(path, "ok")
    with pytest.raises(ValueError, match="altered after it was written"):
        read_parquet(str(path))
    pd.DataFrame({"x": [1]}).to_parquet(path)
    assert read_parquet(str(path)).x.tolist() == [1]
    with pytest.raises(ValueError, match="no content checksum"):
        read_parquet(str(path), require_checksum=True)
