"""map_npy: local .npy files mapped read-only, equal to np.load, with clear errors for bad files."""

from __future__ import annotations

import numpy as np
import pytest

from soco_pipeline.features.npy_map import map_npy


@pytest.mark.parametrize(
    "arr",
    [
        np.arange(24, dtype=np.float16).reshape(2, 3, 4),
        np.asfortranarray(np.arange(12, dtype=np.float32).reshape(3, 4)),
        np.zeros((0, 5), dtype=np.float16),
        np.float32(3.5).reshape(()),
    ],
)
def test_mapped_array_equals_np_load(tmp_path, arr):
    path = str(tmp_path / "a.npy")
    np.save(path, arr)
    got = map_npy(path)
    expected = np.load(path)
    assert got.dtype == expected.dtype and got.shape == expected.shape and np.array_equal(got, expected)
    assert not got.flags.writeable or got.size == 0


def test_bad_files_are_named(tmp_path):
    objects = str(tmp_path / "objects.npy")
    np.save(objects, np.array([{"a": 1}], dtype=object), allow_pickle=True)
    with pytest.raises(ValueError, match="objects.npy holds Python objects"):
        map_npy(objects)
    short = str(tmp_path / "short.npy")
    np.save(short, np.ones((10, 10), dtype=np.float16))
    with open(short, "r+b") as f:
        f.truncate(150)  # header (128 bytes) and part of the data
    with pytest.raises(ValueError, match="short.npy is truncated"):
        map_npy(short)
    junk = tmp_path / "junk.npy"
    junk.write_bytes(b"\x00" * 64)
    with pytest.raises(ValueError, match="junk.npy is not a valid .npy file"):
        map_npy(str(junk))
