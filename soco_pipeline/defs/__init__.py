"""The Dagster layer, declarations only: one folder per asset group; shared/ holds what they share."""
