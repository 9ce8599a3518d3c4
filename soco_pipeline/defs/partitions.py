"""Partitions: one dynamic partition per backbone spec file in assets/backbones/."""

import dagster as dg

backbones_partitions = dg.DynamicPartitionsDefinition(name="backbones")
