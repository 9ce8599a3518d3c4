"""The embedded benchmark generator: procedural 3D objects rendered over real photographs.

`generate_dataset(root, size, seed)` writes the ImageNet3D / Animal3D style layout of
docs/contracts.md; `render_object` renders one instance at a given pose (for checks and tests).
"""

from .generate import generate_dataset
from .scene import render_object

__all__ = ["generate_dataset", "render_object"]
