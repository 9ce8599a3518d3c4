"""Zero-shot matching: cosine nearest neighbour between frozen feature maps (protocol steps 4-6), one matrix
product per target image; a store with `.get_stored` (fp16) goes through the native `half_matmul` kernel."""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F

from soco_pipeline.evaluation.geometry import scale_keypoints, unit_to_pixels
from soco_pipeline.evaluation.protocol import ProtocolConfig
from soco_pipeline.native import half_matmul

PREDICTION_COLUMNS = "backbone pair_id src_keypoint mode pred_x pred_y similarity input_size".split()
# Bytes of float32 similarity map allowed at once when upsampling to S x S.
_UPSAMPLE_CHUNK_FLOATS = 1 << 25


class FeatureStoreLike(Protocol):
    """What matching needs from a feature store."""

    def get(self, image_id: str) -> tuple[np.ndarray, dict[str, Any]]: ...


class MatchingError(ValueError):
    """Inputs to matching are inconsistent; the message names the record and the fix."""


def to_unit(xy: np.ndarray, sizes: np.ndarray, input_size: int, protocol: ProtocolConfig) -> np.ndarray:
    """Original pixels -> unit padded-square coordinates, with the protocol's keypoint scaling (step 4)."""
    if protocol.keypoint_scaling == "official_int":
        return scale_keypoints(xy, sizes, input_size)
    xy = np.asarray(xy, dtype=np.float64)
    sizes = np.broadcast_to(np.asarray(sizes, dtype=np.float64), xy.shape)
    return xy / sizes.max(axis=1, keepdims=True)


def cell_points(rows: torch.Tensor, cols: torch.Tensor, h, w, protocol: ProtocolConfig) -> torch.Tensor:
    """Unit coordinates (u, v) reported for grid cells: top-left corner (official) or centre."""
    off = 0.5 if protocol.prediction_point == "center" else 0.0
    return torch.stack([(cols.double() + off) / w, (rows.double() + off) / h], dim=-1)


def cells_of(uv: np.ndarray, h: int, w: int) -> np.ndarray:
    """Flat index (row * w + col) of the grid cell each unit point falls in."""
    col = np.clip(np.floor(uv[:, 0] * w), 0, w - 1).astype(np.int64)
    row = np.clip(np.floor(uv[:, 1] * h), 0, h - 1).astype(np.int64)
    return row * w + col


def bilinear_corners(uv: np.ndarray, h: int, w: int) -> tuple[np.ndarray, np.ndarray]:
    """Flat cells and float32 weights (N x 4) of grid_sample(align_corners=True)'s bilinear read at unit
    points, the official script's quirk kept; corners outside get weight 0."""
    g = (2.0 * np.asarray(uv, dtype=np.float64) - 1.0).astype(np.float32)  # the grid grid_sample receives
    x = (g[:, 0] + np.float32(1)) / np.float32(2) * np.float32(w - 1)
    y = (g[:, 1] + np.float32(1)) / np.float32(2) * np.float32(h - 1)
    x0, y0 = np.floor(x), np.floor(y)
    x1, y1 = x0 + 1, y0 + 1
    xs = np.stack([x0, x1, x0, x1], axis=1)  # corners nw, ne, sw, se
    ys = np.stack([y0, y0, y1, y1], axis=1)
    weights = np.stack(
        [(x1 - x) * (y1 - y), (x - x0) * (y1 - y), (x1 - x) * (y - y0), (x - x0) * (y - y0)], axis=1
    )
    weights *= (xs >= 0) & (xs <= w - 1) & (ys >= 0) & (ys <= h - 1)
    cells = np.clip(ys, 0, h - 1).astype(np.int64) * w + np.clip(xs, 0, w - 1).astype(np.int64)
    return cells, weights


def sample_descriptors(fmap: torch.Tensor | np.ndarray, uv: torch.Tensor | np.ndarray) -> torch.Tensor:
    """Bilinear descriptors (N x C, float32) of a C x h x w map at unit points, as the official script
    (`bilinear_corners`), reading only each point's four corner cells."""
    _, h, w = fmap.shape
    uv = uv.cpu().numpy() if isinstance(uv, torch.Tensor) else uv
    return _corner_descriptors(fmap, *bilinear_corners(uv, h, w))


