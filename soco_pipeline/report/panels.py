"""Prediction panels (as OmniProbe's `num_visualize`): source with the query, target with truth and
prediction, and the similarity heatmap; fixed MARKERS colours so that a test can find them."""

from __future__ import annotations

import io
from dataclasses import dataclass

import numpy as np
import pandas as pd
from PIL import Image, ImageDraw

from soco_pipeline.evaluation.matching import sample_descriptors, to_unit
from soco_pipeline.evaluation.protocol import ProtocolConfig
from soco_pipeline.storage import read_bytes, write_bytes_atomic

MARKERS = {"query": (230, 30, 30), "gt": (30, 200, 60), "pred": (40, 90, 240)}
TILE_HEIGHT = 256
MARKER_RADIUS = 6
GAP = 8


@dataclass(frozen=True)
class PanelLayout:
    """Where things landed in a panel: tile offsets (x) and scales, and each marker's pixel centre."""

    offsets: tuple[int, int, int]
    scales: tuple[float, float]
    markers: dict[str, list[tuple[int, int]]]


def heatmap_rgb(sims: np.ndarray) -> np.ndarray:
    """A (h, w) similarity map as uint8 RGB (dark blue = low, yellow = high), min-max scaled."""
    lo, hi = float(np.nanmin(sims)), float(np.nanmax(sims))
    t = np.clip((sims - lo) / (hi - lo if hi > lo else 1.0), 0, 1)[..., None]
    low, high = np.array([20, 20, 90], np.float64), np.array([250, 230, 40], np.float64)
    return (low + t * (high - low)).astype(np.uint8)


def similarity_on_target(
    src_map: np.ndarray, trg_map: np.ndarray, query_uv: np.ndarray, trg_size: tuple[int, int]
) -> np.ndarray:
    """The query descriptor's cosine similarity with every target cell, over the image's pixels."""
    desc = sample_descriptors(src_map.astype(np.float32), query_uv.reshape(1, 2)).numpy()[0]
    c, h, w = trg_map.shape
    sims = (desc @ trg_map.reshape(c, -1).astype(np.float32)).reshape(h, w)
    width, height = trg_size
    side = max(width, height)
    up = np.asarray(Image.fromarray(sims.astype(np.float32), mode="F").resize((side, side), Image.NEAREST))
    return up[:height, :width]


def _tile(img: Image.Image) -> tuple[Image.Image, float]:
    scale = TILE_HEIGHT / img.height
    return img.convert("RGB").resize((max(1, round(img.width * scale)), TILE_HEIGHT), Image.BICUBIC), scale


def _dot(draw: ImageDraw.ImageDraw, xy: tuple[int, int], color) -> None:
    x, y = xy
    r = MARKER_RADIUS
    draw.ellipse((x - r - 2, y - r - 2, x + r + 2, y + r + 2), fill=(255, 255, 255))
    draw.ellipse((x - r, y - r, x + r, y + r), fill=color)


def draw_panel(
    src: Image.Image, trg: Image.Image, query_xy, gt_xy, pred_xy, sims: np.ndarray | None = None
) -> tuple[Image.Image, PanelLayout]:
    """The panel image and its layout (points in original pixels; `sims` adds the heatmap tile)."""
    s_tile, s_scale = _tile(src)
    t_tile, t_scale = _tile(trg)
    tiles = [s_tile, t_tile]
    if sims is not None:
        heat = Image.fromarray(heatmap_rgb(np.asarray(sims))).resize(t_tile.size, Image.NEAREST)
        tiles.append(Image.blend(t_tile, heat, 0.6))
    offsets, x = [], 0
    for t in tiles:
        offsets.append(x)
        x += t.width + GAP
    panel = Image.new("RGB", (x - GAP, TILE_HEIGHT), (255, 255, 255))
    for t, o in zip(tiles, offsets, strict=True):
        panel.paste(t, (o, 0))
    draw = ImageDraw.Draw(panel)

    def at(xy, scale, off):
        return (int(round(off + xy[0] * scale)), int(round(xy[1] * scale)))

    markers = {"query": [at(query_xy, s_scale, offsets[0])], "gt": [], "pred": []}
    for o in offsets[1:]:
        markers["gt"].append(at(gt_xy, t_scale, o))
        markers["pred"].append(at(pred_xy, t_scale, o))
    for kind in ("gt", "pred", "query"):
        for p in markers[kind]:
            _dot(draw, p, MARKERS[kind])
    offs = (offsets + [0, 0, 0])[:3]
    return panel, PanelLayout((offs[0], offs[1], offs[2]), (s_scale, t_scale), markers)


