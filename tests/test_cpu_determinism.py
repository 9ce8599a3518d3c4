"""SOCO_DETERMINISTIC_CPU=1 (device.cpu_kernels): a convolutional backbone's features no longer depend on the
number of torch threads (oneDNN's convolutions do; docs/reproducibility.md). Measured here on a random-
weight EfficientNet-Lite0 (timm's architecture of the project's packaged backbone) at 64 px."""

import pytest
import timm
import torch

from soco_pipeline.runtime.device import DETERMINISTIC_CPU, cpu_kernels

pytestmark = pytest.mark.unit


def _features(threads: int) -> torch.Tensor:
    torch.manual_seed(0)
    model = timm.create_model("tf_efficientnet_lite0", pretrained=False, num_classes=0).eval()
    x = torch.randn(4, 3, 64, 64, generator=torch.Generator().manual_seed(1))
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        with torch.inference_mode(), cpu_kernels():
            return model.forward_features(x)
    finally:
        torch.set_num_threads(before)


def test_features_do_not_depend_on_the_thread_count_when_asked(monkeypatch):
    monkeypatch.setenv(DETERMINISTIC_CPU, "1")
    assert torch.equal(_features(1), _features(2))


def test_the_default_keeps_onednn_on(monkeypatch):
    monkeypatch.delenv(DETERMINISTIC_CPU, raising=False)
    with cpu_kernels():
        assert torch.backends.mkldnn.enabled
    monkeypatch.setenv(DETERMINISTIC_CPU, "1")
    with cpu_kernels():
        assert not torch.backends.mkldnn.enabled
    assert torch.backends.mkldnn.enabled  # restored after the block
