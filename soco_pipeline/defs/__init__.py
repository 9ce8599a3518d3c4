"""The Dagster layer, declarations only: one folder per asset group, loaded by definitions.py; shared/ holds
the helpers every folder uses (docs/layout.md maps each group to its folder)."""
