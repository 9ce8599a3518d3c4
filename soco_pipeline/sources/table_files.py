"""Workbooks made elsewhere read by what their bytes are; an unknown encoding is refused, never guessed."""

from __future__ import annotations

import codecs
import io
from pathlib import Path

import pandas as pd

XLSX_MAGIC = b"PK\x03\x04"
XLS_MAGIC = b"\xd0\xcf\x11\xe0"
BOMS = (
    (codecs.BOM_UTF8, "utf-8-sig"),
    (codecs.BOM_UTF16_LE, "utf-16"),
    (codecs.BOM_UTF16_BE, "utf-16"),
)


class TableFileError(ValueError):
    """A workbook file that cannot be read as given; the message names the file (and line) and the fix."""


def decode_text(data: bytes, path: str) -> str:
    """The text of a .tsv / .csv file: by its byte-order mark, else UTF-8, else TableFileError."""
    for bom, codec in BOMS:
        if data.startswith(bom):
            return data.decode(codec)
    if b"\x00" in data[:4096]:
        raise TableFileError(
            f"{path}: holds NUL bytes, so it is not UTF-8 text (UTF-16 without a byte-order mark?); save it as "
            f"UTF-8 (in Excel: 'CSV UTF-8' or 'Unicode Text'; or `iconv -f UTF-16LE -t UTF-8 {path} > "
            f"{Path(path).stem}.utf8{Path(path).suffix}`) and score that file"
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        start = data.rfind(b"\n", 0, e.start) + 1
        column = len(data[start : e.start].decode("utf-8", "replace")) + 1
        raise TableFileError(
            f"{path}:{line}: not UTF-8 (byte 0x{data[e.start]:02x} at column {column}); the file is in another "
            f"encoding (Latin-1 or Windows-1252, say), which its bytes cannot tell. Save it as UTF-8 (in Excel: "
            f"'CSV UTF-8'; or `iconv -f LATIN1 -t UTF-8 {path} > {Path(path).stem}.utf8{Path(path).suffix}` "
            "when it is Latin-1) and score that file"
        ) from None


def read_table_file(path: str | Path, dtype: type | None = None) -> pd.DataFrame:
    """A workbook's first sheet, or a .tsv / .csv file, read by what its bytes are."""
    path = Path(path)
    data = path.read_bytes()
    if data.startswith(XLSX_MAGIC):
        return pd.read_excel(io.BytesIO(data), sheet_name=0, dtype=dtype, engine="openpyxl")
    if data.startswith(XLS_MAGIC):
        raise TableFileError(
            f"{path}: an Excel 97-2003 workbook (.xls), which is not read here; save it as .xlsx (or as a UTF-8 "
            ".tsv) and score that file"
        )
    text = decode_text(data, str(path))
    sep = "\t" if path.suffix.lower() == ".tsv" else ","
    try:
        return pd.read_csv(io.StringIO(text), sep=sep, dtype=dtype)
    except pd.errors.ParserError as e:
        kind = "tab" if sep == "\t" else "comma"
        raise TableFileError(
            f"{path}: not a {kind}-separated table ({e}); check the file's name and contents"
        ) from None
