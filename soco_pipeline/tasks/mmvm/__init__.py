"""MMVMBench-style object matching across two frames (CoLVA, ICCV 2025): generated items, the published
marks and prompt, mask-pooled feature backbones, LVLM answers, metrics and the official formats."""

from soco_pipeline.tasks.mmvm.family import SPEC as SPEC
