"""Similarities of float32 queries to a stored fp16 feature map without a float32 copy of the map (that copy
costs more than the multiply at a few dozen queries): half_matmul.c (AVX-512 or AVX2, fp32 accumulation,
argmax ties to the lowest index), compiled once per machine, loaded with ctypes. Opt-in with SOCO_NATIVE
(docs/benchmarks.md), else torch. Indices and shapes are checked here: a bad one raises, not crashes."""

from __future__ import annotations

import ctypes
import functools
import hashlib
import logging
import os
import platform
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from soco_pipeline.settings import variable

log = logging.getLogger(__name__)

SOURCE = Path(__file__).parent / "half_matmul.c"
_FLAGS = ["-O3", "-std=gnu11", "-fPIC", "-shared"]


def cache_dir() -> Path:
    """Where the compiled kernel lives: $SOCO_NATIVE_CACHE, else ~/.cache/soco_pipeline (XDG_CACHE_HOME)."""
    return Path(
        variable("SOCO_NATIVE_CACHE")
        or Path(variable("XDG_CACHE_HOME") or Path.home() / ".cache") / "soco_pipeline"
    )


def _build(cc: str) -> Path:
    """Compile the kernel (once per source and compiler); the file appears atomically."""
    source = SOURCE.read_bytes()
    key = hashlib.sha256(source + " ".join([cc, platform.machine(), *_FLAGS]).encode()).hexdigest()[:16]
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


@dataclass(frozen=True)
class _Kernel:
    """The loaded kernel: the argmax function for this CPU's vector width, the corner sampler, and which."""

    argmax: Callable[..., int]
    corners: Callable[..., None]
    isa: str


@functools.cache
def _library() -> _Kernel | None:
    mode = variable("SOCO_NATIVE").strip().lower()
    if mode in ("", "0", "off", "false"):
        return None
    if mode not in ("1", "on", "true", "auto", "avx512", "avx2"):
        raise ValueError(f"SOCO_NATIVE={mode!r}: use 0 (torch, the default), 1 (auto), avx512 or avx2")
    if platform.machine().lower() not in ("x86_64", "amd64"):
        log.info("the fp16 matching kernel is x86-64 only; matching uses torch on %s", platform.machine())
        return None
    cc = next((cc for cc in (variable("CC"), "cc", "gcc", "clang") if cc and shutil.which(cc)), None)
    if cc is None:
        log.warning("no C compiler found: matching converts each fp16 map to float32 in torch (slower)")
        return None
    try:
        lib = ctypes.CDLL(str(_build(cc)))
    except (OSError, subprocess.CalledProcessError) as e:
        detail = getattr(e, "stderr", "") or e
        log.warning("could not build the fp16 matching kernel (%s); matching uses torch instead", detail)
        return None
    if mode != "avx2" and lib.soco_half_matmul_supported():
        f, isa = lib.soco_half_matmul_argmax, "avx512"
    elif mode != "avx512" and lib.soco_half_matmul_supported_avx2():
        f, isa = lib.soco_half_matmul_argmax_avx2, "avx2"
    else:
        log.info("this CPU lacks %s: matching uses torch", "AVX-512" if mode == "avx512" else "AVX2")
        return None
    ptr, i64 = ctypes.c_void_p, ctypes.c_int64
    f.restype = ctypes.c_int
    f.argtypes = [ptr, i64, i64, ptr, ptr, i64, ptr, ptr, ptr, ptr, ptr, i64, ptr]
    g = lib.soco_half_corners
    g.restype = None
    g.argtypes = [ptr, i64, i64, ptr, ptr, i64, ptr]
    return _Kernel(f, g, isa)


def available() -> bool:
    """True when the native kernel is built, loadable and supported by this CPU."""
    return _library() is not None


def instruction_set() -> str | None:
    """The vector instruction set the kernel runs with here ("avx512" or "avx2"), None without it."""
    kernel = _library()
    return kernel.isa if kernel else None


def _loaded() -> _Kernel:
    kernel = _library()
    if kernel is None:
        raise RuntimeError("the native fp16 matching kernel is not available; check available() first")
    return kernel


def _half_map(fmap: torch.Tensor | np.ndarray) -> tuple[int, int, int, object]:
    """(data pointer, C, cells, owner) of a CPU float16 C x h x w (or C x HW) map, made contiguous if needed;
    `owner` keeps any contiguous copy alive for the call."""
    if isinstance(fmap, np.ndarray):
        if fmap.dtype != np.float16:
            raise TypeError(f"the map must be float16, got {fmap.dtype}")
        m = np.ascontiguousarray(fmap)
        return m.ctypes.data, m.shape[0], m.size // max(m.shape[0], 1), m
    if fmap.dtype != torch.float16 or fmap.device.type != "cpu":
        raise TypeError(f"the map must be a CPU float16 tensor, got {fmap.dtype} on {fmap.device}")
    m = fmap.contiguous()
    return m.data_ptr(), m.shape[0], m.numel() // max(m.shape[0], 1), m


