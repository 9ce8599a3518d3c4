"""The official SOCO/OmniProbe input protocol: white square pad (image top-left), resize to S x S."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image

from soco_pipeline.backbones.spec import RESIZE_MODES  # noqa: F401 - the spec's input.resize values

# How the padded square is resized to S x S (see the module docstring): the official PIL path.
DEFAULT_RESIZE = "pil"

# Per-channel (mean, std) of each normalisation preset, applied to RGB in [0, 1].
NORMALISATION_PRESETS: dict[str, tuple[tuple[float, ...], tuple[float, ...]]] = {
    "imagenet": ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225)),
    "clip": ((0.48145466, 0.4578275, 0.40821073), (0.26862954, 0.26130258, 0.27577711)),
    "half": ((0.5, 0.5, 0.5), (0.5, 0.5, 0.5)),
    "raw": ((0.0, 0.0, 0.0), (1.0, 1.0, 1.0)),
}


def to_rgb_array(image) -> np.ndarray:
    """An H x W x 3 uint8 RGB array from a PIL image or an array (grey, RGB or RGBA)."""
    if hasattr(image, "convert"):
        image = np.asarray(image.convert("RGB"))
    arr = np.asarray(image)
    if arr.ndim == 2:
        arr = np.repeat(arr[:, :, None], 3, axis=2)
    if arr.ndim != 3 or arr.shape[2] not in (3, 4):
        raise ValueError(f"expected an H x W x 3 RGB image, got an array of shape {arr.shape}")
    if arr.dtype != np.uint8:
        raise ValueError(f"expected a uint8 image, got {arr.dtype}; convert it with PIL first")
    return arr[:, :, :3]


def pad_to_square(image: np.ndarray, fill: int = 255) -> np.ndarray:
    """Pad an H x W x 3 image to max(W, H) square with `fill` (white), the image at the top-left."""
    h, w = image.shape[:2]
    side = max(h, w)
    out = np.full((side, side, image.shape[2]), fill, dtype=image.dtype)
    out[:h, :w] = image
    return out


def pil_resize_square(square: np.ndarray, size: int) -> np.ndarray:
    """PIL's antialiased bicubic resize of a uint8 square: the official scorer's (torchvision's `Resize`)."""
    if square.shape[0] == size and square.shape[1] == size:
        return square
    return np.array(Image.fromarray(square).resize((size, size), Image.Resampling.BICUBIC))


def check_resize(resize: str) -> str:
    """`resize` itself, or a ValueError naming the allowed modes."""
    if resize not in RESIZE_MODES:
        raise ValueError(f"unknown resize {resize!r}; use one of {list(RESIZE_MODES)}")
    return resize


def resize_square(images: torch.Tensor, size: int, clamp: bool = True) -> torch.Tensor:
    """Bicubic antialiased resize of (B, 3, s, s) float images in [0, 1] to (B, 3, size, size)."""
    if images.shape[-1] == size and images.shape[-2] == size:
        return images
    out = F.interpolate(images, size=(size, size), mode="bicubic", antialias=True, align_corners=False)
    return out.clamp_(0.0, 1.0) if clamp else out


def normalise(images: torch.Tensor, preset: str) -> torch.Tensor:
    """Apply a normalisation preset (imagenet | clip | half | raw) to (B, 3, S, S) images in [0, 1]."""
    if preset not in NORMALISATION_PRESETS:
        raise ValueError(f"unknown normalisation {preset!r}; use one of {list(NORMALISATION_PRESETS)}")
    if preset == "raw":
        return images
    mean, std = NORMALISATION_PRESETS[preset]
    m = torch.tensor(mean, dtype=images.dtype, device=images.device).view(1, 3, 1, 1)
    s = torch.tensor(std, dtype=images.dtype, device=images.device).view(1, 3, 1, 1)
    return (images - m) / s


def _to_unit_tensor(square: np.ndarray | torch.Tensor, device: str | torch.device) -> torch.Tensor:
    """(1, 3, s, s) float tensor in [0, 1] of an s x s x 3 uint8 square (torchvision's ToTensor)."""
    t = torch.from_numpy(square) if isinstance(square, np.ndarray) else square
    return t.to(device, non_blocking=True).permute(2, 0, 1).unsqueeze(0).float().div_(255.0)


def host_square(image, size: int, resize: str = DEFAULT_RESIZE) -> np.ndarray:
    """The uint8 square of one image: white-padded, and for `pil` already resized to size x size."""
    square = pad_to_square(to_rgb_array(image))
    return pil_resize_square(square, size) if check_resize(resize) == "pil" else square


def squares_to_batch(squares: list, size: int, preset: str, device: str | torch.device) -> torch.Tensor:
    """Normalised (B, 3, size, size) float32 batch on `device` from host_square's squares."""
    batch = torch.cat([resize_square(_to_unit_tensor(sq, device), size, clamp=False) for sq in squares])
    return normalise(batch.clamp_(0.0, 1.0), preset)


def preprocess_image(
    image,
    size: int,
    preset: str = "imagenet",
    device: str | torch.device = "cpu",
    resize: str = DEFAULT_RESIZE,
) -> torch.Tensor:
    """The official input protocol for one image: a (3, S, S) float32 tensor on `device`."""
    return preprocess_batch([image], size, preset, device, resize)[0]


def preprocess_batch(
    images: list,
    size: int,
    preset: str = "imagenet",
    device: str | torch.device = "cpu",
    resize: str = DEFAULT_RESIZE,
) -> torch.Tensor:
    """The official input protocol for images of any sizes, stacked to (B, 3, S, S) on `device`."""
    if not images:
        return torch.empty(0, 3, size, size, device=device)
    return squares_to_batch([host_square(im, size, resize) for im in images], size, preset, device)


@dataclass
class InputBatch:
    """A batch part-way through the input protocol: `pixels` (CPU), else uint8 `squares`."""

    size: int
    preset: str
    pixels: torch.Tensor | None = None
    squares: list[torch.Tensor] | None = None

    def __len__(self) -> int:
        return len(self.pixels) if self.pixels is not None else len(self.squares or [])

    def to(self, device: str | torch.device) -> torch.Tensor:
        """The normalised (B, 3, S, S) float32 batch on `device`."""
        if self.pixels is not None:
            return self.pixels.to(device, non_blocking=True)
        return squares_to_batch(self.squares, self.size, self.preset, device)


def prepare_batch(
    images: list, size: int, preset: str, device: str | torch.device, resize: str = DEFAULT_RESIZE
) -> InputBatch:
    """The host side of the input protocol, thread-safe: on CPU the finished batch, else uint8 squares."""
    if torch.device(device).type == "cpu":
        return InputBatch(size, preset, pixels=preprocess_batch(images, size, preset, "cpu", resize))
    squares = [torch.from_numpy(np.ascontiguousarray(host_square(im, size, resize))) for im in images]
    if torch.cuda.is_available():
        squares = [s.pin_memory() for s in squares]
    return InputBatch(size, preset, squares=squares)
