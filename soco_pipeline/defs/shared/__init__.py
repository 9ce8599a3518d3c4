"""Dagster helpers every group folder shares (settings, IO manager, checked tables, partitions, automation,
executors, lookups, the family contract); no assets. Group folders import one another only through it."""
