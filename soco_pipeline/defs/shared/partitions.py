"""Partitions: one dynamic partition per backbone and per LVLM spec file; the spec sensors add them."""

import dagster as dg

from soco_pipeline.backbones.spec_files import partition_spec_file

backbones_partitions = dg.DynamicPartitionsDefinition(name="backbones")
lvlms_partitions = dg.DynamicPartitionsDefinition(name="lvlms")

__all__ = ["backbones_partitions", "lvlms_partitions", "partition_spec_file"]
