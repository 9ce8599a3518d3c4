"""One generated image: pose sampling, camera framing, rendering, compositing, intended defects."""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field

import numpy as np

from ..taxonomy import Taxonomy, load_taxonomy
from .backgrounds import background
from .camera import Camera
from .model import ObjectModel
from .render import Render, keypoint_visibility, render
from .variants import build_instance

RIGID_REJECTS = ("too_small", "crowded", "bad_status", "invalid_pose")
ANIMAL_REJECTS = ("too_small", "invalid_keypoints")
KEEP_MIN_AREA = 0.12  # kept objects: bbox area >= 12% of the image
SMALL_MAX_AREA = 0.02  # "too_small" rejects: bbox area < 2% of the image


@dataclass
class Scene:
    """A rendered image with its exact ground truth."""

    image: np.ndarray  # H x W x 3 uint8
    part: np.ndarray  # H x W uint8
    model: ObjectModel
    camera: Camera
    bbox: tuple[int, int, int, int]  # l, t, r, b (pixel edges)
    kp_uv: np.ndarray  # K x 2
    kp_visible: np.ndarray  # K bool
    extra_objects: list[dict] = field(default_factory=list)  # other objects (crowded rejects)

    @property
    def width(self) -> int:
        """Image width."""
        return self.camera.width

    @property
    def height(self) -> int:
        """Image height."""
        return self.camera.height


def image_rng(seed: int, category: str, index: int) -> np.random.Generator:
    """The RNG of one image, independent of generation order."""
    return np.random.default_rng([int(seed), zlib.crc32(category.encode()), int(index)])


def frame_camera(
    model: ObjectModel,
    azimuth: float,
    elevation: float,
    theta: float,
    width: int,
    height: int,
    area: float,
    rng: np.random.Generator | None = None,
    focal: float | None = None,
) -> Camera:
    """A camera at the given pose whose view fills about `area` of the image, the object inside."""
    pts = model.outline()
    radius = model.radius
    focal = focal if focal is not None else 1.3 * max(width, height)
    dist = 3.0 * radius
    margin = 0.03 * max(width, height)
    for _ in range(3):
        cam = Camera(azimuth, elevation, theta, dist, focal, 0.0, 0.0, width, height)
        uv, _ = cam.project(pts)
        lo, hi = uv.min(0), uv.max(0)
        ext = np.maximum(hi - lo, 1e-6)
        s = np.sqrt(area * width * height / (ext[0] * ext[1]))
        s = min(s, (width - 2 * margin) / ext[0], (height - 2 * margin) / ext[1])
        dist = max(dist / s, 1.25 * radius)
    cam = Camera(azimuth, elevation, theta, dist, focal, 0.0, 0.0, width, height)
    uv, _ = cam.project(pts)
    lo, hi = uv.min(0), uv.max(0)
    ranges = [(margin - lo[0], width - margin - hi[0]), (margin - lo[1], height - margin - hi[1])]
    pp = []
    for a, b in ranges:
        if b < a:
            pp.append((a + b) / 2)
        else:
            pp.append(float(rng.uniform(a, b)) if rng is not None else (a + b) / 2)
    cam.px, cam.py = pp
    return cam


def _area_frac(r: Render) -> float:
    bb = r.bbox()
    if bb is None:
        return 0.0
    return (bb[2] - bb[0]) * (bb[3] - bb[1]) / r.mask.size


def render_object(
    category: str,
    azimuth: float,
    elevation: float = 0.3,
    theta: float = 0.0,
    width: int = 400,
    height: int = 300,
    seed: int = 0,
    area: float = 0.3,
    taxonomy: Taxonomy | None = None,
) -> Scene:
    """Render one instance of a category at a given pose on a flat grey background (for checks)."""
    tax = taxonomy or load_taxonomy()
    model = build_instance(category, np.random.default_rng([int(seed), zlib.crc32(category.encode())]), tax)
    cam = frame_camera(model, azimuth, elevation, theta, width, height, area)
    r = render(model, cam)
    uv, vis = keypoint_visibility(model, cam, r.depth)
    img = np.where(r.mask[..., None], (r.color * 255).astype(np.uint8), np.uint8(128))
    return Scene(img, r.part, model, cam, r.bbox() or (0, 0, 1, 1), uv, vis)


def sample_pose(sup: str, rng: np.random.Generator) -> tuple[float, float, float]:
    """Azimuth (full circle), elevation and in-plane theta, radians."""
    az = float(rng.uniform(0, 2 * np.pi))
    lo, hi = {"animals": (-5, 25), "handheld": (0, 45), "furniture": (0, 40)}.get(sup, (-3, 35))
    el = float(np.radians(rng.uniform(lo, hi)))
    th = float(np.radians(np.clip(rng.normal(0, 5), -15, 15)))
    return az, el, th


def image_size(rng: np.random.Generator) -> tuple[int, int]:
    """(width, height): long side 320-480 px, aspect 0.65-1, mostly landscape."""
    long_side = int(rng.integers(320, 481))
    short = int(round(long_side * rng.uniform(0.65, 1.0)))
    return (long_side, short) if rng.random() < 0.75 else (short, long_side)


def make_scene(
    category: str, index: int, seed: int, reject: str = "", taxonomy: Taxonomy | None = None
) -> Scene:
    """Generate one image of a category; `reject` names the intended defect ("" for a kept image)."""
    tax = taxonomy or load_taxonomy()
    sup = tax.supercategory(category)
    rng = image_rng(seed, category, index)
    model = build_instance(category, rng, tax)
    width, height = image_size(rng)
    az, el, th = sample_pose(sup, rng)
    focal = max(width, height) * float(rng.uniform(1.1, 1.7))
    if reject == "too_small":
        area, lo, hi = float(rng.uniform(0.006, 0.014)), 0.0, SMALL_MAX_AREA
    else:
        area, lo, hi = float(rng.uniform(0.22, 0.55)), KEEP_MIN_AREA, 1.0
    for _ in range(6):
        cam = frame_camera(model, az, el, th, width, height, area, rng, focal)
        r = render(model, cam)
        got = _area_frac(r)
        if lo <= got < hi and r.bbox() is not None:
            break
        if got <= 0:
            area *= 1.5
        elif got < lo:
            area *= 1.3 * lo / got
        else:
            area *= 0.7 * hi / got
    else:
        raise RuntimeError(f"image {category}_{index:04d}: could not frame the object (area {got:.3f})")
    uv, vis = keypoint_visibility(model, cam, r.depth)
    img = background(width, height, rng).copy()
    extra: list[dict] = []
    if reject == "crowded":
        extra.append(_add_second_object(img, r.mask, category, rng, tax, width, height, focal))
    img[r.mask] = (r.color[r.mask] * 255 + 0.5).astype(np.uint8)
    return Scene(img, r.part, model, cam, r.bbox(), uv, vis, extra)


def _add_second_object(
    img: np.ndarray,
    main_mask: np.ndarray,
    category: str,
    rng: np.random.Generator,
    tax: Taxonomy,
    width: int,
    height: int,
    focal: float,
) -> dict:
    """Paint a second instance behind the main object; return its ImageNet3D-style pose and bbox."""
    other = build_instance(category, rng, tax)
    az, el, th = sample_pose(tax.supercategory(category), rng)
    cam = frame_camera(other, az, el, th, width, height, float(rng.uniform(0.1, 0.2)), rng, focal)
    r = render(other, cam)
    paint = r.mask & ~main_mask
    img[paint] = (r.color[paint] * 255 + 0.5).astype(np.uint8)
    bb = r.bbox() or (0, 0, 1, 1)
    return {"camera": cam, "bbox": bb}
