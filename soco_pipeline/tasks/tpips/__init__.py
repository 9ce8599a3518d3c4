"""TPIPS: aspect-conditioned perceptual similarity (odd-one-out triplets, 2AFC, learned metrics), scored by
the paper's definitions (the released code has no scorer). Generated judgements come from simulated
annotators, never people; an official source is TPIPS's released file (`release`) or our layout
(`formats`)."""

from soco_pipeline.tasks.tpips.family import SPEC as SPEC