def _corner_descriptors(
    fmap: torch.Tensor | np.ndarray,
    cells: np.ndarray,
    weights: np.ndarray,
    device: torch.device | None = None,
) -> torch.Tensor:
    """Weighted sums (N x C, float32) of the map's corner cells (N x 4)."""
    on_cpu = device is None or device.type == "cpu"
    if on_cpu and fmap.dtype in (np.float16, torch.float16) and half_matmul.available():
        return half_matmul.corner_descriptors(fmap, cells, weights)
    c = fmap.shape[0]
    if isinstance(fmap, np.ndarray) and not on_cpu:
        fmap = stored_tensor(fmap, device)
    if isinstance(fmap, np.ndarray) or (fmap.device.type == "cpu" and fmap.dtype != torch.bfloat16):
        # numpy on the CPU: a few small-array ops per image
        flat = (fmap if isinstance(fmap, np.ndarray) else fmap.numpy()).reshape(c, -1)
        corners = np.take(flat, cells.reshape(-1), axis=1).reshape(c, -1, 4).astype(np.float32)
        return torch.from_numpy((corners * weights[None]).sum(axis=2).T)
    flat = fmap.reshape(c, -1)
    corners = flat.index_select(1, torch.as_tensor(cells.reshape(-1), device=flat.device)).float()
    return (corners.reshape(c, -1, 4) * torch.as_tensor(weights, device=flat.device)[None]).sum(dim=2).T


def _corner_descriptors_into(
    arr: np.ndarray, cells: np.ndarray, weights: np.ndarray, out: torch.Tensor
) -> None:
    """`_corner_descriptors` written into `out`, in place by the native kernel where it can."""
    if (
        out.device.type == "cpu"
        and out.dtype == torch.float32
        and arr.dtype == np.float16
        and half_matmul.available()
    ):
        half_matmul.corner_descriptors(arr, cells, weights, out=out.numpy())
    else:
        out[:] = _corner_descriptors(arr, cells, weights, out.device).to(device=out.device, dtype=out.dtype)


def _dtype(protocol: ProtocolConfig) -> torch.dtype:
    return getattr(torch, protocol.compute_dtype)


def load_stored_maps(store: FeatureStoreLike, image_id: str, backbone: str) -> tuple[np.ndarray, int]:
    """The map as the store keeps it (fp16 for FeatureStore, read through `get_stored`) and its input size S."""
    try:
        arr, meta = getattr(store, "get_stored", store.get)(image_id)
    except KeyError:
        raise MatchingError(
            f"no features for image {image_id!r} of backbone {backbone!r}: materialize its feature cache "
            f"(feature_manifest[{backbone}]) for this image set"
        ) from None
    if arr.ndim != 3:
        raise MatchingError(
            f"features of image {image_id!r} ({backbone}) have shape {arr.shape}; expected C x h x w"
        )
    if "input_size" not in meta:
        raise MatchingError(
            f"features of image {image_id!r} ({backbone}) lack meta['input_size']; re-extract them"
        )
    return np.asarray(arr), int(meta["input_size"])


def stored_tensor(arr: np.ndarray, device) -> torch.Tensor:
    """A stored map as a tensor on `device` (a read-only CPU map is copied)."""
    if arr.flags.writeable:
        return torch.as_tensor(arr).to(device=device)
    if torch.device(device).type == "cpu":
        return torch.from_numpy(np.array(arr))
    with warnings.catch_warnings():  # only read, to copy it to the device
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
        return torch.as_tensor(arr).to(device=device)


def visible_keypoint_xy(
    keypoints: pd.DataFrame,
    image_ids: np.ndarray,
    names: np.ndarray,
    what: str,
    error: type[Exception] = MatchingError,
) -> np.ndarray:
    """x, y of (image, keypoint) rows; `error` naming the first missing or invisible one."""
    # Integer keys (image code * n_names + name code): two string hashes instead of a MultiIndex reindex.
    kp_img, kp_name = keypoints["image_id"].to_numpy(), keypoints["keypoint"].to_numpy()
    img_index, name_index = pd.Index(pd.unique(kp_img)), pd.Index(pd.unique(kp_name))
    key = pd.Index(img_index.get_indexer(kp_img) * len(name_index) + name_index.get_indexer(kp_name))
    if not key.is_unique:
        raise error(
            "the keypoints table has several rows for one (image_id, keypoint): rebuild it from the clicks"
        )
    q_img, q_name = img_index.get_indexer(np.asarray(image_ids)), name_index.get_indexer(np.asarray(names))
    pos = key.get_indexer(np.where((q_img >= 0) & (q_name >= 0), q_img * len(name_index) + q_name, -1))
    visible = np.zeros(len(pos), dtype=bool)
    visible[pos >= 0] = keypoints["visible"].to_numpy(bool)[pos[pos >= 0]]
    bad = ~visible
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise error(
            f"{what} keypoint {names[i]!r} of image {image_ids[i]!r} is missing or not visible in the keypoints "
            f"table ({int(bad.sum())} such rows): rebuild the correspondences from the current keypoints"
        )
    return keypoints[["x", "y"]].to_numpy(np.float64)[pos]


