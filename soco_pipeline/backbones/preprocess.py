"""The official SOCO/OmniProbe input protocol: square padding, resize, keypoint scaling.

The image is padded with white to a square of side max(W, H), the image at the top-left, then
resized to S x S. A keypoint therefore maps to the unit square by the same factor on both axes.

Resize: torch.nn.functional.interpolate(mode="bicubic", antialias=True) on the float image, clamped
to [0, 1]. This is what torchvision's Resize(BICUBIC, antialias=True) does on tensors (the path
OmniProbe-style tensor pipelines take); it batches, runs on the GPU, and unlike PIL does not
quantise to uint8 between resize and normalisation. The clamp mimics PIL's saturation of bicubic
overshoot so both paths agree to within a uint8 rounding step.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

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


def _padded_tensor(image, device: str | torch.device) -> torch.Tensor:
    """(1, 3, side, side) float tensor in [0, 1] of the white-padded square image."""
    arr = pad_to_square(to_rgb_array(image))
    return torch.from_numpy(arr).to(device).permute(2, 0, 1).unsqueeze(0).float().div_(255.0)


def preprocess_image(
    image, size: int, preset: str = "imagenet", device: str | torch.device = "cpu"
) -> torch.Tensor:
    """The official input protocol for one image: RGB, white square pad (top-left), resize to S, normalise.

    Returns a (3, S, S) float32 tensor on `device`.
    """
    return preprocess_batch([image], size, preset, device)[0]


def preprocess_batch(
    images: list, size: int, preset: str = "imagenet", device: str | torch.device = "cpu"
) -> torch.Tensor:
    """The official input protocol for images of any sizes, stacked to (B, 3, S, S) on `device`.

    Each image is padded and resized on its own (sizes differ); clamping and normalisation then run
    once on the whole batch.
    """
    if not images:
        return torch.empty(0, 3, size, size, device=device)
    batch = torch.cat([resize_square(_padded_tensor(im, device), size, clamp=False) for im in images])
    return normalise(batch.clamp_(0.0, 1.0), preset)


@dataclass
class InputBatch:
    """A batch part-way through the input protocol, made off the main thread by `prepare_batch`.

    For the CPU it holds the finished (B, 3, S, S) batch (`pixels`, exactly preprocess_batch's); for an
    accelerator the white-padded uint8 squares (`squares`, side x side x 3, pinned when CUDA is there),
    which `to(device)` copies without blocking and resizes and normalises there, as preprocess_batch
    does on that device.
    """

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
        sq = [s.to(device, non_blocking=True).permute(2, 0, 1).unsqueeze(0).float().div_(255.0) for s in self.squares]
        batch = torch.cat([resize_square(x, self.size, clamp=False) for x in sq])
        return normalise(batch.clamp_(0.0, 1.0), self.preset)


def prepare_batch(images: list, size: int, preset: str, device: str | torch.device) -> InputBatch:
    """The host side of the input protocol for a batch bound to `device`; safe in a worker thread.

    CPU: the finished batch (preprocess_batch on the CPU, the same numbers). Another device: the padded
    uint8 squares (pinned memory when CUDA is available), 4x fewer bytes to copy than float pixels;
    the resize then runs on the device.
    """
    if torch.device(device).type == "cpu":
        return InputBatch(size, preset, pixels=preprocess_batch(images, size, preset, "cpu"))
    squares = [torch.from_numpy(pad_to_square(to_rgb_array(im))) for im in images]
    if torch.cuda.is_available():
        squares = [s.pin_memory() for s in squares]
    return InputBatch(size, preset, squares=squares)


