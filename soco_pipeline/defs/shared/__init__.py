"""Dagster helpers every group folder shares: the settings resource, the tables' IO manager, the checked-table
helper, partitions, automation conditions and executors. Holds no assets (definitions.py skips it)."""
