"""Similarities of float32 queries to a stored fp16 feature map, computed without a float32 copy of the map.

Matching meets each target map with only a few dozen queries, so `queries @ fmap.float()` spends more
time writing and re-reading the float32 copy of the map than multiplying. The C kernel in
`native/half_matmul.c` widens the fp16 values in registers instead (AVX-512, fp32 accumulation; the same
sums as the float32 product, argmax ties to the lowest index as torch.argmax). It is compiled once per
machine with the system C compiler into a cache folder and loaded with ctypes; where there is no
compiler, no AVX-512, or SOCO_NATIVE=0, `available()` is False and callers use torch.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import logging
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import torch

log = logging.getLogger(__name__)

SOURCE = Path(__file__).parent / "native" / "half_matmul.c"
_FLAGS = ["-O3", "-std=gnu11", "-fPIC", "-shared"]


def cache_dir() -> Path:
    """Where the compiled kernel lives: $SOCO_NATIVE_CACHE, else ~/.cache/soco_pipeline (XDG_CACHE_HOME)."""
    if os.environ.get("SOCO_NATIVE_CACHE"):
        return Path(os.environ["SOCO_NATIVE_CACHE"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "soco_pipeline"


def _compiler() -> str | None:
    for cc in (os.environ.get("CC"), "cc", "gcc", "clang"):
        if cc and shutil.which(cc):
            return cc
    return None


def _build(cc: str) -> Path:
    """Compile the kernel (once per source and compiler); the file appears atomically."""
    source = SOURCE.read_bytes()
    key = hashlib.sha256(source + " ".join([cc, *_FLAGS]).encode()).hexdigest()[:16]
    target = cache_dir() / f"half_matmul-{key}.so"
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(suffix=".so", dir=target.parent)
    os.close(fd)
    try:
        subprocess.run([cc, *_FLAGS, "-o", tmp, str(SOURCE)], check=True, capture_output=True, text=True)
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return target


@functools.cache
def _library() -> ctypes.CDLL | None:
    if os.environ.get("SOCO_NATIVE", "1") == "0":
        return None
    cc = _compiler()
    if cc is None:
        log.warning("no C compiler found: matching converts each fp16 map to float32 in torch (slower)")
        return None
    try:
        lib = ctypes.CDLL(str(_build(cc)))
    except (OSError, subprocess.CalledProcessError) as e:
        detail = getattr(e, "stderr", "") or e
        log.warning("could not build the fp16 matching kernel (%s); matching uses torch instead", detail)
        return None
    if not lib.soco_half_matmul_supported():
        log.info("this CPU lacks AVX-512: matching converts each fp16 map to float32 in torch")
        return None
    f = lib.soco_half_matmul_argmax
    f.restype = ctypes.c_int
    f.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64,
                  ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
    return lib


def available() -> bool:
    """True when the native kernel is built, loadable and supported by this CPU."""
    return _library() is not None


def similarity_argmax(
    queries: torch.Tensor, fmap: torch.Tensor | np.ndarray, want_sims: bool = False
) -> tuple[torch.Tensor | None, torch.Tensor, torch.Tensor]:
    """(sims Q x HW or None, argmax cell per query (int64), max per query) of float32 `queries` (Q x C)
    against an fp16 C x h x w (or C x HW) map on the CPU. Call only when `available()`."""
    lib = _library()
    if lib is None:
        raise RuntimeError("the native fp16 matching kernel is not available; check available() first")
    m = torch.as_tensor(fmap)
    if m.dtype != torch.float16 or m.device.type != "cpu":
        raise TypeError(f"the map must be a CPU float16 tensor, got {m.dtype} on {m.device}")
    m = m.reshape(m.shape[0], -1).contiguous()
    q = queries.to(device="cpu", dtype=torch.float32).contiguous()
    if q.ndim != 2 or q.shape[1] != m.shape[0]:
        raise ValueError(f"queries {tuple(q.shape)} do not match a map of {m.shape[0]} channels")
    n, hw = q.shape[0], m.shape[1]
    sims = torch.empty((n, hw), dtype=torch.float32) if want_sims else None
    idx = torch.empty(n, dtype=torch.int64)
    val = torch.empty(n, dtype=torch.float32)
    rc = lib.soco_half_matmul_argmax(
        m.data_ptr(), m.shape[0], hw, q.data_ptr(), n,
        sims.data_ptr() if sims is not None else None, idx.data_ptr(), val.data_ptr(),
    )
    if rc != 0:
        raise MemoryError(f"the fp16 matching kernel could not allocate its workspace ({n} x {hw} floats)")
    return sims, idx, val
