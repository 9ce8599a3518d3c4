"""Marked images as on the SOCO project page's figure, named by a hash of everything deciding the pixels."""

from __future__ import annotations

import hashlib
import io
import json
from collections.abc import Sequence
from functools import lru_cache

from PIL import Image, ImageDraw, ImageFont

from soco_pipeline.lvlm.protocol import LvlmProtocol
from soco_pipeline.storage import exists, join, read_bytes, write_bytes_atomic

RENDER_CODE_VERSION = "1"


@lru_cache(maxsize=8)
def _bold_font(size: int) -> ImageFont.FreeTypeFont:
    """DejaVu Sans Bold at `size` px (matplotlib ships the file, so no download and no system font)."""
    from matplotlib import font_manager

    path = font_manager.findfont(font_manager.FontProperties(family="DejaVu Sans", weight="bold"))
    return ImageFont.truetype(path, size)


def _load(uri: str, max_side: int) -> tuple[Image.Image, float]:
    """The RGB image downscaled so its longer side is at most max_side, and the scale applied."""
    img = Image.open(io.BytesIO(read_bytes(uri)))
    img = img.convert("RGB")
    scale = min(1.0, max_side / max(img.size))
    if scale < 1.0:
        size = (max(1, round(img.width * scale)), max(1, round(img.height * scale)))
        img = img.resize(size, Image.Resampling.LANCZOS)
    return img, scale


def _dot(draw: ImageDraw.ImageDraw, x: float, y: float, r: float, w: float, fill: str, outline: str) -> None:
    draw.ellipse((x - r - w, y - r - w, x + r + w, y + r + w), fill=outline)
    draw.ellipse((x - r, y - r, x + r, y + r), fill=fill)


def draw_marks(
    img: Image.Image,
    points: Sequence[tuple[float, float]],
    protocol: LvlmProtocol,
    letters: Sequence[str] | None = None,
) -> Image.Image:
    """Draw marks at pixel points on a copy of `img`: candidates with letters, or the query without."""
    out = img.copy()
    draw = ImageDraw.Draw(out)
    side = max(out.size)
    r = max(2.0, protocol.dot_radius * side)
    w = max(1.0, protocol.outline_width * side)
    color = protocol.candidate_color if letters is not None else protocol.query_color
    for x, y in points:
        _dot(draw, x, y, r, w, color, protocol.outline_color)
    if letters is not None:
        font = _bold_font(max(8, round(protocol.letter_size * side)))
        stroke = max(1, round(w))
        for (x, y), letter in zip(points, letters, strict=True):
            left, top, right, bottom = draw.textbbox((0, 0), letter, font=font, stroke_width=stroke)
            tw, th = right - left, bottom - top
            # Beside the dot, to its upper right; flipped inside when it would leave the image.
            tx = x + r + w if x + r + w + tw <= out.width else x - r - w - tw
            ty = y - r - th if y - r - th >= 0 else y + r
            draw.text(
                (tx - left, ty - top),
                letter,
                font=font,
                fill=protocol.candidate_color,
                stroke_width=stroke,
                stroke_fill=protocol.outline_color,
            )
    return out


def render_key(
    uri: str, points: Sequence[tuple[float, float]], letters: Sequence[str] | None, protocol: LvlmProtocol
) -> str:
    """The content key of one marked image (sha256 of the source, the marks and the settings)."""
    payload = {
        "uri": uri,
        "points": [[round(float(x), 3), round(float(y), 3)] for x, y in points],
        "letters": list(letters) if letters is not None else None,
        "marks": protocol.marks(),
        "code": RENDER_CODE_VERSION,
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


def render_path(root: str, key: str) -> str:
    """Where the marked image of `key` lives under the image store root."""
    return join(root, key[:2], f"{key}.jpg")


def render_marked(
    uri: str,
    points: Sequence[tuple[float, float]],
    protocol: LvlmProtocol,
    root: str,
    letters: Sequence[str] | None = None,
) -> str:
    """Render (unless already stored) the image at `uri` with marks at original-pixel `points`; its path."""
    path = render_path(root, render_key(uri, points, letters, protocol))
    if exists(path):
        return path
    img, scale = _load(uri, protocol.image_max_side)
    scaled = [(float(x) * scale, float(y) * scale) for x, y in points]
    out = draw_marks(img, scaled, protocol, letters)
    buf = io.BytesIO()
    out.save(buf, format="JPEG", quality=protocol.jpeg_quality, subsampling=0)
    write_bytes_atomic(path, buf.getvalue())
    return path
