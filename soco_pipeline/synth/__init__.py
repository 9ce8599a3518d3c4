"""The embedded benchmark generator: procedural 3D objects rendered over real photographs."""

from .generate import generate_dataset
from .scene import render_object

__all__ = ["generate_dataset", "render_object"]
