"""A perspective camera posed ImageNet3D-style (azimuth 0 sees the front, +x); pixel centres at +0.5."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np


@dataclass
class Camera:
    """Extrinsics (R world->camera rows, centre C) and intrinsics; the pose fields are fixed (cached)."""

    azimuth: float
    elevation: float
    theta: float
    distance: float
    focal: float
    px: float
    py: float
    width: int
    height: int

    @cached_property
    def center(self) -> np.ndarray:
        """The camera centre in the object frame."""
        a, e = self.azimuth, self.elevation
        return self.distance * np.array([np.cos(e) * np.cos(a), np.cos(e) * np.sin(a), np.sin(e)])

    @cached_property
    def rotation(self) -> np.ndarray:
        """World-to-camera rotation; camera axes x right, y down, z forward."""
        c = self.center
        fwd = -c / np.linalg.norm(c)
        right = np.cross(fwd, [0.0, 0.0, 1.0])
        right /= np.linalg.norm(right)
        down = np.cross(fwd, right)
        base = np.stack([right, down, fwd])
        ct, st = np.cos(self.theta), np.sin(self.theta)
        # Image y points down, so a counter-clockwise image rotation is a clockwise one in (x, y).
        roll = np.array([[ct, st, 0.0], [-st, ct, 0.0], [0.0, 0.0, 1.0]])
        return roll @ base

    def project(self, pts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Project object-frame points (N, 3) to pixels (N, 2) and camera depths (N,)."""
        pc = (pts - self.center) @ self.rotation.T
        z = pc[:, 2]
        uv = np.column_stack([self.focal * pc[:, 0] / z + self.px, self.focal * pc[:, 1] / z + self.py])
        return uv, z

    def rays(self, u: np.ndarray, v: np.ndarray) -> np.ndarray:
        """Object-frame ray directions through image points (u, v), scaled so t equals camera depth."""
        d = np.column_stack([(u - self.px) / self.focal, (v - self.py) / self.focal, np.ones(len(u))])
        return d @ self.rotation
