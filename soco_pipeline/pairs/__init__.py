"""Pair stage: image pairs, keypoint-level correspondences, their checks and the four-choice items."""

from soco_pipeline.pairs.checks import (
    COUNT_KINDS,
    check_correspondences,
    check_image_pairs,
    pair_counts,
    require_valid,
)
from soco_pipeline.pairs.common import (
    CORRESPONDENCE_COLUMNS,
    PAIR_COLUMNS,
    PairConfig,
    column_codes,
    inherited_keypoints,
    related_category_pairs,
)
from soco_pipeline.pairs.correspondences import (
    build_correspondences,
    candidate_keypoints,
    iter_correspondences,
    write_correspondences,
)
from soco_pipeline.pairs.image_pairs import build_image_pairs, evaluation_sample, soc_counts

__all__ = [
    "COUNT_KINDS",
    "CORRESPONDENCE_COLUMNS",
    "PAIR_COLUMNS",
    "PairConfig",
    "build_correspondences",
    "build_image_pairs",
    "candidate_keypoints",
    "check_correspondences",
    "check_image_pairs",
    "column_codes",
    "evaluation_sample",
    "inherited_keypoints",
    "iter_correspondences",
    "pair_counts",
    "related_category_pairs",
    "require_valid",
    "soc_counts",
    "write_correspondences",
]
