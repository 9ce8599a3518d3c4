"""The Dagster layer: thin wiring of the domain core into assets, checks, sensors and schedules."""
