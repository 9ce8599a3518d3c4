"""The Dagster layer, declarations only: one folder per asset group (data/, pairs/, backbones/, lvlm/,
analysis/, results/, and one per task family), loaded by definitions.py with no list to edit; shared/
holds the helpers every folder uses (settings resource, IO manager, checked tables, partitions,
automation, executors). docs/layout.md maps each group to its folder and its domain-core package."""
