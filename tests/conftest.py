"""Test-wide settings: offline hub, no telemetry, storage in temporary folders."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("DAGSTER_DISABLE_TELEMETRY", "1")
os.environ.setdefault("MPLBACKEND", "Agg")
