"""Every path through the CPU kernels' index-map walk, against the onnx reference evaluator.

The walk (qcore.kernels.walk.next_segment) splits each chunk into runs with one scale, a slice
of scales (per-axis on the last axis), or whole rows of blocks along the last axis that the
segment loops process block by block. These tests cross chunk and block boundaries (blocks
that straddle chunks, short last blocks) on both the serial and the parallel kernels.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from conftest import assert_bits_equal

import qcore
from qcore.kernels import cpu
from qcore.onnx_models import feeds, node_model
from qcore.ops import layout_params, plan_quantize, quantize_params

onnx = pytest.importorskip("onnx")
from onnx.reference import ReferenceEvaluator  # noqa: E402

LONG = 256  # block lengths around the old one-block-at-a-time threshold


def reference(op, inputs, **attrs):
    model = node_model(op, 21, inputs, attrs)
    return ReferenceEvaluator(model).run(None, feeds(op, *inputs))[0]


def case(shape, axis, block, dtype, seed=0):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(shape) * 4).astype(np.float32)
    if block:
        sshape = list(shape)
        sshape[axis] = -(-shape[axis] // block)
    else:
        sshape = [shape[axis]]
    s = rng.uniform(0.01, 0.2, sshape).astype(np.float32)
    z = rng.integers(-3, 4, sshape).astype(dtype) if dtype == np.int8 else np.zeros(
        sshape, dtype)
    return x, s, z


SHAPES = [
    ((3, 5000), 1, 0),        # per-axis, last axis: scale slices across chunk boundaries
    ((3, 5000), 0, 0),        # per-axis, first axis: one scale per row
    ((3, 5000), 1, 2),        # short blocks, expanded
    ((3, 5000), 1, 32),
    ((3, 5000), 1, LONG - 1),
    ((3, 5000), 1, LONG),     # long blocks, one at a time
    ((3, 5000), 1, 300),
    ((700, 30), 0, 32),       # blocked on the first axis: scale slices along rows
    ((2, 96, 70), 1, 7),      # a middle axis
    ((200, 700), 1, 64),      # 140000 elements: the parallel kernel
    ((1, 200000), 1, 300),
    ((3, 5000), 1, 128),      # blocks of whole 32s, the last one and chunk-cut ones not
    ((4, 4096), 1, 96),
    ((2, 70000), 1, 1024),    # the largest block run 32 at a time, across chunk boundaries
]


@pytest.mark.parametrize("shape,axis,block", SHAPES, ids=[f"{s}-ax{a}-b{b}" for s, a, b in SHAPES])
@pytest.mark.parametrize("target", [np.int8, ml_dtypes.float8_e4m3fn])
def test_quantize_paths_match_reference(shape, axis, block, target):
    x, s, z = case(shape, axis, block, target)
    attrs = {"axis": axis, **({"block_size": block} if block else {})}
    got = qcore.quantize_linear(x, s, z, **attrs)
    # the reference ignores a float8 zero point; ours is 0 here so both formulas agree except
    # for -0 + 0 = +0 (qcore adds a given zero point), hence x has no exact zeros
    want = reference("QuantizeLinear", [x, s, z], **attrs)
    np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))


@pytest.mark.parametrize("shape,axis,block", SHAPES, ids=[f"{s}-ax{a}-b{b}" for s, a, b in SHAPES])
def test_dequantize_paths_match_reference(shape, axis, block):
    x, s, z = case(shape, axis, block, np.int8)
    attrs = {"axis": axis, **({"block_size": block} if block else {})}
    q = qcore.quantize_linear(x, s, z, **attrs)
    got = qcore.dequantize_linear(q, s, z, **attrs)
    want = reference("DequantizeLinear", [q, s, z], **attrs)
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


#: Layouts with a zero point per element of a run (see cpu.reads_codes): the first two read the
#: target's codes and decode them in steps (their float32 copies would exceed 1/16 of an 8-bit
#: output), the last two read float32 copies.
PER_ELEMENT = [((3, 5000), 1, 0), ((700, 30), 0, 32), ((70, 600), 1, 0), ((256, 40), 0, 64)]


@pytest.mark.parametrize("shape,axis,block", PER_ELEMENT,
                         ids=[f"{s}-ax{a}-b{b}" for s, a, b in PER_ELEMENT])
@pytest.mark.parametrize("target", [np.uint8, ml_dtypes.int4, ml_dtypes.uint4, np.int16,
                                    np.uint16])
def test_per_element_zero_points_as_codes_or_float32(shape, axis, block, target):
    """Zero points of every integer type across their whole range, per element of a run, read
    either way, against the reference."""
    x, s, _ = case(shape, axis, block, np.int8)
    info = ml_dtypes.iinfo(target)
    z = np.random.default_rng(1).integers(info.min, info.max + 1, s.shape).astype(target)
    x *= np.float32(max(info.max, 64) / 16)  # codes reach both ends of the range
    attrs = {"axis": axis, **({"block_size": block} if block else {})}
    plan = plan_quantize(x.dtype, x.shape, s.dtype, s.shape, z.dtype, z.shape, **attrs)
    lp, qp = layout_params(plan.layout), quantize_params(plan, True)
    codes = cpu.reads_codes(qp, lp)
    assert codes == (shape in ((3, 5000), (700, 30))), (codes, shape)
    got = qcore.quantize_linear(x, s, z, **attrs)
    want = reference("QuantizeLinear", [x, s, z], **attrs)
    np.testing.assert_array_equal(got.view(f"u{got.itemsize}"), want.view(f"u{want.itemsize}"))


def test_float_target_without_zero_point_keeps_negative_zero():
    # no zero point: x/scale is encoded as is, so -0 stays -0 (adding -0.0 is the identity)
    x = np.array([-0.0, 0.0, -1e-30, 1.0], np.float32)
    y = qcore.quantize_linear(x, np.float32(1), output_dtype="float8e4m3fn")
    assert list(y.view(np.uint8)) == [0x80, 0x00, 0x80, 0x38]
    # a float8 zero point is ignored (as the onnx reference and onnxruntime do): -0 stays -0
    y = qcore.quantize_linear(x, np.float32(1), np.zeros((), ml_dtypes.float8_e4m3fn))
    assert list(y.view(np.uint8)) == [0x80, 0x00, 0x80, 0x38]
    # a float4 zero point is added: the formula x/scale + 0 makes -0 into +0 (-1e-30 + 0 stays
    # negative and rounds to -0)
    y = qcore.quantize_linear(x, np.float32(1), np.zeros((), ml_dtypes.float4_e2m1fn))
    assert list(y.view(np.uint8)) == [0x00, 0x00, 0x08, 0x02]


def test_parallel_and_serial_kernels_have_their_own_cache_entries():
    # numba keys its on-disk cache by function name and line, not by parallel=True: twins
    # compiled from one function would load each other's code (a "parallel" kernel that never
    # starts a thread). Each variant is compiled from a renamed copy.
    from qcore import reductions

    pairs = [family[:2] for family in (*cpu.FAMILIES.values(), *cpu.GENERIC.values())] + [
        (reductions._error_par, reductions._error_ser),
        (reductions._histogram_par, reductions._histogram_ser),
        (reductions._group_sse_par, reductions._group_sse_ser),
        (reductions._finite_minmax_par, reductions._finite_minmax_ser)]
    for par, ser in pairs:
        assert par.py_func.__qualname__ != ser.py_func.__qualname__


def test_cached_parallel_kernel_starts_the_thread_pool():
    import subprocess
    import sys

    code = (
        "import numpy as np, numba, qcore\n"
        "from qcore.kernels import cpu\n"
        "qcore.config.ADAPTIVE_WORKERS = False\n"  # the parallel kernel, whatever the load
        "x = np.ones(2 * cpu.PARALLEL_THRESHOLD, np.float32)\n"
        "qcore.quantize_linear(x, np.float32(1), np.int8(0))\n"  # serial and parallel both
        "qcore.quantize_linear(x[:100], np.float32(1), np.int8(0))\n"
        "print(numba.threading_layer())\n"
    )
    for _ in range(2):  # the second process loads everything from the cache
        run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             timeout=600)
        assert run.returncode == 0, run.stderr[-2000:]


def test_warmup_compiles_every_kernel_family():
    # qcore.warmup() pays every compilation up front (servers, benchmarks): afterwards each
    # family's parallel and serial kernel holds compiled code, a new family included
    seen = []
    timings = qcore.warmup(progress=lambda done, total, label: seen.append((done, total)))
    for family, kernels in (*cpu.FAMILIES.items(), *cpu.GENERIC.items()):
        for kernel in (kernels.parallel, kernels.serial):
            assert kernel.signatures, f"{family}: {kernel.py_func.__qualname__} not compiled"
    assert seen and seen[-1][0] == seen[-1][1] == len(seen)
    assert set(timings) == {"quantize", "dequantize", "minmax", "packing"}


@pytest.mark.parametrize("target", [np.int8, np.uint8, ml_dtypes.int4, ml_dtypes.uint4,
                                    ml_dtypes.int2, np.int16, np.uint16])
@pytest.mark.parametrize("n", [1000, 3_000_000])  # serial and parallel kernels
def test_integer_codes_round_half_to_even_then_saturate(target, n):
    """Exact ties, saturation and infinities against NumPy's own rule: the integer kernels clamp
    to [lo - zp, hi - zp] before one round-and-convert instruction, which must equal rounding
    first, adding the zero point, then saturating."""
    info = ml_dtypes.iinfo(target)
    rng = np.random.default_rng(7)
    scale = np.float32(0.25)  # a power of two: x / scale is exact, so k + 0.5 stays a tie
    ties = (rng.integers(-70000, 70000, n) + 0.5).astype(np.float32) * scale
    ties[:6] = [np.inf, -np.inf, 1e30, -1e30, 0.125, -0.125]
    nan_at = np.arange(37, n, 97)  # inside the kernels' vector blocks and their tails
    ties[nan_at] = np.nan
    for zp in (info.min, 0, 1, info.max):
        z = np.array(zp, target)
        got = qcore.quantize_linear(ties, scale, z).astype(np.int64)
        with np.errstate(invalid="ignore"):
            want = np.clip(np.rint(ties.astype(np.float64) / 0.25) + zp, info.min, info.max)
        want[nan_at] = info.min  # NaN into an integer type: the minimum (README, Semantics)
        np.testing.assert_array_equal(got, want.astype(np.int64), err_msg=f"zero point {zp}")
        # blocks of 32 along the last axis: the blocked kernels' fixed-width loops
        rows = ties[:n - n % 64].reshape(-1, 64)
        scales = np.full((rows.shape[0], 2), scale)
        got = qcore.quantize_linear(rows, scales, np.full(scales.shape, zp, target), axis=1,
                                    block_size=32).astype(np.int64)
        np.testing.assert_array_equal(got.ravel(), want[:rows.size].astype(np.int64),
                                      err_msg=f"blocked, zero point {zp}")


def _portable_families():
    """The integer and small-float quantize kernels as they compile off x86: the segment
    loops without the written-out vector steps (EXPLICIT_VECTORS bound to False)."""
    from qcore.kernels import bound, drivers, segments_int

    flags = {"nogil": True, "error_model": "numpy"}
    families = {
        cpu.FamilyName.QUANTIZE_INT: drivers.family(
            bound(segments_int.seg_int_tensor.py_func, "_seg_int_tensor_portable", flags,
                  EXPLICIT_VECTORS=False), "quantize_int_portable"),
        cpu.FamilyName.QUANTIZE_INT_BLOCKS: drivers.family(
            bound(segments_int.seg_int.py_func, "_seg_int_portable", flags,
                  EXPLICIT_VECTORS=False),
            "quantize_int_blocks_portable", segments_int.SCRATCH)}
    for (fnuz, add), name in cpu.FLOAT_CASES.items():
        segment = cpu.float_segment(fnuz, add, "_portable", EXPLICIT_VECTORS=False)
        families[name] = drivers.family(segment, name.value.replace(" ", "_") + "_portable")
    return families


@pytest.mark.parametrize("target", [np.int8, np.uint8, ml_dtypes.int4, np.int16,
                                    ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2fnuz,
                                    ml_dtypes.float4_e2m1fn])
@pytest.mark.parametrize("block", [0, 32, 64, 96])
def test_vector_steps_equal_the_portable_loops(target, block, monkeypatch):
    """On x86 the integer and small-float codes are computed by written-out vector code (see
    qcore.kernels.bits); elsewhere by the plain loops. Both must give the same bits, on values
    that hit every select: ties, saturation, infinities, NaN, signed zeros, subnormals."""
    rng = np.random.default_rng(3)
    rows, cols = 37, 192
    x = (rng.standard_normal((rows, cols)) * 40).astype(np.float32)
    flat = x.reshape(-1)
    flat[::7] = np.round(flat[::7]) + 0.5  # ties once divided by a scale of 1
    specials = np.array([np.inf, -np.inf, np.nan, -0.0, 0.0, 1e-40, -3e38, 3e38, 448.5,
                         -57344.0, 6.0, 0.25, 1e30, -1e-45, 65504.0, 6.5], np.float32)
    flat[3::29] = np.resize(specials, flat[3::29].size)
    if block:
        scales = np.ones((rows, -(-cols // block)), np.float32)
    else:
        scales = np.float32(1.0)
    zero = np.zeros(np.shape(scales), target)
    if np.dtype(target).kind in "iu" and np.dtype(target).itemsize == 1:
        zero = np.full(np.shape(scales), 3, target)
    kwargs = {"axis": 1, "block_size": block} if block else {}
    want = qcore.quantize_linear(x, scales, zero, **kwargs)
    monkeypatch.setattr(cpu, "FAMILIES", {**cpu.FAMILIES, **_portable_families()})
    got = qcore.quantize_linear(x, scales, zero, **kwargs)
    np.testing.assert_array_equal(got.view(np.uint8) if got.itemsize == 1 else got,
                                  want.view(np.uint8) if want.itemsize == 1 else want)


_SPECIALS = np.array([np.inf, -np.inf, np.nan, -0.0, 0.0, 1e-40, -3e38, 3e38, 448.5, -57344.0,
                      6.5, 0.25, 1e30, -1e-45, 65504.0, 2.5], np.float32)


@pytest.mark.parametrize("x_dtype", [np.float32, ml_dtypes.bfloat16])
@pytest.mark.parametrize("target", [np.int8, np.uint16, ml_dtypes.uint4, ml_dtypes.float8_e4m3fn,
                                    ml_dtypes.float8_e5m2fnuz])
@pytest.mark.parametrize("shape, axis, block", [((300, 256), 1, 32), ((70, 1024), 1, 128),
                                                ((3000, 40), 0, 0), ((4, 70, 300), 0, 2),
                                                ((700, 96), 1, 1)])
def test_one_run_call_by_its_segment_equals_the_serial_driver(x_dtype, target, shape, axis,
                                                              block, monkeypatch):
    """Blocked and per-axis calls whose elements map to their scales as one run of blocks run
    their family's segment directly on the whole of x (the integer blocks family where its
    scratch holds every block's zero point: 560 blocks here, not 2400); the serial driver must
    give the same bits."""
    rng = np.random.default_rng(block + axis)
    x = (rng.standard_normal(shape) * 30).astype(np.float32)
    x.reshape(-1)[::97] = np.resize(_SPECIALS, x.reshape(-1)[::97].size)
    with np.errstate(over="ignore"):
        x = x.astype(x_dtype)
    sshape = list(shape)
    if block:
        sshape[axis] = -(-shape[axis] // block)
    else:
        sshape = [shape[axis]]
    scale = rng.uniform(0.25, 2.0, sshape).astype(x_dtype)
    zero = np.full(sshape, 3 if np.dtype(target).kind in "iu" else 0, target)
    kwargs = {"axis": axis, "block_size": block}
    results = []
    for direct in (True, False):
        monkeypatch.setattr(cpu, "DIRECT", direct)
        y = qcore.quantize_linear(x, scale, zero, **kwargs)
        results.append((y, qcore.dequantize_linear(y, scale, zero, **kwargs)))
    assert_bits_equal(results[0][0], results[1][0], context="quantize")
    assert_bits_equal(results[0][1], results[1][1], context="dequantize")


@pytest.mark.parametrize("x_dtype", [np.float32, np.float16, ml_dtypes.bfloat16])
@pytest.mark.parametrize("target", [np.int8, ml_dtypes.uint4, np.int16,
                                    ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2fnuz,
                                    ml_dtypes.float4_e2m1fn])
@pytest.mark.parametrize("n", [1, 31, 1000, cpu.CHUNK, 3 * cpu.CHUNK + 17])
def test_per_tensor_call_by_its_segment_equals_the_serial_driver(x_dtype, target, n,
                                                                 monkeypatch):
    """A per-tensor call below the parallel threshold runs its family's segment directly, in
    one run (no driver to compile on a cold start; the generic family piece by piece of its
    chunk-long scratch); the serial driver, chunk by chunk, must give the same bits, and the same
    refusal of an unusable scale."""
    rng = np.random.default_rng(n)
    x = (rng.standard_normal(n) * 30).astype(np.float32)
    x[: min(n, _SPECIALS.size)] = _SPECIALS[: min(n, _SPECIALS.size)]
    with np.errstate(over="ignore"):
        x = x.astype(x_dtype)
    scale = np.array(0.75, x_dtype)
    zero = np.array(3 if np.dtype(target).kind in "iu" else 0, target)

    def both(call):
        """call()'s result by the segment alone, then by the serial driver."""
        results = []
        for direct in (True, False):
            monkeypatch.setattr(cpu, "DIRECT", direct)
            results.append(call())
        return results

    direct, driver = both(lambda: qcore.quantize_linear(x, scale, zero))
    assert_bits_equal(direct, driver, context="quantize")
    direct_dq, driver_dq = both(lambda: qcore.dequantize_linear(driver, scale, zero))
    assert_bits_equal(direct_dq, driver_dq, context="dequantize")
    for bad in (0.0, -1.0, np.nan, np.inf):
        for direct in (True, False):
            monkeypatch.setattr(cpu, "DIRECT", direct)
            with pytest.raises(qcore.QuantizationError, match="y_scale"):
                qcore.quantize_linear(x, np.array(bad, x_dtype), zero)
