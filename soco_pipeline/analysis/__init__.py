"""Analysis: the correlation study, global-feature metrics and the linear probe (Dagster side:
defs/analysis/assets.py)."""
