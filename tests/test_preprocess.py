"""The official input protocol: white square padding at the top-left, bicubic antialiased resize,
normalisation presets, input sizes, and keypoint scaling with its two integer truncations."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from soco_pipeline.backbones.preprocess import (
    NORMALISATION_PRESETS,
    RESIZE_MODES,
    InputBatch,
    host_square,
    normalise,
    pad_to_square,
    prepare_batch,
    preprocess_batch,
    preprocess_image,
    resize_square,
    to_rgb_array,
)
from soco_pipeline.backbones.spec import input_size
from soco_pipeline.evaluation.geometry import scale_keypoints, unit_to_pixels

pytestmark = pytest.mark.unit


def _image(h: int, w: int, rgb=(200, 10, 30)) -> np.ndarray:
    img = np.empty((h, w, 3), dtype=np.uint8)
    img[:] = rgb
    return img


def test_pad_wide_image_white_below():
    img = _image(2, 4)
    out = pad_to_square(img)
    assert out.shape == (4, 4, 3)
    assert (out[:2] == img).all()
    assert (out[2:] == 255).all()


def test_pad_tall_image_white_right():
    img = _image(5, 3)
    out = pad_to_square(img)
    assert out.shape == (5, 5, 3)
    assert (out[:, :3] == img).all()
    assert (out[:, 3:] == 255).all()


def test_preprocess_without_resize_is_exact_padding():
    img = np.random.default_rng(0).integers(0, 256, size=(6, 9, 3), dtype=np.uint8)
    out = preprocess_image(img, 9, "raw")
    expected = torch.from_numpy(pad_to_square(img)).permute(2, 0, 1).float() / 255
    assert out.shape == (3, 9, 9)
    assert torch.equal(out, expected)


def test_resize_keeps_image_top_left_and_padding_white():
    # A 10 x 20 red image pads to 20 x 20 (bottom half white) and resizes to 40 x 40.
    out = preprocess_image(_image(10, 20, (255, 0, 0)), 40, "raw")
    assert out.shape == (3, 40, 40)
    top, bottom = out[:, :18], out[:, 22:]  # away from the bicubic transition rows 18-21
    assert torch.allclose(top, torch.tensor([1.0, 0.0, 0.0]).view(3, 1, 1).expand_as(top), atol=1e-5)
    assert torch.allclose(bottom, torch.ones_like(bottom), atol=1e-5)


def test_resize_matches_torchvision_bicubic_antialias():
    import torchvision.transforms.functional as tv

    img = torch.rand(1, 3, 37, 37)
    ours = resize_square(img, 16)  # the opt-in tensor resize
    ref = tv.resize(img, [16, 16], interpolation=tv.InterpolationMode.BICUBIC, antialias=True).clamp(0, 1)
    assert torch.allclose(ours, ref, atol=1e-6)


def test_normalisation_presets():
    mean, std = NORMALISATION_PRESETS["imagenet"]
    img = torch.tensor(mean).view(1, 3, 1, 1).expand(1, 3, 2, 2)
    assert torch.allclose(normalise(img, "imagenet"), torch.zeros(1, 3, 2, 2), atol=1e-6)
    assert torch.allclose(normalise(torch.ones(1, 3, 1, 1), "half"), torch.ones(1, 3, 1, 1))
    assert torch.allclose(normalise(torch.zeros(1, 3, 1, 1), "half"), -torch.ones(1, 3, 1, 1))
    white = preprocess_image(_image(4, 4, (255, 255, 255)), 4, "clip")
    cmean, cstd = NORMALISATION_PRESETS["clip"]
    assert torch.allclose(white[:, 0, 0], (1 - torch.tensor(cmean)) / torch.tensor(cstd))
    with pytest.raises(ValueError, match="unknown normalisation"):
        normalise(img, "nope")


def test_input_sizes_of_the_protocol():
    assert input_size("nearest_multiple", 800, 14) == 798
    assert input_size("nearest_multiple", 800, 16) == 800
    assert input_size("fixed_grid", 60, 14) == 840
    assert input_size("nearest_multiple", 400, 8) == 400


def test_batch_of_mixed_sizes_and_grey_input():
    grey = np.full((7, 3), 128, dtype=np.uint8)
    rgba = np.zeros((4, 6, 4), dtype=np.uint8)
    assert to_rgb_array(grey).shape == (7, 3, 3)
    assert to_rgb_array(rgba).shape == (4, 6, 3)
    batch = preprocess_batch([grey, rgba], 8, "imagenet")
    assert batch.shape == (2, 3, 8, 8)
    with pytest.raises(ValueError, match="uint8"):
        to_rgb_array(np.zeros((2, 2, 3), dtype=np.float32))


def test_scale_keypoints_truncates_twice_like_the_official_script():
    xy = np.array([[10.7, 299.9], [450.99, 0.4], [225.5, 150.5]])
    w, h, s = 451, 300, 798
    got = scale_keypoints(xy, np.array([w, h]), s)
    side = max(w, h)
    ref = np.array([[int(int(x) * (s / side)) / s, int(int(y) * (s / side)) / s] for x, y in xy])
    assert np.array_equal(got, ref)
    # 10.7 -> 10 -> 10 * 798 / 451 = 17.69 -> 17 -> 17 / 798: both truncations matter.
    assert got[0, 0] == 17 / 798
    back = unit_to_pixels(got, np.array([w, h]))
    assert np.all(back <= xy + 1e-9) and np.all(xy - back < 2)


def test_prepared_batches_equal_preprocess_batch_bit_for_bit():
    """What the loader threads make (prepare_batch) is exactly preprocess_batch's numbers: the CPU batch,
    and the accelerator path (padded uint8 squares resized where they land), run here on the CPU."""
    rng = np.random.default_rng(3)
    images = [rng.integers(0, 256, size=(h, w, 3), dtype=np.uint8) for h, w in [(30, 47), (52, 21), (40, 40)]]
    for (size, preset), resize in itertools.product(
        [(28, "imagenet"), (84, "half"), (40, "clip")], RESIZE_MODES
    ):
        ref = preprocess_batch(images, size, preset, "cpu", resize)
        cpu = prepare_batch(images, size, preset, "cpu", resize)
        assert cpu.pixels is not None and len(cpu) == 3 and torch.equal(cpu.to("cpu"), ref)
        squares = InputBatch(
            size, preset, squares=[torch.from_numpy(host_square(im, size, resize)) for im in images]
        )
        assert len(squares) == 3 and torch.equal(squares.to("cpu"), ref)


# ---------------------------------------------------------------- the official (PIL) resize


def _official_pipeline(image: np.ndarray, size: int, preset: str) -> torch.Tensor:
    """The official scorer's preprocessing, written with PIL and torchvision as it is: a white RGB
    square of side max(W, H) with the image pasted at the top-left, Resize((S, S), BICUBIC,
    antialias=True) on the PIL image, ToTensor, Normalize."""
    from PIL import Image
    from torchvision import transforms

    pil = Image.fromarray(image).convert("RGB")
    side = max(pil.size)
    square = Image.new("RGB", (side, side), (255, 255, 255))
    square.paste(pil, (0, 0))
    mean, std = NORMALISATION_PRESETS[preset]
    tf = transforms.Compose(
        [
            transforms.Resize(
                (size, size), interpolation=transforms.InterpolationMode.BICUBIC, antialias=True
            ),
            transforms.ToTensor(),
            transforms.Normalize(mean, std),
        ]
    )
    return tf(square)


@pytest.mark.parametrize(
    "hw, size, preset",
    [
        ((30, 47), 28, "imagenet"),
        ((52, 21), 84, "half"),
        ((333, 500), 224, "clip"),
        ((480, 371), 798, "imagenet"),
        ((17, 17), 17, "imagenet"),
        ((64, 90), 126, "imagenet"),
    ],
)
def test_default_preprocessing_is_the_official_pil_pipeline_bit_for_bit(hw, size, preset):
    """Non-square images of several sizes, down- and upsampled (and one already at S): the default
    preprocessing, the CPU loader batch and the accelerator squares all equal torchvision's PIL path."""
    rng = np.random.default_rng(size)
    image = rng.integers(0, 256, size=(*hw, 3), dtype=np.uint8)
    ref = _official_pipeline(image, size, preset)
    assert torch.equal(preprocess_image(image, size, preset), ref)
    assert torch.equal(preprocess_batch([image, image[:, ::-1].copy()], size, preset)[0], ref)
    assert torch.equal(prepare_batch([image], size, preset, "cpu").to("cpu")[0], ref)
    squares = [torch.from_numpy(host_square(image, size))]
    assert squares[0].shape == (size, size, 3)
    assert torch.equal(InputBatch(size, preset, squares=squares).to("cpu")[0], ref)


def test_tensor_resize_is_opt_in_and_close_to_pil():
    """resize='tensor' is F.interpolate on the float image: not the official numbers, within a few uint8
    steps of them; unknown modes are refused."""
    rng = np.random.default_rng(1)
    image = rng.integers(0, 256, size=(61, 90, 3), dtype=np.uint8)
    pil = preprocess_image(image, 56, "raw")
    tensor = preprocess_image(image, 56, "raw", resize="tensor")
    assert not torch.equal(pil, tensor)
    assert (pil - tensor).abs().max() < 12 / 255
    ref = resize_square(torch.from_numpy(pad_to_square(image)).permute(2, 0, 1)[None].float() / 255, 56)[0]
    assert torch.equal(tensor, ref)
    with pytest.raises(ValueError, match="unknown resize"):
        preprocess_image(image, 56, "raw", resize="nearest")
