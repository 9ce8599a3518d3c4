"""The prediction panel: query, ground-truth and prediction markers land where the points are."""

import numpy as np
import pytest
from PIL import Image

from soco_pipeline.report.panels import (
    LEGEND_HEIGHT,
    MARKERS,
    TILE_HEIGHT,
    TITLE_HEIGHT,
    draw_panel,
    heatmap_rgb,
    labelled_panel,
    similarity_on_target,
)

pytestmark = pytest.mark.unit


def _near(img: np.ndarray, xy, color, tol=40) -> bool:
    x, y = xy
    return bool(np.abs(img[y, x].astype(int) - np.array(color)).max() <= tol)


def test_markers_are_drawn_at_the_scaled_points():
    src = Image.new("RGB", (100, 50), (128, 128, 128))
    trg = Image.new("RGB", (80, 64), (90, 90, 90))
    sims = np.random.default_rng(0).random((64, 80))
    panel, layout = draw_panel(src, trg, (20, 10), (60, 40), (10, 50), sims)
    img = np.asarray(panel)
    assert img.shape[0] == TILE_HEIGHT and len(layout.markers["gt"]) == 2  # target and heatmap tiles
    s, t = TILE_HEIGHT / 50, TILE_HEIGHT / 64
    q = (round(20 * s), round(10 * s))
    assert layout.markers["query"] == [q] and _near(img, q, MARKERS["query"])
    target_off = round(100 * s) + 8
    for off in (target_off, layout.offsets[2]):
        gt = (round(off + 60 * t), round(40 * t))
        pred = (round(off + 10 * t), round(50 * t))
        assert _near(img, gt, MARKERS["gt"]) and _near(img, pred, MARKERS["pred"])
    assert layout.offsets[1] == target_off
    # away from the markers the tiles keep their content: the source's grey, the target's grey
    assert _near(img, (5, 5), (128, 128, 128), tol=2) and _near(img, (target_off + 5, 5), (90, 90, 90), tol=2)
    # a marker colour appears nowhere near the other points
    assert not _near(img, q, MARKERS["gt"]) and not _near(img, (target_off + 5, 5), MARKERS["pred"])


def test_heatmap_peaks_where_the_target_matches_the_query():
    rng = np.random.default_rng(1)
    c, h, w = 16, 8, 8
    src = rng.normal(size=(c, h, w)).astype(np.float32)
    trg = rng.normal(size=(c, h, w)).astype(np.float32)
    src /= np.linalg.norm(src, axis=0, keepdims=True)
    trg /= np.linalg.norm(trg, axis=0, keepdims=True)
    trg[:, 2, 5] = src[
        :, 3, 4
    ]  # the query's cell sits at row 2, col 5 of the target (rows 0-3 are the image)
    uv = np.array([4 / (w - 1), 3 / (h - 1)])  # align_corners: the centre of cell (3, 4)
    sims = similarity_on_target(src, trg, uv, (64, 32))  # W=64, H=32: the grid covers a 64x64 square
    assert sims.shape == (32, 64)
    y, x = np.unravel_index(np.argmax(sims), sims.shape)
    assert (y // 8, x // 8) == (2, 5) and np.isclose(sims.max(), 1.0, atol=1e-5)
    rgb = heatmap_rgb(sims)
    assert rgb.dtype == np.uint8 and tuple(rgb[y, x]) == (250, 230, 40)


def test_the_labelled_panel_names_its_tiles_and_has_legend_and_colour_bar():
    src = Image.new("RGB", (100, 50), (128, 128, 128))
    trg = Image.new("RGB", (80, 64), (90, 90, 90))
    sims = np.linspace(-0.2, 0.9, 64 * 80).reshape(64, 80)
    panel, layout = draw_panel(src, trg, (20, 10), (60, 40), (10, 50), sims)
    out = labelled_panel(panel, layout, sims, "pair p, keypoint k")
    img = np.asarray(out)
    assert img.shape[0] == TITLE_HEIGHT + TILE_HEIGHT + LEGEND_HEIGHT and img.shape[1] >= panel.width
    # the panel sits below the title strip, unchanged
    assert np.array_equal(img[TITLE_HEIGHT : TITLE_HEIGHT + TILE_HEIGHT, : panel.width], np.asarray(panel))
    title = img[:TITLE_HEIGHT]
    for start in layout.offsets:  # dark text above each tile
        assert (title[:, start : start + 60] < 80).all(axis=2).any()
    legend = img[TITLE_HEIGHT + TILE_HEIGHT :]
    for color in MARKERS.values():  # the three marker colours in the legend
        assert (np.abs(legend.astype(int) - np.array(color)).max(axis=2) <= 40).any()
    # the colour bar runs from the heatmap's low colour to its high colour
    low, high = heatmap_rgb(np.array([[0.0, 1.0]]))[0]
    assert (np.abs(legend.astype(int) - low.astype(int)).max(axis=2) <= 6).any()
    assert (np.abs(legend.astype(int) - high.astype(int)).max(axis=2) <= 6).any()
