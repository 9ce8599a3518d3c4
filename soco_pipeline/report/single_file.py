"""The results page as one file, every image inlined as a base64 data URI (`soco report --single-file`);
`safe_name` keeps colons and other odd characters out of file names."""

from __future__ import annotations

import base64
import html
import re
from pathlib import Path
from urllib.parse import unquote, urlparse

from soco_pipeline.storage import write_bytes_atomic

MIME = {
    ".png": "image/png",
    ".jpg": "image/jpeg",
    ".jpeg": "image/jpeg",
    ".gif": "image/gif",
    ".svg": "image/svg+xml",
    ".webp": "image/webp",
}
IMG_SRC = re.compile(r'(<img\b[^>]*?\bsrc=")([^"]*)(")', re.IGNORECASE)


class SinglePageError(ValueError):
    """An image the page shows cannot be inlined (missing file, unknown type)."""


def safe_name(name: str) -> str:
    """`name` with every character other than letters, digits, `.`, `-` and `_` replaced by `_` (no colons)."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", name)


def default_single_file(index: str | Path) -> Path:
    """Where the single file goes by default: beside the page's folder, named after it (`report.html`)."""
    folder = Path(index).parent
    return folder.parent / f"{safe_name(folder.name)}.html"


def data_uri(path: Path) -> str:
    """`path`'s bytes as a `data:<mime>;base64,...` URI (the type from its suffix)."""
    mime = MIME.get(path.suffix.lower())
    if mime is None:
        raise SinglePageError(f"{path}: no image type for suffix {path.suffix!r} (known: {', '.join(MIME)})")
    return f"data:{mime};base64,{base64.b64encode(path.read_bytes()).decode('ascii')}"


def inline_images(page: str, folder: Path) -> str:
    """`page` with every local `<img>` source inlined as a data URI (any other is an error)."""

    def inline(m: re.Match) -> str:
        src = html.unescape(m.group(2))
        if src.startswith("data:"):
            return m.group(0)
        url = urlparse(src)
        if url.scheme not in ("", "file"):
            raise SinglePageError(f"the page shows {src!r}, not a file of {folder}: cannot inline it")
        path = Path(unquote(url.path)) if url.scheme == "file" else folder / unquote(src)
        if not path.is_file():
            raise SinglePageError(
                f"the page shows {src!r}, but {path} does not exist: rebuild it (soco report)"
            )
        return m.group(1) + data_uri(path) + m.group(3)

    return IMG_SRC.sub(inline, page)


def write_single_file(index: str | Path, out: str | Path | None = None) -> Path:
    """Write the page `index` with its images inlined to `out`; returns it."""
    index = Path(index)
    target = Path(out) if out else default_single_file(index)
    if ":" in target.name:
        raise ValueError(f"{target}: a file name with a colon; use e.g. {safe_name(target.name)!r}")
    page = inline_images(index.read_text(encoding="utf-8"), index.parent)
    target.parent.mkdir(parents=True, exist_ok=True)
    write_bytes_atomic(str(target), page.encode("utf-8"))
    return target
