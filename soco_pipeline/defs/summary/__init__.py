"""The summary group: `model_headlines` (every family's headline, one row per model and family) and
`model_summary` (one row per model, one headline column per family), built by `assets.summary_assets` over
SOCO's headlines and every declared Family's once all group folders are loaded (defs/definitions.py)."""
