"""Marks as on the project page: colours at the keypoint pixels, letters beside the candidates, caching."""

import io

import numpy as np
import pytest
from PIL import Image

from soco_pipeline.lvlm.protocol import load_lvlm_protocol
from soco_pipeline.lvlm.render import draw_marks, render_marked
from soco_pipeline.storage import read_bytes, write_bytes_atomic

pytestmark = pytest.mark.unit


def _rgb(hex_color: str) -> np.ndarray:
    return np.array([int(hex_color[i : i + 2], 16) for i in (1, 3, 5)])


def _photo(w=900, h=600) -> Image.Image:
    """A textured background (gradient plus a seeded noise) so marks are not found by accident."""
    rng = np.random.default_rng(0)
    yy, xx = np.mgrid[0:h, 0:w]
    arr = np.stack([xx * 255 // w, yy * 255 // h, np.full_like(xx, 90)], -1) + rng.integers(0, 30, (h, w, 3))
    return Image.fromarray(np.clip(arr, 0, 255).astype(np.uint8))


def test_query_and_candidate_colours_at_the_keypoint_pixels():
    proto = load_lvlm_protocol()
    img = _photo()
    query = np.asarray(draw_marks(img, [(120.4, 333.7)], proto))
    assert (query[333, 120] == _rgb(proto.query_color)).all()
    r = proto.dot_radius * 900
    w = proto.outline_width * 900
    ring = query[333, int(120.4 + r + w / 2)]  # inside the white outline
    assert (ring == 255).all()

    points = [(50, 40), (850, 40), (450, 300), (860, 570)]  # corners: letters must stay inside
    cand = np.asarray(draw_marks(img, points, proto, letters="ABCD"))
    green = _rgb(proto.candidate_color)
    for x, y in points:
        assert (cand[y, x] == green).all()
    # Bold green letters beside each dot: green pixels outside the dots, near each point.
    dist = np.min(
        [np.hypot(*np.mgrid[0:600, 0:900][::-1] - np.array([x, y])[:, None, None]) for x, y in points], 0
    )
    letter_px = (np.abs(cand.astype(int) - green).sum(-1) < 10) & (dist > r + w + 1)
    assert letter_px.sum() > 4 * 30
    before = np.asarray(img)
    assert (np.abs(cand.astype(int) - before).sum(-1) > 0).mean() < 0.05  # marks only, the image intact


def test_render_marked_downscales_writes_jpeg_once_and_keeps_colours(tmp_path):
    proto = load_lvlm_protocol()
    buf = io.BytesIO()
    _photo(1536, 1024).save(buf, format="JPEG", quality=95)
    src = str(tmp_path / "src.jpg")
    write_bytes_atomic(src, buf.getvalue())
    root = str(tmp_path / "renders")
    path = render_marked(src, [(1000.0, 500.0)], proto, root)
    out = np.asarray(Image.open(io.BytesIO(read_bytes(path))).convert("RGB")).astype(int)
    assert max(out.shape[:2]) == proto.image_max_side  # 1536 -> 768: keypoints scale by 0.5
    assert np.abs(out[250, 500] - _rgb(proto.query_color)).max() <= 12  # JPEG 4:4:4, q95
    mtime = (tmp_path / path.split(str(tmp_path) + "/")[1]).stat().st_mtime_ns
    assert render_marked(src, [(1000.0, 500.0)], proto, root) == path  # cached: same file, not rewritten
    assert (tmp_path / path.split(str(tmp_path) + "/")[1]).stat().st_mtime_ns == mtime
    assert render_marked(src, [(1000.0, 501.0)], proto, root) != path  # another point, another render
