"""The task families beside SOCO, one domain core per folder (plain Python, no Dagster).

- `mmvm/`: object matching across images (MMVMBench, the CoLVA paper);
- `fgbmk/`: fine-grained recognition (FG-BMK);
- `tpips/`: aspect-conditioned perceptual similarity (TPIPS).

Their Dagster groups live in `soco_pipeline/defs/<family>/`; their images go through the shared feature cache
(`soco_pipeline.features`).
"""
