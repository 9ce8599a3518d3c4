"""Analytic 3D primitives (box, tapered cylinder, ellipsoid), rays intersected in their local frame."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

BOX, CYLINDER, ELLIPSOID = "box", "cylinder", "ellipsoid"
_EPS = 1e-9


@dataclass
class Primitive:
    """One solid part: box (half extents), cylinder (r_bottom, r_top, half_height), ellipsoid (semi-axes)."""

    kind: str
    part: str
    center: np.ndarray
    rot: np.ndarray
    size: np.ndarray
    color: np.ndarray
    texture: tuple[str, dict] = field(default_factory=lambda: ("plain", {}))

    def to_world(self, local: np.ndarray) -> np.ndarray:
        """Map local points (N, 3) to the object frame."""
        return local @ self.rot.T + self.center

    def local_extent(self) -> np.ndarray:
        """Half extents of the primitive's local axis-aligned bounding box."""
        if self.kind == CYLINDER:
            r = max(self.size[0], self.size[1])
            return np.array([r, r, self.size[2]])
        return np.asarray(self.size, dtype=float)

    def outline_points(self) -> np.ndarray:
        """Surface points (object frame) that outline the primitive, for projected-extent estimates."""
        g = np.array(np.meshgrid([-1, 0, 1], [-1, 0, 1], [-1, 0, 1])).reshape(3, -1).T
        if self.kind == BOX:
            return self.to_world(g * self.size)
        if self.kind == ELLIPSOID:
            g = g[np.abs(g).sum(1) > 0].astype(float)
            g /= np.linalg.norm(g, axis=1, keepdims=True)
            return self.to_world(g * self.size)
        ang = np.linspace(0, 2 * np.pi, 12, endpoint=False)
        r0, r1, h = self.size
        ring = np.stack([np.cos(ang), np.sin(ang)], 1)
        bottom = np.column_stack([ring * r0, np.full(12, -h)])
        top = np.column_stack([ring * r1, np.full(12, h)])
        return self.to_world(np.vstack([bottom, top]))

    def inside(self, pts: np.ndarray, margin: float = 0.0) -> np.ndarray:
        """Whether object-frame points lie strictly inside the primitive shrunk by `margin`."""
        p = (pts - self.center) @ self.rot
        if self.kind == BOX:
            return np.all(np.abs(p) < self.size - margin, axis=1)
        if self.kind == ELLIPSOID:
            s = np.maximum(self.size - margin, _EPS)
            return ((p / s) ** 2).sum(1) < 1.0
        r0, r1, h = self.size
        r = r0 + (r1 - r0) * (p[:, 2] + h) / (2 * h)
        return (np.abs(p[:, 2]) < h - margin) & (np.hypot(p[:, 0], p[:, 1]) < r - margin)


def rotation_from_z(axis: np.ndarray) -> np.ndarray:
    """A rotation whose third column is the unit vector `axis` (local z -> axis)."""
    z = np.asarray(axis, dtype=float)
    z = z / np.linalg.norm(z)
    helper = np.array([1.0, 0.0, 0.0]) if abs(z[0]) < 0.9 else np.array([0.0, 1.0, 0.0])
    x = np.cross(helper, z)
    x /= np.linalg.norm(x)
    y = np.cross(z, x)
    return np.column_stack([x, y, z])


def rot_y(angle: float) -> np.ndarray:
    """Rotation about the object's left-right axis."""
    c, s = np.cos(angle), np.sin(angle)
    return np.array([[c, 0.0, s], [0.0, 1.0, 0.0], [-s, 0.0, c]])


def _solid(kind: str, part: str, center, rot, size, color, texture) -> Primitive:
    rot = np.eye(3) if rot is None else np.asarray(rot)
    return Primitive(
        kind, part, np.asarray(center, float), rot, np.asarray(size, float), np.asarray(color, float), texture
    )


def box(part: str, center, half, color, rot=None, texture=("plain", {})) -> Primitive:
    """An oriented box with half extents `half`."""
    return _solid(BOX, part, center, rot, half, color, texture)


def ellipsoid(part: str, center, axes, color, rot=None, texture=("plain", {})) -> Primitive:
    """An ellipsoid with semi-axes `axes` along its local x, y, z."""
    return _solid(ELLIPSOID, part, center, rot, axes, color, texture)


