"""SOCO pipeline."""