TITLE_HEIGHT = 30
LEGEND_HEIGHT = 76
FONT_SIZE = 15


def labelled_panel(
    panel: Image.Image, layout: PanelLayout, sims: np.ndarray | None = None, title: str = ""
) -> Image.Image:
    """The panel with a title strip, a legend of the markers and the heatmap's colour bar."""
    from PIL import ImageFont

    font = ImageFont.load_default(size=FONT_SIZE)
    small = ImageFont.load_default(size=FONT_SIZE - 2)
    width = max(panel.width, 640)
    out = Image.new("RGB", (width, TITLE_HEIGHT + panel.height + LEGEND_HEIGHT), (255, 255, 255))
    out.paste(panel, (0, TITLE_HEIGHT))
    draw = ImageDraw.Draw(out)
    names = ["source: query", "target: ground truth, prediction", "similarity to the query"]
    for name, start in zip(names[: 3 if sims is not None else 2], layout.offsets, strict=False):
        draw.text((start + 4, 7), name, fill=(20, 20, 20), font=font)
    y = TITLE_HEIGHT + panel.height + 10
    x = 4
    for kind, label in (("query", "query keypoint"), ("gt", "ground truth"), ("pred", "prediction")):
        _dot(draw, (x + MARKER_RADIUS + 2, y + 8), MARKERS[kind])
        draw.text((x + 2 * MARKER_RADIUS + 10, y), label, fill=(20, 20, 20), font=font)
        x += 2 * MARKER_RADIUS + 16 + int(draw.textlength(label, font=font)) + 14
    if title:
        draw.text((4, y + 42), title, fill=(70, 70, 70), font=small)  # below the legend and the bar
    if sims is not None:
        x0 = max(layout.offsets[2], x + 10)
        bar_w = max(60, panel.width - x0 - 4)
        ramp = heatmap_rgb(np.linspace(0.0, 1.0, bar_w)[None, :].repeat(12, axis=0))
        out.paste(Image.fromarray(ramp), (x0, y + 2))
        draw.rectangle((x0, y + 2, x0 + bar_w - 1, y + 13), outline=(90, 90, 90))
        lo, hi = float(np.nanmin(sims)), float(np.nanmax(sims))
        draw.text((x0, y + 18), f"cosine {lo:.2f} (low)", fill=(20, 20, 20), font=small)
        right = f"{hi:.2f} (high)"
        draw.text(
            (x0 + bar_w - draw.textlength(right, font=small), y + 18), right, fill=(20, 20, 20), font=small
        )
    return out


def png_bytes(img: Image.Image) -> bytes:
    """The image as PNG bytes."""
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return buf.getvalue()


def _open(uri: str) -> Image.Image:
    return Image.open(io.BytesIO(read_bytes(uri)))


def panel_rows(
    image_pairs: pd.DataFrame, correspondences: pd.DataFrame, predictions: pd.DataFrame, n: int, seed: int
) -> pd.DataFrame:
    """A seeded sample of n scored SOC queries (evaluated pairs, intra first) with their free predictions."""
    ev = image_pairs.loc[
        image_pairs["evaluated"].astype(bool), ["pair_id", "level", "src_image", "trg_image"]
    ]
    soc = correspondences[correspondences["kind"] == "soc"][["pair_id", "src_keypoint", "trg_keypoint"]]
    rows = soc.merge(ev, on="pair_id").merge(
        predictions[predictions["mode"] == "free"][["pair_id", "src_keypoint", "pred_x", "pred_y"]],
        on=["pair_id", "src_keypoint"],
    )
    if rows.empty or n <= 0:
        return rows.iloc[:0]
    rows = rows.sort_values(["pair_id", "src_keypoint"], ignore_index=True)
    pick = np.random.default_rng(seed).choice(len(rows), size=min(n, len(rows)), replace=False)
    return rows.iloc[np.sort(pick)].reset_index(drop=True)