def corner_descriptors(
    fmap: torch.Tensor | np.ndarray, cells: np.ndarray, weights: np.ndarray, out: np.ndarray | None = None
) -> torch.Tensor:
    """out[i] = sum_k weights[i, k] * fmap[:, cells[i, k]] (N x C float32) for an fp16 C x h x w CPU map, into
    `out` when given: bilinear sampling of the corner cells only. Call only when `available()`."""
    kernel = _loaded()
    ptr, c, hw, _owner = _half_map(fmap)
    cells = np.ascontiguousarray(cells, dtype=np.int64).reshape(-1, 4)
    weights = np.ascontiguousarray(weights, dtype=np.float32).reshape(-1, 4)
    if len(cells) != len(weights) or (cells.size and (cells.min() < 0 or cells.max() >= hw)):
        raise ValueError(f"corner cells must be N x 4 indices into {hw} cells, with N x 4 weights")
    if out is None:
        out = np.empty((len(cells), c), dtype=np.float32)
    elif out.dtype != np.float32 or not out.flags.c_contiguous or out.shape != (len(cells), c):
        raise TypeError(f"out must be a C-contiguous float32 array of shape {(len(cells), c)}")
    kernel.corners(ptr, c, hw, cells.ctypes.data, weights.ctypes.data, len(cells), out.ctypes.data)
    return torch.from_numpy(out)


def argmax_into(
    fmap: torch.Tensor | np.ndarray,
    queries: np.ndarray,
    rows: np.ndarray | None,
    idx_out: np.ndarray,
    val_out: np.ndarray,
    sims_out: np.ndarray | None = None,
    probes: tuple[np.ndarray, np.ndarray] | None = None,
    probe_out: np.ndarray | None = None,
) -> None:
    """Write the argmax cell (int64) and max (float32) of queries[rows] (float32, C-contiguous) against an
    fp16 C x h x w map into idx_out / val_out, the similarities (len(rows) x hw) into sims_out when given,
    and for probes = (query positions, ascending cells) their similarities into probe_out; no allocation."""
    kernel = _loaded()
    ptr, c, hw, _owner = _half_map(fmap)
    n = len(rows) if rows is not None else len(queries)
    if queries.dtype != np.float32 or not queries.flags.c_contiguous or queries.ndim != 2:
        raise TypeError("queries must be a C-contiguous float32 matrix")
    if queries.shape[1] != c:
        raise ValueError(f"queries of {queries.shape[1]} channels do not match a map of {c} channels")
    if rows is not None and (rows.dtype != np.int64 or not rows.flags.c_contiguous):
        raise TypeError("rows must be a contiguous int64 array")
    if rows is not None and n and (rows.min() < 0 or rows.max() >= len(queries)):
        raise ValueError(f"query rows must lie in [0, {len(queries)})")
    for name, arr, dtype in (("idx_out", idx_out, np.int64), ("val_out", val_out, np.float32)):
        if arr.dtype != dtype or not arr.flags.c_contiguous or len(arr) != n:
            raise TypeError(f"{name} must be a contiguous {np.dtype(dtype)} array of {n} entries")
    if sims_out is not None and (
        sims_out.dtype != np.float32 or not sims_out.flags.c_contiguous or sims_out.size < n * hw
    ):
        raise TypeError(f"sims_out must be a contiguous float32 buffer of at least {n} x {hw} values")
    probe_q = probe_cell = None
    if probes is not None:
        probe_q, probe_cell = probes
        k = len(probe_q)
        for name, arr, dtype in (
            ("probe positions", probe_q, np.int64),
            ("probe cells", probe_cell, np.int64),
            ("probe_out", probe_out, np.float32),
        ):
            if arr is None or arr.dtype != dtype or not arr.flags.c_contiguous or len(arr) != k:
                raise TypeError(f"{name} must be a contiguous {np.dtype(dtype)} array of {k} entries")
        if k and (
            probe_q.min() < 0
            or probe_q.max() >= n
            or probe_cell.min() < 0
            or probe_cell.max() >= hw
            or (np.diff(probe_cell) < 0).any()
        ):
            raise ValueError(
                f"probes must be query positions in [0, {n}) and cells in [0, {hw}), cells ascending"
            )
    if n == 0:
        return
    rc = kernel.argmax(
        ptr,
        c,
        hw,
        queries.ctypes.data,
        None if rows is None else rows.ctypes.data,
        n,
        None if sims_out is None else sims_out.ctypes.data,
        idx_out.ctypes.data,
        val_out.ctypes.data,
        None if probe_q is None else probe_q.ctypes.data,
        None if probe_cell is None else probe_cell.ctypes.data,
        0 if probe_q is None else len(probe_q),
        None if probe_out is None else probe_out.ctypes.data,
    )
    if rc != 0:
        raise MemoryError(
            f"the fp16 matching kernel could not allocate its workspace ({n} queries x {c} channels)"
        )


def similarity_argmax(
    queries: torch.Tensor, fmap: torch.Tensor | np.ndarray, want_sims: bool = False
) -> tuple[torch.Tensor | None, torch.Tensor, torch.Tensor]:
    """(sims Q x HW or None, argmax cell per query (int64), max per query) of float32 `queries` (Q x C)
    against an fp16 C x h x w (or C x HW) map on the CPU. Call only when `available()`."""
    _, c, hw, m = _half_map(fmap)
    q = np.ascontiguousarray(torch.as_tensor(queries).to(device="cpu", dtype=torch.float32).numpy())
    if q.ndim != 2 or q.shape[1] != c:
        raise ValueError(f"queries {tuple(q.shape)} do not match a map of {c} channels")
    n = q.shape[0]
    sims = np.empty((n, hw), dtype=np.float32) if want_sims else None
    idx, val = np.empty(n, dtype=np.int64), np.empty(n, dtype=np.float32)
    argmax_into(m, q, None, idx, val, sims)
    return (None if sims is None else torch.from_numpy(sims)), torch.from_numpy(idx), torch.from_numpy(val)
