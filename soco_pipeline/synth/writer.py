"""Byte-deterministic encoders for the files the generator writes (npz, JSON, JPEG, PNG)."""

from __future__ import annotations

import io
import json
import zipfile

import numpy as np
from PIL import Image

JPEG_QUALITY = 92
_ZIP_DATE = (1980, 1, 1, 0, 0, 0)


def npz_bytes(arrays: dict[str, np.ndarray]) -> bytes:
    """An .npz archive (np.load-compatible) whose zip entries carry a fixed timestamp."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for key in sorted(arrays):
            arr = io.BytesIO()
            np.lib.format.write_array(arr, np.asanyarray(arrays[key]), allow_pickle=True)
            info = zipfile.ZipInfo(f"{key}.npy", date_time=_ZIP_DATE)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            zf.writestr(info, arr.getvalue())
    return buf.getvalue()


def object_array(items: list[dict]) -> np.ndarray:
    """A 1-D object array holding dicts (ImageNet3D's `annotations` entry)."""
    out = np.empty(len(items), dtype=object)
    for i, it in enumerate(items):
        out[i] = it
    return out


def json_bytes(obj) -> bytes:
    """JSON with sorted keys (stable bytes for the same content)."""
    return json.dumps(obj, sort_keys=True, indent=1, allow_nan=False).encode()


def jpeg_bytes(img: np.ndarray, quality: int = JPEG_QUALITY) -> bytes:
    """Encode an RGB uint8 image as JPEG at a fixed quality."""
    buf = io.BytesIO()
    Image.fromarray(img, "RGB").save(buf, format="JPEG", quality=quality)
    return buf.getvalue()


def png_bytes(arr: np.ndarray) -> bytes:
    """Encode a uint8 single-channel map as PNG."""
    buf = io.BytesIO()
    Image.fromarray(np.ascontiguousarray(arr, dtype=np.uint8), "L").save(buf, format="PNG")
    return buf.getvalue()
