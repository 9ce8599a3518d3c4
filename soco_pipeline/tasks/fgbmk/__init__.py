"""FG-BMK (ICLR 2026): fine-grained recognition, machine- and human-oriented, as a plain-Python domain core,
one module per job (the table in docs/fgbmk.md); the Dagster group is soco_pipeline/defs/fgbmk/."""

from soco_pipeline.tasks.fgbmk.family import SPEC as SPEC
