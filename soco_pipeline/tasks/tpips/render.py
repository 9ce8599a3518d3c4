"""Render one TPIPS image from its aspect values with the embedded renderer, every aspect set exactly."""

from __future__ import annotations

import colorsys
import functools
import zlib

import numpy as np
from PIL import Image

from soco_pipeline.synth.backgrounds import photos
from soco_pipeline.synth.families import BUILDERS
from soco_pipeline.synth.model import Builder, ObjectModel
from soco_pipeline.synth.render import render
from soco_pipeline.synth.scene import frame_camera
from soco_pipeline.synth.variants import category_params, sample_colors
from soco_pipeline.taxonomy import load_taxonomy

from .aspects import N_PHOTOS
from .config import TpipsConfig

TEXTURES = {
    "plain": ("plain", {}),
    "stripes": ("stripes", {"axis": 0, "freq": 9.0, "duty": 0.0}),
    "spots": ("spots", {"freq": 7.0, "level": 0.2}),
}
TEXTURED_PARTS = ("body", "cabin")


@functools.lru_cache(maxsize=64)
def _model(shape: str, texture: str, hue_key: int, sat: float, val: float) -> ObjectModel:
    tax = load_taxonomy()
    family, params, traits = category_params(shape, tax)
    traits = {k: v for k, v in traits.items() if k not in ("color", "pattern")}
    col = sample_colors(
        shape, family, traits, tax.supercategory(shape), np.random.default_rng(zlib.crc32(shape.encode()))
    )
    main = np.array(colorsys.hsv_to_rgb(hue_key / 3600.0, sat, val))
    col.update(main=main, handle=main * 0.85, leg=main * 0.8)
    b = Builder()
    BUILDERS[family](b, params, col, set(tax.category_keypoints(shape)))
    model = b.build(shape, tax.category_keypoints(shape), params)
    if texture not in TEXTURES:
        raise ValueError(f"unknown texture {texture!r}: use one of {sorted(TEXTURES)}")
    name, par = TEXTURES[texture]
    for prim in model.prims:
        if prim.part in TEXTURED_PARTS:
            prim.texture = (name, {**par, "color2": main * 0.3})
    return model


def background_image(background_id: int, size: int) -> np.ndarray:
    """The background of an id: photograph id % 7, a crop position and scale derived from the id."""
    img = photos()[int(background_id) % N_PHOTOS]
    rng = np.random.default_rng([0xB6, int(background_id)])
    ph, pw = img.shape[:2]
    side = min(ph, pw) * rng.uniform(0.4, 0.8)
    x0, y0 = rng.uniform(0, pw - side), rng.uniform(0, ph - side)
    crop = Image.fromarray(img).resize((size, size), Image.BILINEAR, box=(x0, y0, x0 + side, y0 + side))
    return np.asarray(crop).copy()


def light_vector(direction_deg: float) -> np.ndarray:
    """Camera-frame light direction: from `direction_deg` around the view axis (0 = from above), tilted to the camera."""
    a = np.radians(direction_deg)
    return np.array([np.sin(a) * 0.85, -np.cos(a) * 0.85, -0.5])


def render_values(v: dict, cfg: TpipsConfig, with_body: bool = False):
    """(image, object mask) of one value record; with_body adds the mask of the coloured body parts."""
    s = cfg.image_size
    hue_key = int(round(float(v["hue"]) % 1.0 * 3600))  # the model cache's key: hue in 1/3600 steps
    model = _model(str(v["shape"]), str(v["texture"]), hue_key, cfg.scene.saturation, cfg.scene.value)
    img = background_image(int(v["background_id"]), s).astype(np.float32) / 255.0
    mask = np.zeros((s, s), bool)
    body = np.zeros((s, s), bool)
    body_ids = [i + 1 for i, p in enumerate(model.part_names) if p in TEXTURED_PARTS]
    n = int(v["count"])
    area = float(v["area"])
    light = light_vector(float(v["light_dir_deg"]))
    g = cfg.scene.warmth_gain * float(v["warmth"])
    gain = np.array([1 + g, 1.0, 1 - g], np.float32)
    el = np.radians(cfg.scene.elevation_deg)
    cam = frame_camera(model, np.radians(float(v["azimuth_deg"])), el, 0.0, s, s, area)
    # copies side by side on a row, the row centred; later copies are painted in front
    offsets = (np.arange(n) - (n - 1) / 2) * s / (n + 0.6)
    cx = cam.px
    for dx in offsets:
        cam.px = cx + dx
        r = render(model, cam, light)
        img[r.mask] = np.clip(r.color[r.mask] * gain, 0, 1)
        body = np.where(r.mask, np.isin(r.part, body_ids), body)
        mask |= r.mask
    out = (img * 255 + 0.5).astype(np.uint8)
    return (out, mask, body) if with_body else (out, mask)


def colour_transfer(img: np.ndarray, target: np.ndarray, strength: float) -> np.ndarray:
    """Reinhard-style transfer: match the Lab mean/std of `img` to `target`, blended in by `strength`."""
    from skimage import color

    lab, tlab = color.rgb2lab(img), color.rgb2lab(target)
    mu, sd = lab.reshape(-1, 3).mean(0), lab.reshape(-1, 3).std(0) + 1e-6
    tmu, tsd = tlab.reshape(-1, 3).mean(0), tlab.reshape(-1, 3).std(0)
    moved = (lab - mu) / sd * tsd + tmu
    out = color.lab2rgb(lab + strength * (moved - lab))
    return (np.clip(out, 0, 1) * 255 + 0.5).astype(np.uint8)


def degrade(img: np.ndarray, v: dict) -> np.ndarray:
    """Apply a record's image operations in order: colour transfer, Gaussian blur, JPEG (quality 0 = none)."""
    import io

    from skimage.filters import gaussian

    out = img
    if float(v.get("transfer", 0.0)) > 0:
        target = photos()[(int(v["background_id"]) + 3) % N_PHOTOS]
        out = colour_transfer(out, target, float(v["transfer"]))
    if float(v.get("blur_sigma", 0.0)) > 0:
        out = (
            gaussian(out, sigma=float(v["blur_sigma"]), channel_axis=-1, preserve_range=True) + 0.5
        ).astype(np.uint8)
    if int(v.get("jpeg_quality", 0)) > 0:
        buf = io.BytesIO()
        Image.fromarray(out).save(buf, format="JPEG", quality=int(v["jpeg_quality"]))
        out = np.asarray(Image.open(io.BytesIO(buf.getvalue())).convert("RGB"))
    return out


def render_record(v: dict, cfg: TpipsConfig) -> tuple[np.ndarray, np.ndarray]:
    """The final pixels of a record (render, then its image operations) and the object mask."""
    img, mask = render_values(v, cfg)
    return degrade(img, v), mask