def image_sizes(images: pd.DataFrame, image_ids: np.ndarray) -> np.ndarray:
    """[W, H] of each image id; a clear error for ids missing from the image set."""
    im = images.set_index("image_id")[["width", "height"]].reindex(image_ids)
    if im["width"].isna().any():
        missing = pd.unique(np.asarray(image_ids)[im["width"].isna().to_numpy()])[:5]
        raise MatchingError(
            f"images {list(missing)} are not in the image set: rebuild the pairs from image_set"
        )
    return im.to_numpy(np.float64)


def source_descriptors(
    sources: pd.DataFrame, keypoints, images, store, protocol, backbone, device
) -> tuple[torch.Tensor, np.ndarray]:
    """Descriptors of the distinct (src_image, src_keypoint) of `sources`, and each row's index into them."""
    src_images, src_keypoints = sources["src_image"].to_numpy(), sources["src_keypoint"].to_numpy()
    codes, first = group_ids(src_images, src_keypoints)
    # Number the sources image by image, so that each image's descriptors are one block of rows.
    by_image = np.argsort(src_images[first], kind="stable")
    renumber = np.empty(len(first), dtype=np.int64)
    renumber[by_image] = np.arange(len(first))
    codes, first = renumber[codes], first[by_image]
    uimg, ukp = src_images[first], src_keypoints[first]
    xy = visible_keypoint_xy(keypoints, uimg, ukp, "source")
    sizes = image_sizes(images, uimg)
    starts = np.flatnonzero(np.r_[True, uimg[1:] != uimg[:-1]])
    ends = np.r_[starts[1:], len(uimg)]
    desc: torch.Tensor | None = None
    corners_by_grid: dict[
        tuple[int, int, int], tuple[np.ndarray, np.ndarray]
    ] = {}  # (S, h, w) -> all points'
    for a, b in zip(starts, ends, strict=True):
        arr, size = load_stored_maps(store, uimg[a], backbone)
        c, h, w = arr.shape
        if desc is None:
            desc = torch.empty((len(uimg), c), dtype=_dtype(protocol), device=device)
        elif c != desc.shape[1]:
            raise MatchingError(f"image {uimg[a]!r} has {c} channels, others {desc.shape[1]}")
        if (size, h, w) not in corners_by_grid:  # one pass per grid (the input policies fix S per backbone)
            corners_by_grid[(size, h, w)] = bilinear_corners(to_unit(xy, sizes, size, protocol), h, w)
        cells, weights = corners_by_grid[(size, h, w)]
        _corner_descriptors_into(arr, cells[a:b], weights[a:b], desc[a:b])
    assert desc is not None
    return desc, codes


def _similarities(q: torch.Tensor, fmap: torch.Tensor, dtype: torch.dtype, want_sims: bool):
    """(sims or None, argmax cell, max) of q (n x C) against a C x h x w map in `dtype`; an fp16 CPU map at
    float32 goes through the native kernel."""
    if (
        fmap.dtype == torch.float16
        and dtype == torch.float32
        and fmap.device.type == "cpu"
        and half_matmul.available()
    ):
        return half_matmul.similarity_argmax(q, fmap, want_sims)
    sims = q.to(dtype) @ fmap.to(dtype).reshape(fmap.shape[0], -1)
    idx = sims.argmax(dim=1)  # argmax + gather is much cheaper than max(dim) on CPU
    return sims, idx, sims.gather(1, idx[:, None])[:, 0]


