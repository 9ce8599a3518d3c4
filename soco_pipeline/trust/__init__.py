"""Trusting results: records and their hashes and provenance, published figures and the gap to them,
the regression history and watch, each family's headline (docs/results.md)."""
