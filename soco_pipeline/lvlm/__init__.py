"""LVLM evaluation (SOCO-LVLM), plain Python, no Dagster."""
