"""Vectorized ray-casting renderer: z-buffer, part-identity map, Lambert shading, keypoint visibility."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .camera import Camera
from .model import ObjectModel
from .primitives import Primitive, intersect, surface

AMBIENT = 0.38


@dataclass
class Render:
    """Per-pixel buffers of one rendered object."""

    depth: np.ndarray  # H x W float32, +inf on background
    part: np.ndarray  # H x W uint8, 0 on background
    color: np.ndarray  # H x W x 3 float32 in [0, 1], shaded
    mask: np.ndarray  # H x W bool

    def bbox(self) -> tuple[int, int, int, int] | None:
        """Tight box (l, t, r, b) of the mask in pixel-edge coordinates, None when empty."""
        rows = np.flatnonzero(self.mask.any(1))
        cols = np.flatnonzero(self.mask.any(0))
        if len(rows) == 0:
            return None
        return int(cols[0]), int(rows[0]), int(cols[-1]) + 1, int(rows[-1]) + 1


def texture(prim: Primitive, p: np.ndarray) -> np.ndarray:
    """Colour (N, 3) of a primitive at local hit points p (N, 3): plain, stripes, spots, noise, hub, band."""
    name, par = prim.texture
    base = np.broadcast_to(prim.color, p.shape).astype(np.float32)
    if name == "plain":
        return base
    alt = np.asarray(par.get("color2", prim.color * 0.35), dtype=np.float32)
    if name == "stripes":
        axis = int(par.get("axis", 0))
        wob = 0.3 * np.sin(p[:, (axis + 2) % 3] * par.get("freq", 10.0) * 0.7)
        m = np.sin(p[:, axis] * par.get("freq", 10.0) + wob) > par.get("duty", 0.2)
    elif name == "spots":
        f = par.get("freq", 12.0)
        v = np.sin(p[:, 0] * f) * np.sin(p[:, 1] * f * 1.3 + 1.0) * np.sin(p[:, 2] * f * 0.9 + 2.0)
        m = v > par.get("level", 0.25)
    elif name == "hub":
        # Wheels: dark tyre, light rim disc on the caps.
        r = np.hypot(p[:, 0], p[:, 1]) / max(prim.size[0], 1e-6)
        m = r < par.get("hub", 0.58)
    elif name == "band":
        # A window band along local z (cabins, bus sides).
        axis = int(par.get("axis", 2))
        lo, hi = par.get("lo", 0.0), par.get("hi", 0.6)
        rel = p[:, axis] / max(prim.size[axis], 1e-6)
        m = (rel > lo) & (rel < hi)
        if par.get("pillars"):
            m &= np.sin(p[:, 0] * par["pillars"]) < 0.85
    elif name == "noise":
        f = par.get("freq", 8.0)
        v = np.sin(p[:, 0] * f + 0.3) * np.sin(p[:, 1] * f * 1.7 + 1.1) + 0.5 * np.sin(
            p[:, 2] * f * 2.3 + p[:, 0] * f * 0.9
        )
        k = (0.5 + 0.25 * v).clip(0, 1).astype(np.float32)[:, None]
        return base * (1 - k * 0.5) + alt * (k * 0.5)
    else:
        raise ValueError(f"unknown texture {name!r} on part {prim.part!r}")
    return np.where(m[:, None], alt, base)


def render(model: ObjectModel, cam: Camera, light: np.ndarray | None = None) -> Render:
    """Ray-cast every primitive of the model into depth, part-id and shaded colour buffers."""
    h, w = cam.height, cam.width
    depth = np.full((h, w), np.inf, dtype=np.float32)
    part = np.zeros((h, w), dtype=np.uint8)
    color = np.zeros((h, w, 3), dtype=np.float32)
    light = np.array([-0.4, -0.7, -0.6]) if light is None else np.asarray(light, float)
    light_world = (light / np.linalg.norm(light)) @ cam.rotation  # camera frame -> object frame
    origin = cam.center
    pids = model.prim_part_ids
    corners = np.array(np.meshgrid([-1, 1], [-1, 1], [-1, 1])).reshape(3, -1).T
    for prim, pid in zip(model.prims, pids, strict=True):
        # its local bounding box's corners: a conservative screen box for ray casting
        uv, z = cam.project(prim.to_world(corners * prim.local_extent()))
        if np.any(z <= 0):
            raise ValueError(f"camera at distance {cam.distance:.3f} is inside part {prim.part!r}")
        x0, y0 = np.floor(uv.min(0)).astype(int) - 1
        x1, y1 = np.ceil(uv.max(0)).astype(int) + 1
        x0, y0, x1, y1 = max(x0, 0), max(y0, 0), min(x1, w), min(y1, h)
        if x1 <= x0 or y1 <= y0:
            continue
        vv, uu = np.mgrid[y0:y1, x0:x1]
        uu, vv = uu.ravel(), vv.ravel()
        dirs = cam.rays(uu + 0.5, vv + 0.5)
        t = intersect(prim, origin, dirs)
        win = t < depth[vv, uu]
        if not win.any():
            continue
        uu, vv, t, dirs = uu[win], vv[win], t[win], dirs[win]
        p, n = surface(prim, origin, dirs, t)
        nw = n @ prim.rot.T
        lam = np.abs(nw @ light_world)  # two-sided: caps seen from inside still shade sensibly
        shade = AMBIENT + (1 - AMBIENT) * lam
        depth[vv, uu] = t
        part[vv, uu] = pid
        color[vv, uu] = texture(prim, p) * shade[:, None].astype(np.float32)
    return Render(depth=depth, part=part, color=color.clip(0, 1), mask=part > 0)


def keypoint_visibility(
    model: ObjectModel,
    cam: Camera,
    depth: np.ndarray | None = None,
    rel_tol: float = 2e-3,
    pixel_tol: float = 0.02,
) -> tuple[np.ndarray, np.ndarray]:
    """Exact projections (K, 2) and visibility (K,): inside the image, unoccluded, matching the z-buffer."""
    uv, z = cam.project(model.kp_xyz)
    dirs = cam.rays(uv[:, 0], uv[:, 1])
    zbuf = np.full(len(uv), np.inf)
    for prim in model.prims:
        zbuf = np.minimum(zbuf, intersect(prim, cam.center, dirs))
    radius = model.radius
    visible = (uv[:, 0] >= 0) & (uv[:, 0] < cam.width) & (uv[:, 1] >= 0) & (uv[:, 1] < cam.height)
    visible &= z <= zbuf + rel_tol * radius + model.kp_slack
    if depth is not None:
        col = np.clip(uv[:, 0], 0, cam.width - 1).astype(int)
        row = np.clip(uv[:, 1], 0, cam.height - 1).astype(int)
        visible &= np.abs(depth[row, col] - z) <= pixel_tol * radius + model.kp_slack
    return uv, visible
