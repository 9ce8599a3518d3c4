"""The `tpips` asset group (aspect-conditioned perceptual similarity); declarations in `assets`."""

from soco_pipeline.defs.tpips.assets import (  # noqa: F401 - module-level assets for folder loading
    tpips_afc,
    tpips_baseline_scores,
    tpips_features,
    tpips_leaderboard,
    tpips_learned,
    tpips_lvlm_answers,
    tpips_ooo,
    tpips_pixel_baselines,
    tpips_renders,
)
