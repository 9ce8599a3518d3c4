"""FG-BMK (ICLR 2026): fine-grained recognition, machine- and human-oriented, as a plain-Python domain core.

One module per job:

- `config`: the typed config (assets/fgbmk.yaml), demo or full scale;
- `embedded`: the simulated fine-grained set (superclass -> class -> subclass, attributes) in the
  FG-BMK machine-oriented layout;
- `readers`: the machine-oriented CSV layout and the human-oriented JSONL files (read and write);
- `global_features`: last-two-block class tokens and the patch mean per backbone, cached and checksummed;
- `linear_probe`, `retrieval`, `metrics`: the published classification and open-set retrieval protocols;
- `robustness`: FGSM / PGD / Gaussian noise against the frozen backbone plus its trained probe;
- `machine_eval`: the probe and retrieval at every granularity level, within and across superclasses;
- `questions`, `answer_scoring`, `answers`: questions for LVLMs, the matching rules, asking a backend.
- `leaderboard`: the per-LVLM metrics, the family leaderboard and its rows for the correlation study;
- `findings`: the paper's five findings checked on our tables.

The Dagster group is soco_pipeline/defs/fgbmk/; docs/fgbmk.md describes the protocol and its quirks.
"""

from soco_pipeline.tasks.fgbmk.family import SPEC as SPEC
