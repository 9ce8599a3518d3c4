"""Bad input files of issue 58 (reliability round 5), injected for real: an FG-BMK official source listing a
file that is not an image, prediction workbooks in UTF-16 / Latin-1 / an xlsx named .tsv, formula cells in a
workbook, and a model name too long for a file name. Each gets an error naming the file (and line or field)
and the fix, or is read correctly where that is unambiguous; nothing the user gave is changed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from PIL import Image

from soco_pipeline.tasks.fgbmk.readers import FgbmkFormatError, items_from_dataset, read_machine_dataset
from tests.faults import child_env

pytestmark = pytest.mark.unit

SOCO = [str(Path(sys.executable).parent / "soco")]


def fgbmk_folder(root: Path) -> Path:
    """A two-class machine-oriented dataset: train.csv / test.csv / classes.txt and 8 small JPEGs."""
    folder = root / "mini"
    (folder / "imgs").mkdir(parents=True)
    (folder / "classes.txt").write_text("gull\nwolf\n")
    for split, n in (("train", 3), ("test", 1)):
        lines = []
        for c in (0, 1):
            for i in range(n):
                Image.new("RGB", (40, 32), (200 * c, 40, 40)).save(folder / f"imgs/{split}_{c}_{i}.jpg")
                lines.append(f"imgs/{split}_{c}_{i}.jpg,{c}")
        (folder / f"{split}.csv").write_text("\n".join(lines) + "\n")
    return folder


def test_fgbmk_file_that_is_not_an_image_is_named_with_its_csv_line(tmp_path):
    folder = fgbmk_folder(tmp_path)
    bad = folder / "imgs" / "train_1_1.jpg"  # line 5 of train.csv
    bad.write_bytes(b"<html>404 Not Found</html>")
    before = {p: p.read_bytes() for p in folder.rglob("*") if p.is_file()}
    ds = read_machine_dataset(str(folder))
    with pytest.raises(FgbmkFormatError) as e:
        items_from_dataset(ds)
    msg = str(e.value)
    assert msg.startswith(f"{folder}/train.csv:5: {bad} is not a readable image (UnidentifiedImageError")
    assert "it starts b'<html>404 Not Fo'" in msg and "replace it with the JPEG/PNG image, or remove line 5" in msg
    assert "LocalFileOpener" not in msg
    assert {p: p.read_bytes() for p in folder.rglob("*") if p.is_file()} == before  # nothing touched
    Image.new("RGB", (40, 32), (200, 40, 40)).save(bad, format="JPEG")  # the fix the message gives
    items = items_from_dataset(read_machine_dataset(str(folder)))
    assert len(items) == 8 and set(items.width) == {40}