def limb(part: str, p0, p1, r0: float, r1: float, color, texture=("plain", {})) -> Primitive:
    """A (tapered) cylinder from point p0 (radius r0) to point p1 (radius r1)."""
    p0, p1 = np.asarray(p0, float), np.asarray(p1, float)
    axis = p1 - p0
    h = np.linalg.norm(axis) / 2
    return _solid(CYLINDER, part, (p0 + p1) / 2, rotation_from_z(axis), [r0, r1, h], color, texture)


def intersect(prim: Primitive, origin: np.ndarray, dirs: np.ndarray) -> np.ndarray:
    """Ray parameters t (+inf on a miss) of the first hit of rays origin + t * dirs (object frame)."""
    d = dirs @ prim.rot
    o = (origin - prim.center) @ prim.rot
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        if prim.kind == BOX:
            return _hit_box(o, d, prim.size)
        if prim.kind == ELLIPSOID:
            return _hit_ellipsoid(o, d, prim.size)
        return _hit_cylinder(o, d, prim.size)


def surface(
    prim: Primitive, origin: np.ndarray, dirs: np.ndarray, t: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Local hit points (N, 3) and unit local normals (N, 3) of rays that hit at finite t."""
    p = (origin - prim.center) @ prim.rot + (dirs @ prim.rot) * t[:, None]
    if prim.kind == BOX:
        rel = np.abs(p) / prim.size
        axis = rel.argmax(1)
        n = np.zeros_like(p)
        rows = np.arange(len(p))
        n[rows, axis] = np.sign(p[rows, axis])
        return p, n
    if prim.kind == ELLIPSOID:
        n = p / prim.size**2
    else:
        r0, r1, h = prim.size
        k = (r1 - r0) / (2 * h)
        rz = (r0 + r1) / 2 + k * p[:, 2]
        on_cap = (h - np.abs(p[:, 2])) < np.abs(np.hypot(p[:, 0], p[:, 1]) - rz)
        n = np.column_stack([p[:, 0], p[:, 1], -k * rz])
        n[on_cap] = np.column_stack([np.zeros(on_cap.sum()), np.zeros(on_cap.sum()), np.sign(p[on_cap, 2])])
    n /= np.linalg.norm(n, axis=1, keepdims=True) + _EPS
    return p, n


def _hit_box(o, d, half):
    d = np.where(np.abs(d) < _EPS, _EPS, d)
    t1 = (-half - o) / d
    t2 = (half - o) / d
    tmin = np.minimum(t1, t2).max(1)
    tmax = np.maximum(t1, t2).min(1)
    return np.where((tmax >= tmin) & (tmin > 0), tmin, np.inf)


def _hit_ellipsoid(o, d, axes):
    os_, ds = o / axes, d / axes
    a = (ds * ds).sum(1)
    b = 2 * (ds @ os_)
    c = os_ @ os_ - 1
    disc = b * b - 4 * a * c
    t = (-b - np.sqrt(np.maximum(disc, 0))) / (2 * a)
    return np.where((disc > 0) & (t > 0), t, np.inf)


def _hit_cylinder(o, d, size):
    r0, r1, h = size
    rm = (r0 + r1) / 2
    k = (r1 - r0) / (2 * h)
    ox, oy, oz = o
    dx, dy, dz = d.T
    rz = rm + k * oz
    a = dx * dx + dy * dy - k * k * dz * dz
    b = 2 * (ox * dx + oy * dy - k * dz * rz)
    c = ox * ox + oy * oy - rz * rz
    disc = b * b - 4 * a * c
    sq = np.sqrt(np.maximum(disc, 0))
    small = np.abs(a) < 1e-12
    a_safe = np.where(small, 1.0, a)
    cands = [
        np.where(small, -c / np.where(b == 0, _EPS, b), (-b - sq) / (2 * a_safe)),
        np.where(small, np.inf, (-b + sq) / (2 * a_safe)),
    ]
    best = np.full(len(d), np.inf)
    for t in cands:
        z = oz + t * dz
        ok = (disc >= 0) & (t > 0) & (np.abs(z) <= h) & (rm + k * z > 0)
        best = np.where(ok & (t < best), t, best)
    dz_safe = np.where(np.abs(dz) < _EPS, _EPS, dz)
    for zc, rc in ((-h, r0), (h, r1)):
        t = (zc - oz) / dz_safe
        x, y = ox + t * dx, oy + t * dy
        ok = (t > 0) & (x * x + y * y <= rc * rc)
        best = np.where(ok & (t < best), t, best)
    return best
