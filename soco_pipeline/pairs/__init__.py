"""Pair stage: image pairs, keypoint-level correspondences, their checks and the four-choice items."""

from soco_pipeline.pairs.checks import check_correspondences, check_image_pairs, pair_counts
from soco_pipeline.pairs.common import PairConfig, related_category_pairs
from soco_pipeline.pairs.correspondences import (
    build_correspondences,
    candidate_keypoints,
    iter_correspondences,
    write_correspondences,
)
from soco_pipeline.pairs.image_pairs import build_image_pairs, soc_counts

__all__ = [
    "PairConfig",
    "build_correspondences",
    "build_image_pairs",
    "candidate_keypoints",
    "check_correspondences",
    "check_image_pairs",
    "iter_correspondences",
    "pair_counts",
    "related_category_pairs",
    "soc_counts",
    "write_correspondences",
]
