"""Analysis: the correlation study (benchmark scores vs downstream tasks, bootstrap CIs), global-feature
metrics (kNN, retrieval) from the feature cache, and a contrastively trained linear probe (soco_lp).

Plain Python; the Dagster declarations live in soco_pipeline/defs/analysis/assets.py.
"""
