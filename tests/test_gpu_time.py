"""The GPU time of a stage: None with a reason on CPU, CUDA-event seconds on CUDA, into the record's timing."""

import time

import jsonschema
import pytest
import torch

from soco_pipeline.runtime.gpu_time import NOT_RECORDED, gpu_timer, stage_timing_entry
from soco_pipeline.trust.provenance import load_schema
from tests.needs import need_hardware

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("device", ["cpu", torch.device("cpu")])
def test_a_cpu_stage_has_no_gpu_time_and_says_why(device):
    with gpu_timer(device) as t:
        torch.ones(64, 64) @ torch.ones(64, 64)
    assert t.gpu_s is None and t.reason == "the stage ran on cpu, not CUDA: no GPU time"
    assert t.metadata() == {"gpu_s": None, "gpu_s_reason": t.reason}
    entry = stage_timing_entry(1.5, t.metadata(), "run-1")
    assert entry == {"wall_s": 1.5, "gpu_s": None, "gpu_s_reason": t.reason, "run_id": "run-1"}


def test_a_remote_model_has_no_local_gpu_time():
    with gpu_timer("remote:openai") as t:
        pass
    assert t.gpu_s is None and t.reason == "the model ran remotely (remote:openai): no local GPU time"


def test_a_failed_stage_leaves_no_gpu_time():
    with pytest.raises(RuntimeError), gpu_timer("cpu") as t:
        raise RuntimeError("boom")
    assert t.gpu_s is None and t.reason == "the stage has not finished"


def test_a_stage_that_recorded_nothing_is_null_with_the_reason():
    entry = stage_timing_entry(None, {}, None)
    assert entry["gpu_s"] is None and entry["gpu_s_reason"] == NOT_RECORDED
    assert stage_timing_entry(2.0, {"gpu_s": 0.25, "gpu_s_reason": None}, "r")["gpu_s"] == 0.25


def test_the_record_schema_takes_the_timing_entry():
    timing_schema = load_schema()["properties"]["timing"]
    with gpu_timer("cpu") as t:
        pass
    timing = {"stages": {"predictions": stage_timing_entry(1.0, t.metadata(), "r")}, "source": "test"}
    jsonschema.validate(timing, timing_schema)
    timing["stages"]["predictions"]["gpu_s_reason"] = 3
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(timing, timing_schema)


def test_a_cuda_stage_gets_its_gpu_seconds():
    need_hardware(torch.cuda.is_available(), "a CUDA device (the CPU path is tested above)")
    x = torch.randn(2048, 2048, device="cuda")
    t0 = time.perf_counter()
    with gpu_timer("cuda") as t:
        for _ in range(20):
            x = x @ x / x.norm()
    wall = time.perf_counter() - t0
    assert t.reason is None and 0 < t.gpu_s <= wall + 1e-3