def render_query(
    row, keypoints: pd.DataFrame, image_set: pd.DataFrame, store, protocol: ProtocolConfig
) -> tuple[Image.Image, dict]:
    """The panel of one (pair, source keypoint) row, its error (px) and correctness at the headline alpha."""
    alpha = protocol.headline_alpha
    kp = keypoints.set_index(["image_id", "keypoint"])
    im = image_set.set_index("image_id")
    q = kp.loc[(row.src_image, row.src_keypoint), ["x", "y"]].to_numpy(np.float64)
    gt = kp.loc[(row.trg_image, row.trg_keypoint), ["x", "y"]].to_numpy(np.float64)
    pred = np.array([row.pred_x, row.pred_y], np.float64)
    src_info, trg_info = im.loc[row.src_image], im.loc[row.trg_image]
    sims = None
    if store is not None:
        src_map, src_meta = store.get(row.src_image)
        trg_map, _ = store.get(row.trg_image)
        src_size = np.array([[src_info.width, src_info.height]], np.float64)
        uv = to_unit(q[None], src_size, int(src_meta["input_size"]), protocol)[0]
        sims = similarity_on_target(src_map, trg_map, uv, (int(trg_info.width), int(trg_info.height)))
    panel, layout = draw_panel(_open(src_info.uri), _open(trg_info.uri), q, gt, pred, sims)
    radius = max(trg_info.bbox_r - trg_info.bbox_l, trg_info.bbox_b - trg_info.bbox_t)
    err = float(np.hypot(*(pred - gt)))
    verdict = "correct" if err < alpha * radius else "wrong"
    title = f"{row.pair_id}, keypoint {row.src_keypoint}: error {err:.1f} px, {verdict} at PCK@{alpha:g}"
    panel = labelled_panel(panel, layout, sims, title)
    return panel, {
        "pair_id": row.pair_id,
        "keypoint": row.src_keypoint,
        "error_px": err,
        "alpha": alpha,
        "correct": err < alpha * radius,
        "layout": layout,
    }


def panels_dir(settings, backbone: str) -> str:
    """Where the prediction panels of a backbone go: <storage>/report/panels/<backbone>/."""
    from soco_pipeline.storage import join

    return join(settings.report_root, "panels", backbone)


def sample_panels(
    image_pairs,
    correspondences,
    predictions,
    keypoints,
    image_set,
    store,
    protocol,
    n: int,
    seed: int,
    out_dir: str,
) -> list[dict]:
    """Render n seeded panels into out_dir (<pair>__<keypoint>.png); returns one facts dict (with `path`) each."""
    from soco_pipeline.storage import join

    out = []
    for row in panel_rows(image_pairs, correspondences, predictions, n, seed).itertuples(index=False):
        panel, info = render_query(row, keypoints, image_set, store, protocol)
        path = join(out_dir, f"{row.pair_id}__{row.src_keypoint}.png")
        write_bytes_atomic(path, png_bytes(panel))
        info.pop("layout")
        out.append({**info, "path": path})
    return out


def panels_markdown(panels: list[dict]) -> str:
    """Markdown for the UI's metadata: each panel as an embedded PNG (data URL) or its path, with its facts."""
    import base64

    lines = []
    for i, p in enumerate(panels):
        verdict = "correct" if p["correct"] else "wrong"
        lines.append(f"**{p['pair_id']}** / `{p['keypoint']}`: error {p['error_px']:.1f} px ({verdict})\n")
        if i < 4:  # the first four embedded, the others by path
            b64 = base64.b64encode(read_bytes(p["path"])).decode()
            lines.append(f"![panel](data:image/png;base64,{b64})\n")
        else:
            lines.append(f"`{p['path']}`\n")
    return "\n".join(lines) or "(no scored queries)"


def render_stored_panel(
    settings, backbone: str, pair_id: str, keypoint: str | None, out: str, protocol: ProtocolConfig
) -> dict:
    """`soco show`: the panel of one pair of a materialized backbone, from the stored tables and feature cache."""
    from soco_pipeline.features import FeatureStore
    from soco_pipeline.trust.records import load_backbone_tables

    t = load_backbone_tables(settings.tables_root, backbone)
    pairs = t["image_pairs"][t["image_pairs"]["pair_id"] == pair_id]
    if pairs.empty:
        raise ValueError(f'no pair {pair_id!r}; list some with `soco sql "select pair_id from eval_pairs"`')
    rows = panel_rows(pairs.assign(evaluated=True), t["correspondences"], t["predictions"], 10**9, 0)
    if keypoint is not None:
        rows = rows[rows["src_keypoint"] == keypoint]
    if rows.empty:
        raise ValueError(
            f"backbone {backbone!r} has no SOC prediction for pair {pair_id!r}"
            + (f" keypoint {keypoint!r}" if keypoint else "")
            + " (not evaluated, or not a SOC query)"
        )
    store = FeatureStore.from_manifest(settings.features_root, t["feature_manifest"])
    panel, info = render_query(rows.iloc[0], t["keypoints"], t["image_set"], store, protocol)
    write_bytes_atomic(out, png_bytes(panel))
    return info
