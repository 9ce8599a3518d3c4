"""Test-wide settings: offline hub, no telemetry, storage in temporary folders."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("DAGSTER_DISABLE_TELEMETRY", "1")
os.environ.setdefault("MPLBACKEND", "Agg")


import pytest  # noqa: E402


@pytest.fixture(autouse=True)
def _native_kernel_choice_per_test():
    """SOCO_NATIVE is read once per process and cached: clear the choice after every test that set it."""
    yield
    from soco_pipeline.native import half_matmul

    half_matmul._library.cache_clear()
