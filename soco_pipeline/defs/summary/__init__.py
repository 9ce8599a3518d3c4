"""The summary group: `model_headlines` and `model_summary`, built by `assets.summary_assets`."""
