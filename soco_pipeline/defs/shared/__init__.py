"""Dagster helpers every group folder shares; no assets. Group folders import one another only through it."""
