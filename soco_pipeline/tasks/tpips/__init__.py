"""TPIPS: aspect-conditioned perceptual similarity (odd-one-out triplets, 2AFC, learned aspect-conditioned metrics).

Scored by the paper's definitions (the released code has no scorer). The items come from the generator, whose
every judgement comes from simulated annotators, never people, or from an official source: TPIPS's released
odd-one-out file (`release`) or our own layout (`formats`). One module per job: `config`, `aspects`, `render`,
`triplets`, `annotators`, `afc`, `formats`, `release`, `export`, `source`, `scoring`, `features`, `baselines`,
`learned`, `lvlm`, `retrieval`.
"""

from soco_pipeline.tasks.tpips.family import SPEC as SPEC
