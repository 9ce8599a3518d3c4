"""An object model: primitives grouped into named parts, plus keypoints pinned to part surfaces."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from .primitives import Primitive, intersect


@dataclass
class ObjectModel:
    """A built object instance in its object frame; `kp_slack`: thin parts' keypoint depth tolerance."""

    category: str
    prims: list[Primitive]
    part_names: list[str]
    kp_names: list[str]
    kp_xyz: np.ndarray
    kp_part: list[str]
    kp_slack: np.ndarray
    shape_params: dict[str, float]

    @cached_property
    def prim_part_ids(self) -> np.ndarray:
        """The 1-based part id of each primitive."""
        index = {p: i + 1 for i, p in enumerate(self.part_names)}
        return np.array([index[p.part] for p in self.prims], dtype=np.int32)

    @cached_property
    def kp_part_ids(self) -> np.ndarray:
        """The 1-based part id of each keypoint's part."""
        index = {p: i + 1 for i, p in enumerate(self.part_names)}
        return np.array([index[p] for p in self.kp_part], dtype=np.int32)

    def outline(self) -> np.ndarray:
        """Surface points outlining the whole object (for framing the camera)."""
        return self._outline

    @cached_property
    def _outline(self) -> np.ndarray:
        return np.vstack([p.outline_points() for p in self.prims])

    @cached_property
    def radius(self) -> float:
        """Radius of a sphere around the origin holding the object."""
        return float(np.linalg.norm(self.outline(), axis=1).max())


class Builder:
    """Collects primitives and keypoints while a family builds an instance."""

    def __init__(self) -> None:
        self.prims: list[Primitive] = []
        self.kps: dict[str, tuple[np.ndarray, str, float]] = {}

    def add(self, prim: Primitive) -> Primitive:
        """Add a primitive and return it."""
        self.prims.append(prim)
        return prim

    def kp(self, name: str, prim: Primitive, through, direction, slack: float = 0.0) -> None:
        """Pin keypoint `name` at the surface point of `prim` facing `direction` through `through`."""
        d = np.asarray(direction, float)
        d = d / np.linalg.norm(d)
        q = np.asarray(through, float)
        reach = 4.0 * float(np.linalg.norm(prim.local_extent())) + float(np.linalg.norm(q - prim.center))
        t = intersect(prim, q + d * reach, -d[None, :])
        if not np.isfinite(t[0]):
            raise ValueError(f"keypoint {name!r}: the line misses part {prim.part!r}; fix the family builder")
        self.kps[name] = (q + d * (reach - t[0]), prim.part, slack)

    def build(self, category: str, keypoints: list[str], shape_params: dict[str, float]) -> ObjectModel:
        """Freeze the instance, keeping exactly the category's keypoints, recentred on its bbox."""
        missing = [k for k in keypoints if k not in self.kps]
        if missing:
            raise ValueError(
                f"category {category!r}: the family builder does not emit keypoints {missing}; "
                f"add them to soco_pipeline/synth/families.py"
            )
        parts: list[str] = []
        for p in self.prims:
            if p.part not in parts:
                parts.append(p.part)
        pts = np.vstack([p.outline_points() for p in self.prims])
        shift = (pts.min(0) + pts.max(0)) / 2
        for p in self.prims:
            p.center = p.center - shift
        xyz = np.array([self.kps[k][0] for k in keypoints]).reshape(-1, 3) - shift
        return ObjectModel(
            category=category,
            prims=self.prims,
            part_names=parts,
            kp_names=list(keypoints),
            kp_xyz=xyz,
            kp_part=[self.kps[k][1] for k in keypoints],
            kp_slack=np.array([self.kps[k][2] for k in keypoints], dtype=float),
            shape_params=shape_params,
        )
