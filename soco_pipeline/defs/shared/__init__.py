"""Dagster helpers every group folder shares: the settings resource, the tables' IO manager, the checked-table
helper, partitions, automation conditions, executors, the lookups every group needs (specs.py: a partition's
spec, the run's taxonomy, the global-feature policy) and the task families' contract (family.py). Holds no
assets (definitions.py skips it); the group folders import one another only through it."""
