"""$SOCO_SENSOR_INTERVAL_S sets how often the daemon evaluates the automation and spec-folder sensors."""

from __future__ import annotations

import pytest

from soco_pipeline.defs.shared.automation import daemon_interval, daemon_minimum_interval_s, sensor_interval_s

pytestmark = pytest.mark.unit


def test_the_sensor_interval_defaults_to_15_s_and_reads_the_environment(monkeypatch):
    monkeypatch.delenv("SOCO_SENSOR_INTERVAL_S", raising=False)
    assert sensor_interval_s() == 15
    monkeypatch.setenv("SOCO_SENSOR_INTERVAL_S", "5")
    assert sensor_interval_s() == 5
    assert daemon_minimum_interval_s() == 4
    monkeypatch.setenv("SOCO_SENSOR_INTERVAL_S", "1")
    assert daemon_minimum_interval_s() == 1  # never 0: Dagster reads 0 as "no minimum"


@pytest.mark.parametrize("text", ["five", "0", "-3", "1.5"])
def test_a_bad_sensor_interval_names_the_variable(monkeypatch, text):
    monkeypatch.setenv("SOCO_SENSOR_INTERVAL_S", text)
    with pytest.raises(ValueError, match="SOCO_SENSOR_INTERVAL_S"):
        sensor_interval_s()


def test_the_definitions_take_the_interval(monkeypatch):
    monkeypatch.setenv("SOCO_SENSOR_INTERVAL_S", "7")
    from soco_pipeline.defs.definitions import build_definitions

    defs = build_definitions()
    # one second less than the interval: the daemon's 5 s loop then ticks on the first loop at or after it
    # (with 7 itself, a loop that came a moment early skipped the tick: see daemon_minimum_interval_s)
    assert defs.resolve_sensor_def("default_automation_condition_sensor").minimum_interval_seconds == 6
    # (the spec-folder sensors read it when their module is imported: in `dagster dev`, at its start)


def test_every_sensor_asks_one_second_less_than_its_period():
    """The daemons' 5 s loop ticks a sensor on the first loop at or after its period (daemon_interval)."""
    assert [daemon_interval(s) for s in (1, 5, 30)] == [1, 4, 29]
    from soco_pipeline.defs.recovery import dead_run_sensor, lost_worker_sensor

    assert dead_run_sensor.minimum_interval_seconds == 29
    assert lost_worker_sensor.minimum_interval_seconds == 4
