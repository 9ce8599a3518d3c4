"""The native fp16 similarity kernel against torch's float32 product: values, argmax, ties and tails."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from soco_pipeline.native import half_matmul
from tests.needs import need_hardware

pytestmark = pytest.mark.unit


def _kernel_for(mode: str) -> str | None:
    """Load the kernel under SOCO_NATIVE=mode (the cache is cleared around it); its ISA, or None."""
    half_matmul._library.cache_clear()
    return half_matmul.instruction_set()


@pytest.fixture(params=["avx512", "avx2"])
def isa(request, monkeypatch):
    """Each vector variant of the kernel in turn, asked for by name; skipped where this CPU cannot run it."""
    monkeypatch.setenv("SOCO_NATIVE", request.param)
    got = _kernel_for(request.param)
    if got is None:
        half_matmul._library.cache_clear()
        need_hardware(
            False, f"a CPU that runs the {request.param.upper().replace('AVX512', 'AVX-512')} kernel"
        )
    assert got == request.param  # asked for by name, never silently another variant
    yield got
    half_matmul._library.cache_clear()  # monkeypatch restores the environment after this


@pytest.fixture
def native_on(monkeypatch):
    """The kernel switched on with its automatic choice; skipped where none can run."""
    monkeypatch.setenv("SOCO_NATIVE", "1")
    if _kernel_for("1") is None:
        half_matmul._library.cache_clear()
        need_hardware(False, "a CPU that runs a native kernel (AVX2 or AVX-512)")
    yield
    half_matmul._library.cache_clear()


def _assert_sums_close(got: torch.Tensor, queries: torch.Tensor, fmap_half: torch.Tensor) -> torch.Tensor:
    """`got` equals the exact (float64) product of the queries and the fp16 map within float32 rounding:
    per entry, C * eps32 * sum_c |q_c| |m_c| bounds any float32 summation order."""
    q64, m64 = queries.double(), fmap_half.double().reshape(fmap_half.shape[0], -1)
    exact = q64 @ m64
    bound = q64.shape[1] * torch.finfo(torch.float32).eps * (q64.abs() @ m64.abs()) + 1e-30
    err = (got.double() - exact).abs()
    assert (err <= bound).all(), (
        f"max error {err.max():.3g} exceeds the float32 bound {bound[err > bound].min():.3g}"
    )
    return exact


@pytest.mark.parametrize(
    "c, hw, q",
    [
        (384, 57 * 57, 30),
        (384, 57 * 57, 70),
        (20, 13 * 13, 9),
        (33, 31, 17),
        (1, 1, 1),
        (64, 32, 8),
        (100, 5, 3),
        (70, 47, 16),
        (130, 100, 13),
        (65, 64, 24),
        (8, 40, 25),
        (200, 33, 141),
    ],
)  # query counts cover full 12-query blocks and last blocks of 1-4, 5-8 and 9-11 queries
def test_kernel_is_the_product_of_the_fp16_map_within_float32_rounding(c, hw, q, isa):
    g = torch.Generator().manual_seed(c * 1000 + hw + q)
    fmap = torch.randn(c, hw, generator=g).half()
    queries = torch.randn(q, c, generator=g)
    sims, idx, val = half_matmul.similarity_argmax(queries, fmap, want_sims=True)
    _assert_sums_close(sims, queries, fmap)
    assert torch.equal(idx, sims.argmax(dim=1))  # the argmax of its own sums, ties to the lowest cell
    assert torch.equal(val, sims.gather(1, idx[:, None])[:, 0])
    no_sims, idx2, val2 = half_matmul.similarity_argmax(queries, fmap.reshape(c, 1, hw), want_sims=False)
    assert no_sims is None and torch.equal(idx2, idx) and torch.equal(val2, val)


def test_query_rows_are_read_by_index(isa):
    g = torch.Generator().manual_seed(7)
    fmap = torch.randn(96, 70, generator=g).half()
    queries = torch.randn(50, 96, generator=g).numpy()
    rows = np.array(
        [49, 3, 3, 0, 17, 25, 8, 40, 12, 11, 30, 2, 44, 5, 19], dtype=np.int64
    )  # repeats, any order
    idx, val = np.empty(len(rows), dtype=np.int64), np.empty(len(rows), dtype=np.float32)
    sims = np.empty((len(rows), 70), dtype=np.float32)
    half_matmul.argmax_into(fmap, queries, rows, idx, val, sims)
    _assert_sums_close(torch.from_numpy(sims), torch.from_numpy(queries[rows]), fmap)
    assert idx.tolist() == sims.argmax(axis=1).tolist()
    with pytest.raises(ValueError, match="query rows"):
        half_matmul.argmax_into(fmap, queries, np.array([0, 50], dtype=np.int64), idx[:2], val[:2])


def test_probes_report_the_similarity_matrix_values(isa):
    g = torch.Generator().manual_seed(3)
    fmap = torch.randn(130, 9, 11, generator=g).half()  # 99 cells: 3 full columns of 32 and a tail of 3
    queries = torch.randn(20, 130, generator=g).numpy()
    rows = np.arange(19, -1, -1, dtype=np.int64)
    cells = np.sort(torch.randint(0, 99, (40,), generator=g).numpy()).astype(np.int64)
    cells[-1] = 98
    pos = torch.randint(0, 20, (40,), generator=g).numpy().astype(np.int64)
    idx, val = np.empty(20, dtype=np.int64), np.empty(20, dtype=np.float32)
    sims, probe = np.empty((20, 99), dtype=np.float32), np.empty(40, dtype=np.float32)
    half_matmul.argmax_into(fmap, queries, rows, idx, val, sims, probes=(pos, cells), probe_out=probe)
    assert np.array_equal(probe, sims[pos, cells])  # the same float32 sums, bit for bit
    idx2, val2, probe2 = np.empty_like(idx), np.empty_like(val), np.empty_like(probe)
    half_matmul.argmax_into(fmap, queries, rows, idx2, val2, probes=(pos, cells), probe_out=probe2)
    assert np.array_equal(probe2, probe) and np.array_equal(idx2, idx) and np.array_equal(val2, val)
    with pytest.raises(ValueError, match="cells ascending"):
        half_matmul.argmax_into(
            fmap, queries, rows, idx, val, probes=(pos, cells[::-1].copy()), probe_out=probe
        )
    with pytest.raises(TypeError, match="probe_out"):
        half_matmul.argmax_into(fmap, queries, rows, idx, val, probes=(pos, cells))


def test_ties_go_to_the_lowest_cell_as_torch_argmax(isa):
    fmap = torch.zeros(40, 100, dtype=torch.float16)
    fmap[0, [77, 5, 40]] = 1.0  # three equal maxima; in different lanes and tiles of the kernel
    fmap[1, [16, 48]] = 1.0  # same lane (cell % 16), different tiles
    queries = torch.zeros(3, 40)
    queries[0, 0] = 1.0
    queries[1, 1] = 1.0  # ties 16 and 48
    queries[2, 2] = 1.0  # all cells tie at 0
    _, idx, val = half_matmul.similarity_argmax(queries, fmap)
    assert idx.tolist() == [5, 16, 0] == (queries @ fmap.float()).argmax(dim=1).tolist()
    assert val.tolist() == [1.0, 1.0, 0.0]


def test_no_queries_and_wrong_inputs(isa):
    fmap = torch.randn(8, 4, 4).half()
    sims, idx, val = half_matmul.similarity_argmax(torch.zeros(0, 8), fmap, want_sims=True)
    assert sims.shape == (0, 16) and idx.shape == (0,) and val.shape == (0,)
    with pytest.raises(TypeError, match="float16"):
        half_matmul.similarity_argmax(torch.zeros(2, 8), fmap.float())
    with pytest.raises(ValueError, match="8 channels"):
        half_matmul.similarity_argmax(torch.zeros(2, 9), fmap)


def test_numpy_map_and_non_contiguous_queries(isa):
    rng = np.random.default_rng(0)
    fmap = rng.standard_normal((24, 7, 9)).astype(np.float16)
    queries = torch.from_numpy(rng.standard_normal((24, 5)).astype(np.float32)).T  # a transposed view
    _, idx, _ = half_matmul.similarity_argmax(queries, fmap)
    assert torch.equal(idx, (queries @ torch.from_numpy(fmap).float().reshape(24, -1)).argmax(dim=1))


@pytest.mark.parametrize("value", [None, "0", "off"])
def test_off_unless_asked_for(monkeypatch, value):
    """Torch is the default path: without SOCO_NATIVE (or with 0/off) the kernel is not loaded."""
    if value is None:
        monkeypatch.delenv("SOCO_NATIVE", raising=False)
    else:
        monkeypatch.setenv("SOCO_NATIVE", value)
    half_matmul._library.cache_clear()
    try:
        assert not half_matmul.available() and half_matmul.instruction_set() is None
        with pytest.raises(RuntimeError, match="not available"):
            half_matmul.similarity_argmax(torch.zeros(1, 8), torch.zeros(8, 4).half())
    finally:
        half_matmul._library.cache_clear()


def test_an_unknown_setting_is_refused(monkeypatch):
    monkeypatch.setenv("SOCO_NATIVE", "fast")
    half_matmul._library.cache_clear()
    try:
        with pytest.raises(ValueError, match="SOCO_NATIVE='fast'"):
            half_matmul.available()
    finally:
        half_matmul._library.cache_clear()


def test_built_once_per_source_into_the_cache_folder(tmp_path, monkeypatch, native_on):
    monkeypatch.setenv("SOCO_NATIVE_CACHE", str(tmp_path))
    half_matmul._library.cache_clear()
    try:
        assert half_matmul.available()
        built = list(tmp_path.glob("half_matmul-*.so"))
        assert len(built) == 1
        stamp = built[0].stat().st_mtime_ns
        half_matmul._library.cache_clear()
        assert half_matmul.available() and built[0].stat().st_mtime_ns == stamp  # reused, not rebuilt
        assert [p.name for p in tmp_path.iterdir()] == [built[0].name]  # no temporary file left behind
    finally:
        monkeypatch.delenv("SOCO_NATIVE_CACHE")
        half_matmul._library.cache_clear()


def test_corner_descriptors_are_grid_sample_of_the_fp16_map(native_on):
    import torch.nn.functional as F

    from soco_pipeline.evaluation.matching import bilinear_corners

    g = torch.Generator().manual_seed(3)
    fmap = torch.randn(37, 9, 11, generator=g).half()
    uv = torch.cat(
        [
            torch.rand(40, 2, generator=g, dtype=torch.float64),
            torch.tensor([[0.0, 0.0], [1.0, 1.0], [0.999, 0.0]], dtype=torch.float64),
        ]
    )
    ref = F.grid_sample(
        fmap.float()[None], (2 * uv.float() - 1).view(1, 1, -1, 2), mode="bilinear", align_corners=True
    )[0, :, 0, :].T
    cells, weights = bilinear_corners(uv.numpy(), 9, 11)
    torch.testing.assert_close(
        half_matmul.corner_descriptors(fmap, cells, weights), ref, rtol=1e-5, atol=1e-5
    )
    with pytest.raises(ValueError, match="corner cells"):
        half_matmul.corner_descriptors(fmap, cells + 99, weights)


def test_other_architectures_use_torch(monkeypatch, native_on):
    monkeypatch.setattr(half_matmul.platform, "machine", lambda: "aarch64")
    half_matmul._library.cache_clear()
    try:
        assert not half_matmul.available()
    finally:
        monkeypatch.undo()
        half_matmul._library.cache_clear()
    monkeypatch.setenv("SOCO_NATIVE", "1")
    assert half_matmul.available()  # back once the fault is gone


def test_a_failing_compiler_falls_back_to_torch(tmp_path, monkeypatch, caplog, native_on):
    monkeypatch.setenv("SOCO_NATIVE_CACHE", str(tmp_path))
    monkeypatch.setenv("CC", "false")  # a "compiler" that always fails
    half_matmul._library.cache_clear()
    try:
        with caplog.at_level("WARNING", logger="soco_pipeline.native.half_matmul"):
            assert not half_matmul.available()
        assert "could not build" in caplog.text
        assert list(tmp_path.iterdir()) == []  # no half-written library left behind
    finally:
        monkeypatch.undo()
        half_matmul._library.cache_clear()
    monkeypatch.setenv("SOCO_NATIVE", "1")
    assert half_matmul.available()  # back once the fault is gone
