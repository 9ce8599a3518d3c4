"""Keypoint-level correspondences (CC, SOC, SOC-geo, Cross-SOC), built, streamed and written: joins over
integer codes, strings only as dictionary-encoded Arrow columns, so millions of rows stream to Parquet."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from soco_pipeline import storage
from soco_pipeline.pairs.common import require_columns
from soco_pipeline.pairs.encoding import decode_matches, encode_pairs, match_rows, rows_per_pair
from soco_pipeline.taxonomy import Taxonomy


def _select_pairs(image_pairs: pd.DataFrame, evaluated_only: bool) -> pd.DataFrame:
    if not evaluated_only:
        return image_pairs.reset_index(drop=True)
    require_columns(image_pairs, ["evaluated"], "image_pairs")
    return image_pairs[image_pairs.evaluated.astype(bool)].reset_index(drop=True)


def build_correspondences(
    image_pairs: pd.DataFrame, keypoints: pd.DataFrame, taxonomy: Taxonomy, evaluated_only: bool = False
) -> pa.Table:
    """Correspondences of every pair as an Arrow table, by pair (input order), kind, src and trg keypoint."""
    enc = encode_pairs(_select_pairs(image_pairs, evaluated_only), keypoints, taxonomy)
    return decode_matches(match_rows(enc, 0, len(enc.pair_ids)), enc, slice_pairs=False)


def iter_correspondences(
    image_pairs: pd.DataFrame,
    keypoints: pd.DataFrame,
    taxonomy: Taxonomy,
    evaluated_only: bool = False,
    batch_rows: int = 1_000_000,
) -> Iterator[pa.Table]:
    """The rows of build_correspondences in batches of whole pairs, about `batch_rows` rows each."""
    if batch_rows < 1:
        raise ValueError(f"batch_rows must be positive, got {batch_rows}")
    enc = encode_pairs(_select_pairs(image_pairs, evaluated_only), keypoints, taxonomy)
    ends = np.cumsum(rows_per_pair(enc))
    lo, n_pairs = 0, len(enc.pair_ids)
    while lo < n_pairs:
        done = ends[lo - 1] if lo else 0
        hi = max(int(np.searchsorted(ends, done + batch_rows, "right")), lo + 1)
        codes = match_rows(enc, lo, hi)
        if len(codes["pair"]):
            yield decode_matches(codes, enc, slice_pairs=True)
        lo = hi


def write_correspondences(
    image_pairs: pd.DataFrame,
    keypoints: pd.DataFrame,
    taxonomy: Taxonomy,
    path: str,
    evaluated_only: bool = False,
    batch_rows: int = 1_000_000,
) -> int:
    """Stream the correspondences to a Parquet file at `path` atomically, batch by batch; the row count."""
    rows = 0
    with storage.open_atomic(path) as f:
        writer = None
        for table in iter_correspondences(image_pairs, keypoints, taxonomy, evaluated_only, batch_rows):
            if writer is None:
                writer = pq.ParquetWriter(f, table.schema, compression="zstd")
            writer.write_table(table)
            rows += table.num_rows
        if writer is None:  # no rows: still write a file with the schema
            empty = build_correspondences(image_pairs.iloc[:0], keypoints.iloc[:0], taxonomy)
            writer = pq.ParquetWriter(f, empty.schema, compression="zstd")
        writer.close()
    return rows


def candidate_keypoints(
    image_pairs: pd.DataFrame, keypoints: pd.DataFrame, taxonomy: Taxonomy, side: str = "trg"
) -> pd.DataFrame:
    """Per pair, the visible keypoints of one side ('src' or 'trg') that the pair's categories share (a
    target's SOC-geo / four-choice candidates): pair_id, keypoint, concept, sorted by pair and keypoint."""
    if side not in ("src", "trg"):
        raise ValueError(f"side must be 'src' or 'trg', got {side!r}")
    enc = encode_pairs(image_pairs.reset_index(drop=True), keypoints, taxonomy)
    rows = enc.src if side == "src" else enc.trg
    return pd.DataFrame(
        {
            "pair_id": pd.Categorical.from_codes(rows.pair, enc.pair_ids.to_pandas()),
            "keypoint": pd.Categorical.from_codes(rows.kp, enc.kp_names.to_pandas()),
            "concept": pd.Categorical.from_codes(rows.concept, enc.concept_names.to_pandas()),
        }
    )