def group_ids(*keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Group number of each row of the key columns (first appearance order) and each group's first row."""
    key = np.zeros(len(keys[0]), dtype=np.int64)
    for column in keys:
        codes, uniques = pd.factorize(column)
        key = key * max(len(uniques), 1) + codes
    _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
    order = np.argsort(first, kind="stable")
    rank = np.empty_like(order)
    rank[order] = np.arange(len(order))
    return rank[inverse.reshape(-1)], first[order]


def group_slices(keys: np.ndarray):
    """(key, row indices) for each distinct key, rows in their original order."""
    order = np.argsort(keys, kind="stable")
    sk = keys[order]
    starts = np.flatnonzero(np.r_[True, sk[1:] != sk[:-1]]) if len(sk) else np.array([], dtype=np.int64)
    for a, b in zip(starts, np.r_[starts[1:], len(sk)], strict=True):
        yield sk[a], order[a:b]


def _index_points(idx: np.ndarray, hw: np.ndarray, protocol: ProtocolConfig) -> np.ndarray:
    """Unit points reported for flat cell indices on per-row grids (hw: n x 2)."""
    h, w = hw[:, 0], hw[:, 1]
    return cell_points(
        torch.as_tensor(idx // w), torch.as_tensor(idx % w), torch.as_tensor(h), torch.as_tensor(w), protocol
    ).numpy()


def _segment_argmax(owner: np.ndarray, vals: np.ndarray, cells: np.ndarray, wanted: np.ndarray):
    """(argmax cell, max) of vals over the rows of each owner in `wanted`; ties go to the lowest cell index."""
    order = np.argsort(owner, kind="stable")
    o, v, cl = owner[order], vals[order], cells[order]
    starts = np.flatnonzero(np.r_[True, o[1:] != o[:-1]]) if len(o) else np.zeros(0, dtype=np.int64)
    best = np.maximum.reduceat(v, starts) if len(o) else np.zeros(0)
    seg = np.repeat(np.arange(len(starts)), np.diff(np.r_[starts, len(o)]))
    pick = np.where(v == best[seg], cl, np.iinfo(np.int64).max)
    idx = np.minimum.reduceat(pick, starts) if len(o) else np.zeros(0, dtype=np.int64)
    at = np.searchsorted(o[starts], wanted)  # wanted owners are among o[starts] (checked by the caller)
    return idx[at], best[at]


def _free_argmax(sims: torch.Tensor, h: int, w: int, size: int, protocol: ProtocolConfig):
    """Unit prediction (n x 2) and similarity (n) from similarity rows (n x hw) over all patches."""
    if protocol.upsample:
        return _upsampled_argmax(sims, h, w, size, protocol)
    idx = sims.argmax(dim=1)  # argmax + gather is much cheaper than max(dim) on CPU
    best = sims.gather(1, idx[:, None])[:, 0]
    rows, cols = idx // w, idx % w
    if not protocol.soft_argmax:
        return cell_points(rows, cols, h, w, protocol), best
    r = protocol.soft_argmax_window // 2
    d = torch.arange(-r, r + 1, device=sims.device)
    wr = (rows[:, None, None] + d[None, :, None]).expand(-1, -1, len(d))
    wc = (cols[:, None, None] + d[None, None, :]).expand(-1, len(d), -1)
    wr, wc = wr.reshape(len(idx), -1), wc.reshape(len(idx), -1)
    valid = (wr >= 0) & (wr < h) & (wc >= 0) & (wc < w)
    flat = wr.clamp(0, h - 1) * w + wc.clamp(0, w - 1)
    s = sims.gather(1, flat).double().masked_fill(~valid, float("-inf"))
    weights = torch.softmax(s / protocol.soft_argmax_temperature, dim=1)
    pts = cell_points(wr.clamp(0, h - 1), wc.clamp(0, w - 1), h, w, protocol)
    return (weights[..., None] * pts).sum(dim=1), best


def _upsampled_argmax(sims: torch.Tensor, h: int, w: int, size: int, protocol: ProtocolConfig):
    """Argmax of the similarity map bilinearly upsampled to S x S, reported at the pixel's point."""
    chunk = max(1, _UPSAMPLE_CHUNK_FLOATS // (size * size))
    uv, best = [], []
    for i in range(0, len(sims), chunk):
        m = sims[i : i + chunk].float().view(-1, 1, h, w)
        up = F.interpolate(m, size=(size, size), mode="bilinear", align_corners=False).flatten(1)
        b, idx = up.max(dim=1)
        uv.append(cell_points(idx // size, idx % size, size, size, protocol))
        best.append(b)
    return torch.cat(uv), torch.cat(best)


@dataclass
class _Queries:
    """The distinct (pair, source keypoint) queries of the evaluated rows, and the rows they come from."""

    queries: pd.DataFrame  # pair_id, src_keypoint, src_image, trg_image: one row per query
    rows: dict[str, np.ndarray]  # the evaluated correspondence rows, with src_image and trg_image
    qid: np.ndarray  # the query of each row


def _queries(image_pairs: pd.DataFrame, correspondences: pd.DataFrame) -> _Queries | None:
    """The queries of the evaluated pairs' rows (None when there are none)."""
    pairs = image_pairs.loc[image_pairs["evaluated"].astype(bool), ["pair_id", "src_image", "trg_image"]]
    # The rows of evaluated pairs, with their images: an index lookup instead of a merge on string keys.
    pair = pd.Index(pairs["pair_id"]).get_indexer(correspondences["pair_id"])
    keep = np.flatnonzero(pair >= 0)
    if not len(keep):
        return None
    rows = {
        col: correspondences[col].to_numpy()[keep]
        for col in ("pair_id", "kind", "src_keypoint", "trg_keypoint", "geo", "n_candidates")
    }
    rows["src_image"] = pairs["src_image"].to_numpy()[pair[keep]]
    rows["trg_image"] = pairs["trg_image"].to_numpy()[pair[keep]]
    qid, first = group_ids(pair[keep], rows["src_keypoint"])  # query of each row, first row of each query
    queries = pd.DataFrame(
        {col: rows[col][first] for col in ("pair_id", "src_keypoint", "src_image", "trg_image")}
    )
    return _Queries(queries, rows, qid)


@dataclass
class _GeoCandidates:
    """SOC-geo: the queries restricted to candidates, and each candidate (a CC row of such a query)."""

    geo_q: np.ndarray  # the geo queries (one per geo SOC row)
    cand_q: np.ndarray  # the query of each candidate
    xy: np.ndarray  # the candidate target keypoint, original pixels
    sizes: np.ndarray  # [W, H] of its target image


def _geo_candidates(q: _Queries, keypoints, images, protocol: ProtocolConfig) -> _GeoCandidates:
    """Each geo query's candidates are its CC group's target keypoints (same pair and source keypoint)."""
    n, kind, rows = len(q.queries), q.rows["kind"], q.rows
    geo_row = (
        (kind == "soc") & rows["geo"].astype(bool) & (rows["n_candidates"] >= protocol.geo_min_candidates)
    )
    geo_q = q.qid[geo_row]
    is_geo = np.zeros(n, dtype=bool)
    is_geo[geo_q] = True
    cand_row = (kind == "cc") & is_geo[q.qid]
    cand_q = q.qid[cand_row]
    has_cand = np.zeros(n, dtype=bool)
    has_cand[cand_q] = True
    missing = geo_q[~has_cand[geo_q]]
    if len(missing):
        bad = q.queries.iloc[int(missing[0])]
        raise MatchingError(
            f"SOC-geo query ({bad.pair_id!r}, {bad.src_keypoint!r}) has no CC candidates in the correspondences: "
            f"rebuild correspondences so every geo SOC row has its CC group"
        )
    cand_img = rows["trg_image"][cand_row]
    xy = visible_keypoint_xy(keypoints, cand_img, rows["trg_keypoint"][cand_row], "candidate")
    return _GeoCandidates(geo_q, cand_q, xy, image_sizes(images, cand_img))


@dataclass
class _ByTarget:
    """Queries sorted by target image, with each target's row and geo-candidate bounds."""

    targets: pd.Index  # the distinct target images
    order: np.ndarray  # sorted row -> its query
    pos: np.ndarray  # query -> its sorted row
    bounds: np.ndarray
    c_order: np.ndarray
    c_bounds: np.ndarray
    c_local: np.ndarray  # sorted candidate -> its query's row within its target's block


def _by_target(trg: np.ndarray, cand_q: np.ndarray) -> _ByTarget:
    """Sort queries (and the geo candidates with them) by target image."""
    tcode, targets = pd.factorize(trg)
    order = np.argsort(tcode, kind="stable")
    bounds = np.r_[0, np.cumsum(np.bincount(tcode, minlength=len(targets)))]
    pos = np.empty(len(trg), dtype=np.int64)
    pos[order] = np.arange(len(trg))
    c_pos = pos[cand_q]
    c_order = np.argsort(c_pos, kind="stable")
    c_bounds = np.searchsorted(c_pos[c_order], bounds)
    c_local = (c_pos - bounds[tcode[cand_q]])[c_order]
    return _ByTarget(targets, order, pos, bounds, c_order, c_bounds, c_local)


class _TargetMatch(NamedTuple):
    idx: np.ndarray | None  # argmax cell of each query (plain argmax), else None
    uv: np.ndarray | None  # unit prediction of each query (upsample / soft-argmax), else None
    sim: np.ndarray  # float32 similarity at the prediction
    cand_val: np.ndarray  # similarity at each geo candidate (given as query row, cell)


class _TargetMatcher:
    """Matches the queries of one target map: the native fp16 kernel or torch."""

    def __init__(self, desc: torch.Tensor, qrows: np.ndarray, protocol: ProtocolConfig, device: torch.device):
        self.desc, self.qrows, self.protocol, self.device = desc, qrows, protocol, device
        self.simple = not (protocol.upsample or protocol.soft_argmax)
        self.dtype = _dtype(protocol)
        self.native = (
            self.simple and self.dtype == torch.float32 and device.type == "cpu" and half_matmul.available()
        )
        self.desc_np = desc.numpy() if self.native else None
        self.qdesc: torch.Tensor | None = None  # queries gathered for torch, made only when a map needs torch

    def match(
        self, arr: np.ndarray, size: int, a: int, b: int, c_local: np.ndarray, c_cell: np.ndarray
    ) -> _TargetMatch:
        """Sorted queries a:b against the map `arr` (input size S = size); candidates as (row in a:b, cell)."""
        if self.native and arr.dtype == np.float16:
            return self._native(arr, a, b, c_local, c_cell)
        return self._torch(arr, size, a, b, c_local, c_cell)

    def _native(self, arr, a, b, c_local, c_cell) -> _TargetMatch:
        # The hot path: one kernel call, no tensor made per target.
        idx, sim = np.zeros(b - a, dtype=np.int64), np.zeros(b - a, dtype=np.float32)
        probes, probe_val, by_cell = None, None, None
        if len(c_cell):  # the kernel reports the candidates' similarities, in ascending cell order
            by_cell = np.argsort(c_cell, kind="stable")
            probes = (c_local[by_cell], c_cell[by_cell])
            probe_val = np.empty(len(c_cell), dtype=np.float32)
        half_matmul.argmax_into(
            arr, self.desc_np, self.qrows[a:b], idx, sim, probes=probes, probe_out=probe_val
        )
        cand_val = np.zeros(len(c_cell))
        if by_cell is not None:
            cand_val[by_cell] = probe_val
        return _TargetMatch(idx, None, sim, cand_val)

    def _torch(self, arr, size, a, b, c_local, c_cell) -> _TargetMatch:
        _, h, w = arr.shape
        fmap = stored_tensor(arr, self.device)
        if self.qdesc is None:
            self.qdesc = self.desc[torch.as_tensor(self.qrows, device=self.device)]
        sims, idx, best = _similarities(self.qdesc[a:b], fmap, self.dtype, not self.simple or len(c_cell) > 0)
        cand_val = np.zeros(0)
        if len(c_cell):  # sims[c_local[i], c_cell[i]], float64
            at = [torch.as_tensor(v, device=sims.device) for v in (c_local, c_cell)]
            cand_val = sims[at[0], at[1]].double().cpu().numpy()
        if self.simple:
            return _TargetMatch(idx.cpu().numpy(), None, best.float().cpu().numpy(), cand_val)
        uv, best = _free_argmax(sims, h, w, size, self.protocol)
        return _TargetMatch(None, uv.cpu().numpy(), best.float().cpu().numpy(), cand_val)


def predict(
    image_pairs: pd.DataFrame,
    correspondences: pd.DataFrame,
    keypoints: pd.DataFrame,
    images: pd.DataFrame,
    store: FeatureStoreLike,
    protocol: ProtocolConfig,
    backbone_name: str,
    device: str | torch.device = "cpu",
) -> pd.DataFrame:
    """PredictionSchema rows (plus `input_size`) of every evaluated (pair, source keypoint): mode 'free', and
    'geo' for SOC-geo rows; tested to agree with tests/soco_reference.py."""
    device = torch.device(device)
    q = _queries(image_pairs, correspondences)
    if q is None:
        return pd.DataFrame(columns=PREDICTION_COLUMNS)
    queries, n = q.queries, len(q.queries)
    # step 5, every source point once
    desc, qsrc = source_descriptors(queries, keypoints, images, store, protocol, backbone_name, device)
    geo = _geo_candidates(q, keypoints, images, protocol)
    trg = queries["trg_image"].to_numpy()
    trg_sizes = image_sizes(images, trg)
    layout = _by_target(trg, geo.cand_q)
    qrows = np.ascontiguousarray(qsrc[layout.order], dtype=np.int64)  # sorted query -> its descriptor row
    matcher = _TargetMatcher(desc, qrows, protocol, device)

    # Step 6, target by target; rows stay in sorted order until the end.
    free_uv, free_sim = np.zeros((n, 2)), np.zeros(n, dtype=np.float32)
    free_idx = np.zeros(n, dtype=np.int64)
    grids = np.zeros((len(layout.targets), 3), dtype=np.int64)  # S, h, w of each target's map
    c_cell, c_val = np.zeros(len(geo.cand_q), dtype=np.int64), np.zeros(len(geo.cand_q))
    cells_by_grid: dict[tuple[int, int, int], np.ndarray] = {}  # (S, h, w) -> cell of every sorted candidate
    for t, image_id in enumerate(layout.targets):
        a, b = layout.bounds[t], layout.bounds[t + 1]
        ca, cb = layout.c_bounds[t], layout.c_bounds[t + 1]
        arr, size = load_stored_maps(store, image_id, backbone_name)
        c, h, w = arr.shape
        if c != desc.shape[1]:
            raise MatchingError(f"target image {image_id!r} has {c} channels, the sources {desc.shape[1]}")
        grids[t] = size, h, w
        if cb > ca:  # the cells of this target's SOC-geo candidates
            if (size, h, w) not in cells_by_grid:
                cells = cells_of(to_unit(geo.xy, geo.sizes, size, protocol), h, w)
                cells_by_grid[(size, h, w)] = cells[layout.c_order]
            c_cell[ca:cb] = cells_by_grid[(size, h, w)][ca:cb]
        got = matcher.match(arr, size, a, b, layout.c_local[ca:cb], c_cell[ca:cb])
        free_sim[a:b] = got.sim
        if got.idx is not None:
            free_idx[a:b] = got.idx
        else:
            free_uv[a:b] = got.uv
        c_val[ca:cb] = got.cand_val
    # the prediction rows, back in query order: free points, then SOC-geo's argmax over the candidates
    pos = layout.pos
    counts = np.diff(layout.bounds)
    in_size, grid_hw = np.repeat(grids[:, 0], counts), np.repeat(grids[:, 1:], counts, axis=0)
    cand_cell, cand_val = np.empty_like(c_cell), np.empty_like(c_val)
    cand_cell[layout.c_order], cand_val[layout.c_order] = c_cell, c_val
    free_idx, free_uv, grid_hw, in_size = (x[pos] for x in (free_idx, free_uv, grid_hw, in_size))
    free_sim = free_sim[pos].astype(np.float64)
    geo_q = geo.geo_q
    geo_idx, geo_sim = _segment_argmax(geo.cand_q, cand_val, cand_cell, geo_q)
    if matcher.simple:
        free_uv = _index_points(free_idx, grid_hw, protocol)
    geo_uv = _index_points(geo_idx, grid_hw[geo_q], protocol)
    free_px = unit_to_pixels(free_uv, trg_sizes)
    geo_px = unit_to_pixels(geo_uv, trg_sizes[geo_q]) if len(geo_q) else np.zeros((0, 2))
    return pd.concat(
        [
            _frame(backbone_name, queries, np.arange(n), "free", free_px, free_sim, in_size),
            _frame(backbone_name, queries, geo_q, "geo", geo_px, geo_sim, in_size),
        ],
        ignore_index=True,
    )


def _frame(backbone, queries, idx, mode, px, sim, in_size) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "backbone": backbone,
            "pair_id": queries["pair_id"].to_numpy()[idx],
            "src_keypoint": queries["src_keypoint"].to_numpy()[idx],
            "mode": mode,
            "pred_x": px[:, 0],
            "pred_y": px[:, 1],
            "similarity": sim,
            "input_size": in_size[idx],
        }
    )
