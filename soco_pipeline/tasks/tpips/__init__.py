"""TPIPS: aspect-conditioned perceptual similarity (odd-one-out triplets, 2AFC, learned aspect-conditioned metrics).

Built from the paper's definitions (its code and data are not released); every judgement here comes from
simulated annotators, never people. One module per job: `config`, `aspects`, `render`, `triplets`,
`annotators`, `afc`, `formats`, `scoring`, `features`, `baselines`, `learned`, `lvlm`, `retrieval`.
"""

from soco_pipeline.tasks.tpips.family import SPEC as SPEC
