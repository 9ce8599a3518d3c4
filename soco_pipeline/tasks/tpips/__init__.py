"""TPIPS: aspect-conditioned perceptual similarity, scored by the paper's definitions (the release has no
scorer); generated judgements come from simulated annotators, never people."""

from soco_pipeline.tasks.tpips.family import SPEC as SPEC
