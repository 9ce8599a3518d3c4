"""The summary group: `model_headlines` (every family's headline, one row per model and family) and
`model_summary` (one row per model, one headline column per family), from evaluation/headline.HEADLINES."""
