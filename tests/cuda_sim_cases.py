"""The CUDA backend, bit for bit against the CPU backend.

Not collected by a plain ``pytest`` (the name has no ``test_`` prefix): tests/test_cuda_sim.py
runs this file in a subprocess with ``NUMBA_ENABLE_CUDASIM=1`` (numba reads it at import), and
again without it when a real GPU is usable. Anywhere else the module skips itself.

The simulator runs every GPU thread as a Python thread, so the tensors are small (<= 256
elements) and the launches use few threads, each looping over several elements (the grid-stride
loop is exercised as it is on a GPU).
"""

from __future__ import annotations

import itertools
import math
import sys
import zlib

import ml_dtypes
import numba
import numpy as np
import pytest

import qcore
from qcore.formats import FLOAT, INT, get_format
from qcore.kernels.params import XKind
from qcore.versions import DEQUANTIZE, OPERATORS, QUANTIZE

if not (numba.config.ENABLE_CUDASIM or qcore.cuda_available()):
    pytest.skip("needs NUMBA_ENABLE_CUDASIM=1 or a GPU; run through tests/test_cuda_sim.py",
                allow_module_level=True)

from numba import cuda  # noqa: E402

from qcore import packing  # noqa: E402
from qcore.kernels import cuda as ck  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

if numba.config.ENABLE_CUDASIM:
    # Simulated threads hand the GIL back and forth around every call into compiled code (the
    # CPU element functions release it) while the simulator's scheduler polls: a short switch
    # interval makes those hand-overs cheap (about 2x faster here).
    sys.setswitchinterval(5e-5)

SHAPE = (3, 8, 10)  # 240 elements: per-axis on any axis, blocked with a short last block
# (granularity, attributes, scale shape)
GRANULARITIES = {
    "per-tensor": [({}, ())],
    "per-axis": [(dict(axis=0), (3,)), (dict(axis=1), (8,)), (dict(axis=-1), (10,))],
    "blocked": [(dict(axis=1, block_size=3), (3, 3, 10)), (dict(axis=2, block_size=4), (3, 8, 3)),
                (dict(axis=0, block_size=2), (2, 8, 10))],
}
INF, NAN = np.inf, np.nan


def _bits(a: np.ndarray) -> np.ndarray:
    a = np.ascontiguousarray(a)
    return a.view({1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[a.dtype.itemsize])


def assert_bit_exact(expected, got, x=None, what=""):
    """Same type, shape and bits; on failure name the first elements that differ."""
    got_host = got.copy_to_host() if hasattr(got, "copy_to_host") else got
    assert isinstance(got_host, np.ndarray), f"{what}: got {type(got)}"
    assert got_host.dtype == expected.dtype, f"{what}: dtype {got_host.dtype} != {expected.dtype}"
    assert got_host.shape == expected.shape, f"{what}: shape {got_host.shape} != {expected.shape}"
    e, g = _bits(expected).reshape(-1), _bits(got_host).reshape(-1)
    bad = np.flatnonzero(e != g)
    if bad.size:
        xs = "" if x is None else f" x={np.asarray(x).reshape(-1)[bad[:8]].tolist()}"
        raise AssertionError(
            f"{what}: {bad.size} of {e.size} elements differ; first at {bad[:8].tolist()}{xs} "
            f"cpu bits={[hex(int(v)) for v in e[bad[:8]]]} cuda bits="
            f"{[hex(int(v)) for v in g[bad[:8]]]}"
        )


def both(fn, *args, x=None, **kwargs):
    """Run `fn` on the CPU and on CUDA; compare results bit for bit (or the same error)."""
    try:
        expected = fn(*args, backend="cpu", **kwargs)
    except qcore.QuantizationError as exc:
        with pytest.raises(qcore.QuantizationError) as info:
            fn(*args, backend="cuda", **kwargs)
        assert str(info.value) == str(exc)
        return None
    got = fn(*args, backend="cuda", **kwargs)
    if isinstance(expected, tuple):
        for e, g in zip(expected, got):
            assert_bit_exact(e, g, x, f"{fn.__name__} {kwargs}")
    else:
        assert_bit_exact(expected, got, x, f"{fn.__name__} {kwargs}")
    return expected


# ---------------------------------------------------------------------------------------------
# Inputs: adversarial values in units of the scale
# ---------------------------------------------------------------------------------------------

_UNITS = np.array([
    0.0, -0.0, 0.5, -0.5, 1.5, -1.5, 2.5, -2.5, 3.5, 126.5, 127.5, -128.5, -127.5, 254.5, 255.5,
    7.5, -8.5, 15.5, 1.4999999, 1.5000001, 32767.5, -32768.5, 65535.5, 1e10, -1e10, INF, -INF,
    NAN, -NAN, 1e-45, -1e-45, 1e-40, 1.1754942e-38, 3.4e38, -3.4e38, 448.0, 464.0, 464.1, 479.9,
    480.0, 496.0, 240.0, 248.0, 256.0, 57344.0, 61439.0, 61440.0, 65536.0, 6.0, 6.5, 7.0, 0.25,
    0.75, 2.0**-9, 2.0**-10, 2.0**-7, 2.0**-8, 2.0**-16, 2.0**-17, 2.0**-126, 2.0**-149, 28.0,
    30.0, 32.0, 0.0625, 0.1875, 1.0, -1.0, 100.0, -100.0, 65504.0, 65520.0, 3e38,
], np.float32)


def _units(n: int, rng) -> np.ndarray:
    """n values: every adversarial value, then random ones over several magnitudes."""
    extra = rng.standard_normal(n) * rng.choice([0.1, 1.0, 10.0, 100.0, 1e4], n)
    u = np.concatenate([_UNITS, extra.astype(np.float32)])[:n]
    return rng.permutation(u).astype(np.float32)


def _scales(shape, rng, dtype) -> np.ndarray:
    """Positive scales: mostly powers of two (exact ties), some arbitrary."""
    if not shape:
        return np.array(rng.choice([0.5, 1.0, 2.0, 0.25]), np.float32).astype(dtype)
    n = int(np.prod(shape))
    pw = 2.0 ** rng.integers(-4, 3, n)
    arb = rng.uniform(0.05, 3.0, n)
    s = np.where(rng.random(n) < 0.7, pw, arb).astype(np.float32).reshape(shape)
    return s.astype(dtype)


def _expand(scale: np.ndarray, attrs: dict, shape) -> np.ndarray:
    """Each element's scale (for building x = units * scale)."""
    if scale.size == 1:
        return np.broadcast_to(scale.astype(np.float32).reshape(()), shape)
    axis = attrs.get("axis", 1) % len(shape)
    s = scale.astype(np.float32)
    if s.ndim == 1:
        view = [1] * len(shape)
        view[axis] = -1
        return np.broadcast_to(s.reshape(view), shape)
    return np.repeat(s, attrs["block_size"], axis=axis).take(range(shape[axis]), axis=axis)


def _zero_point(mode: str, target, shape, rng):
    fmt = get_format(target)
    if mode == "none":
        return None
    if mode == "zero":
        return np.zeros(shape, fmt.dtype)
    if fmt.kind == INT:
        lo, hi = int(fmt.min), int(fmt.max)
        vals = rng.integers(lo, hi + 1, max(1, int(np.prod(shape))))
        vals[: min(2, vals.size)] = [lo, hi][: min(2, vals.size)]
        return vals.reshape(shape).astype(fmt.dtype)
    vals = rng.choice([1.0, -0.5, 2.0, -1.5, 0.5], max(1, int(np.prod(shape))))
    return vals.reshape(shape).astype(np.float32).astype(fmt.dtype)


# ---------------------------------------------------------------------------------------------
# QuantizeLinear: versions x targets x granularities x saturate x zero points x precision
# ---------------------------------------------------------------------------------------------


def _quantize_cases():
    cases = []
    cycle_x = itertools.cycle(["float", "float16", "bfloat16", "int32", "float", "float16"])
    cycle_zp = itertools.cycle(["none", "zero", "value", "value"])
    cycle_prec = itertools.cycle([None, "float16", "bfloat16", "float", None])
    cycle_scale = itertools.cycle(["float", "float16", "bfloat16", "float8e8m0", "float"])
    for version, ov in OPERATORS[QUANTIZE].items():
        grans = ["per-tensor"] + (["per-axis"] if ov.per_axis else []) + (
            ["blocked"] if ov.blocked else [])
        for target in ov.quantized_types:
            fmt = get_format(target)
            for gran in grans:
                for k, (attrs, sshape) in enumerate(GRANULARITIES[gran]):
                    if k and gran == "per-axis" and fmt.kind == FLOAT:
                        continue  # the other axes only for the integer targets
                    sats = [True, False] if fmt.kind == FLOAT and "saturate" in ov.attributes \
                        else [True]
                    for sat in sats:
                        x_type = next(cycle_x)
                        if x_type not in ov.x_types or (ov.scale_follows_x and x_type == "int32"):
                            x_type = "float"
                        prec = next(cycle_prec) if "precision" in ov.attributes else None
                        if ov.scale_follows_x:
                            s_type = x_type
                        elif version >= 19:
                            s_type = next(cycle_scale)
                            if s_type not in ov.scale_types:
                                s_type = "float"
                        else:
                            s_type = "float"
                        if prec is not None and x_type == "int32" and prec == "float":
                            prec = None
                        cases.append(dict(version=version, target=target, gran=gran,
                                          attrs=attrs, sshape=sshape, saturate=sat,
                                          x_type=x_type, s_type=s_type, precision=prec,
                                          zp=next(cycle_zp)))
    return cases


QUANTIZE_CASES = _quantize_cases()


def _case_id(c):
    a = ",".join(f"{k}{v}" for k, v in c["attrs"].items())
    return (f"Q{c['version']}-{c['target']}-{c['gran']}{a}-sat{int(c['saturate'])}-"
            f"x{c['x_type']}-s{c['s_type']}-p{c['precision']}-zp{c['zp']}")


def _quantize_inputs(c, seed):
    rng = np.random.default_rng(seed)
    s_fmt = get_format(c["s_type"])
    scale = _scales(c["sshape"], rng, np.float32)
    if s_fmt.name == "float8e8m0":
        scale = (2.0 ** np.round(np.log2(scale))).astype(np.float32)
    scale = scale.astype(s_fmt.dtype)
    n = int(np.prod(SHAPE))
    if c["x_type"] == "int32":
        pool = np.array([0, 1, -1, 2, 3, -3, 127, 128, -128, -129, 255, 256, 2047, 2049, 4097,
                         65504, 65519, 65520, 65536, 2**24 + 1, -(2**24 + 3), 2**31 - 1, -2**31,
                         300000001, -7], np.int64)
        vals = np.concatenate([pool, rng.integers(-2**31, 2**31, n)])[:n]
        x = rng.permutation(vals).astype(np.int32).reshape(SHAPE)
    else:
        units = _units(n, rng).reshape(SHAPE)
        with np.errstate(all="ignore"):
            x = (units * _expand(scale, c["attrs"], SHAPE)).astype(np.float32)
        x = x.astype(get_format(c["x_type"]).dtype)
    zp = _zero_point(c["zp"], c["target"], c["sshape"], rng)
    return x, scale, zp


@pytest.mark.parametrize("c", QUANTIZE_CASES, ids=[_case_id(c) for c in QUANTIZE_CASES])
def test_quantize_matches_cpu(c):
    x, scale, zp = _quantize_inputs(c, zlib.crc32(_case_id(c).encode()))
    kwargs = dict(c["attrs"], opset=c["version"])
    if c["version"] >= 19:
        kwargs["saturate"] = c["saturate"]
    if zp is None and c["target"] != "uint8":
        kwargs["output_dtype"] = c["target"]
    if c["precision"] is not None:
        kwargs["precision"] = c["precision"]
    both(qcore.quantize_linear, x, scale, zp, x=x, **kwargs)


def test_quantize_case_matrix_covers_everything():
    """Every version x target, every granularity and both saturate modes appear."""
    seen = {(c["version"], c["target"]) for c in QUANTIZE_CASES}
    for version, ov in OPERATORS[QUANTIZE].items():
        assert {(version, t) for t in ov.quantized_types} <= seen
    assert {c["gran"] for c in QUANTIZE_CASES} == set(GRANULARITIES)
    assert {c["saturate"] for c in QUANTIZE_CASES} == {True, False}
    assert {c["precision"] for c in QUANTIZE_CASES} == {None, "float", "float16", "bfloat16"}
    assert {c["x_type"] for c in QUANTIZE_CASES} == {"float", "float16", "bfloat16", "int32"}
    assert "float8e8m0" in {c["s_type"] for c in QUANTIZE_CASES}
    assert {c["zp"] for c in QUANTIZE_CASES} == {"none", "zero", "value"}


@pytest.mark.parametrize("target", ["int8", "uint8", "int4", "float8e4m3fn", "float8e5m2",
                                    "float8e4m3fnuz", "float4e2m1", "float6e3m2"])
@pytest.mark.parametrize("saturate", [True, False])
def test_quantize_every_special_value(target, saturate):
    """Each adversarial value once per scale (1, 0.5, 3), per-tensor and per-axis."""
    x = np.repeat(_UNITS[None, :], 3, axis=0)
    scales = np.array([1.0, 0.5, 3.0], np.float32)
    x = (x * scales[:, None]).astype(np.float32)
    for s in scales:
        both(qcore.quantize_linear, x, s, output_dtype=target, saturate=saturate, x=x)
    both(qcore.quantize_linear, x, scales, output_dtype=target, saturate=saturate, axis=0, x=x)


def test_quantize_negative_nan_keeps_its_sign():
    """A GPU's NaN arithmetic gives a positive NaN; the kernels keep the CPU's sign."""
    neg_nan = np.array([0xFFC00000, 0xFF800001, 0x7FC00000], np.uint32).view(np.float32)
    for target in ("float8e4m3fn", "float8e5m2"):
        for zp in (None, np.array(1.0, np.float32).astype(get_format(target).dtype)):
            y = both(qcore.quantize_linear, neg_nan, np.float32(0.5), zp, output_dtype=target)
            assert np.signbit(y.astype(np.float32)[:2]).all()


@pytest.mark.parametrize("shape", [(), (1,), (17,), (0,), (2, 0, 3), (1, 1, 1, 5)])
def test_quantize_shapes(shape):
    rng = np.random.default_rng(1)
    x = (rng.standard_normal(shape) * 50).astype(np.float32)
    both(qcore.quantize_linear, x, np.float32(0.3), np.int8(-3))
    both(qcore.quantize_linear, x, np.float32(0.3), output_dtype="float8e4m3fn")


def test_quantize_more_elements_than_threads():
    """Several elements per thread (grid-stride loop) and a blocked layout along the last axis."""
    rng = np.random.default_rng(2)
    x = (rng.standard_normal((4, 97)) * 9).astype(np.float32)
    s = rng.uniform(0.1, 1.0, (4, 4)).astype(np.float32)
    both(qcore.quantize_linear, x, s, np.zeros((4, 4), ml_dtypes.int4), axis=1, block_size=25)


# ---------------------------------------------------------------------------------------------
# DequantizeLinear: every code of every <= 8-bit type, every version, granularity, output type
# ---------------------------------------------------------------------------------------------

DQ_SHAPE = (2, 8, 16)  # 256 elements: every byte once


def _dequantize_cases():
    cases = []
    cycle_out = itertools.cycle([None, "float16", "bfloat16", "float"])
    cycle_scale = itertools.cycle(["float", "float16", "bfloat16", "float8e8m0"])
    cycle_zp = itertools.cycle(["none", "value", "zero"])
    grans_all = {"per-tensor": [({}, ())], "per-axis": [(dict(axis=1), (8,))],
                 "blocked": [(dict(axis=2, block_size=6), (2, 8, 3))]}
    for version, ov in OPERATORS[DEQUANTIZE].items():
        grans = ["per-tensor"] + (["per-axis"] if ov.per_axis else []) + (
            ["blocked"] if ov.blocked else [])
        for xt in ov.quantized_types:
            for gran in grans:
                for attrs, sshape in grans_all[gran]:
                    s_type = next(cycle_scale)
                    if s_type not in ov.scale_types:
                        s_type = "float"
                    out = next(cycle_out) if "output_dtype" in ov.attributes else None
                    if out is not None and out not in ov.output_types:
                        out = None
                    cases.append(dict(version=version, x_type=xt, gran=gran, attrs=attrs,
                                      sshape=sshape, s_type=s_type, out=out,
                                      zp=next(cycle_zp) if xt != "int32" or version >= 10
                                      else "none"))
    return cases


DEQUANTIZE_CASES = _dequantize_cases()


def _dq_id(c):
    return (f"DQ{c['version']}-{c['x_type']}-{c['gran']}-s{c['s_type']}-o{c['out']}-"
            f"zp{c['zp']}")


def _codes(x_type: str, rng) -> np.ndarray:
    fmt = get_format(x_type)
    n = int(np.prod(DQ_SHAPE))
    if fmt.bits <= 8:
        codes = fmt.all_codes()
        return np.resize(codes, n).reshape(DQ_SHAPE)
    if fmt.name == "int32":
        pool = np.array([0, 1, -1, 2**24 + 1, -(2**24 + 1), 2**31 - 1, -2**31, 16777217,
                         123456789], np.int64)
        vals = np.concatenate([pool, rng.integers(-2**31, 2**31, n)])[:n]
        return vals.astype(np.int32).reshape(DQ_SHAPE)
    lo, hi = int(fmt.min), int(fmt.max)
    vals = np.concatenate([[lo, hi, 0, 1, -1 if lo < 0 else 2],
                           rng.integers(lo, hi + 1, n)])[:n]
    return vals.astype(fmt.dtype).reshape(DQ_SHAPE)


@pytest.mark.parametrize("c", DEQUANTIZE_CASES, ids=[_dq_id(c) for c in DEQUANTIZE_CASES])
def test_dequantize_matches_cpu(c):
    rng = np.random.default_rng(zlib.crc32(_dq_id(c).encode()))
    x = _codes(c["x_type"], rng)
    scale = _scales(c["sshape"], rng, np.float32)
    if c["s_type"] == "float8e8m0":
        scale = (2.0 ** np.round(np.log2(scale))).astype(np.float32)
    scale = scale.astype(get_format(c["s_type"]).dtype)
    fmt = get_format(c["x_type"])
    zp = None
    if c["zp"] != "none" and c["x_type"] != "int32":
        zp = _zero_point(c["zp"], c["x_type"], c["sshape"], rng)
    elif c["zp"] != "none":
        zp = rng.integers(-1000, 1000, max(1, int(np.prod(c["sshape"])))).astype(np.int32)
        zp = zp.reshape(c["sshape"])
    kwargs = dict(c["attrs"], opset=c["version"])
    if c["out"] is not None:
        kwargs["output_dtype"] = c["out"]
    both(qcore.dequantize_linear, x, scale, zp, x=x, **kwargs)
    assert fmt.bits > 8 or np.unique(_bits(x)).size == 1 << fmt.bits  # every code was there


@pytest.mark.parametrize("x_type", [f for f in qcore.QUANTIZED_TYPES if get_format(f).bits <= 8])
@pytest.mark.parametrize("output", ["float", "float16", "bfloat16"])
def test_dequantize_every_code_with_an_awkward_scale(x_type, output):
    """Scales whose products round (and overflow float16), per-tensor: the 8-bit lookup path."""
    x = get_format(x_type).all_codes()
    for s in (np.float32(0.1), np.float32(1e-3), np.float32(3000.0), np.float32(1e-30)):
        both(qcore.dequantize_linear, x, s, output_dtype=output, x=x)


def test_dequantize_nan_codes_keep_the_cpu_bits():
    """float8 NaN codes dequantize to the CPU's NaN bits (sign kept), not a GPU canonical NaN."""
    for name in ("float8e4m3fn", "float8e5m2", "float8e4m3fnuz"):
        codes = get_format(name).all_codes()
        for out in ("float", "bfloat16", "float16"):
            both(qcore.dequantize_linear, codes, np.float32(2.0), output_dtype=out)


# ---------------------------------------------------------------------------------------------
# DynamicQuantizeLinear and the min/max reduction
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", ["random", "positive", "negative", "zeros", "one", "big",
                                  "constant", "tiny", "long"])
def test_dynamic_quantize_linear(case):
    rng = np.random.default_rng(3)
    x = {
        "random": rng.standard_normal((7, 23)) * 4,
        "positive": rng.uniform(0.5, 9.0, 100),
        "negative": -rng.uniform(0.5, 9.0, (10, 10)),
        "zeros": np.zeros((4, 5)),
        "one": np.array([-2.5]),
        "big": rng.standard_normal(64) * 1e30,
        "constant": np.full(33, 7.25),
        "tiny": rng.standard_normal(50) * 1e-40,
        "long": rng.standard_normal(300),  # > threads x blocks: several elements per thread
    }[case].astype(np.float32)
    both(qcore.dynamic_quantize_linear, x, x=x)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_dynamic_quantize_linear_refuses_nan_and_inf(bad):
    x = np.linspace(-1, 1, 70, dtype=np.float32)
    x[[3, 50]] = bad
    with pytest.raises(qcore.QuantizationError, match="2 NaN/Inf"):
        qcore.dynamic_quantize_linear(x, backend="cuda")


def _expected_minmax(values: np.ndarray) -> tuple[float, float, int]:
    """(min, max, NaN/Inf count) by NumPy: NaNs left out of min/max, +-Inf kept in."""
    v = values.astype(np.float32)
    keep = v[~np.isnan(v)]
    if keep.size == 0:
        return math.inf, -math.inf, int(v.size)
    return float(keep.min()), float(keep.max()), int((~np.isfinite(v)).sum())


def _edge_sizes() -> list[int]:
    """Sizes around the reduction's block and grid edges (threads per block, one element per
    thread of the whole grid, two grid-stride rounds), plus a few odd ones."""
    t = ck.REDUCE_THREADS
    grid = t * ck._max_blocks()
    edges = {1, 2, t, 2 * t, grid, 2 * grid, 257}
    return sorted({n + d for n in edges for d in (-1, 0, 1) if n + d >= 1})


def _minmax_inputs(n: int, rep: int):
    rng = np.random.default_rng(1000 * n + rep)
    x = (rng.standard_normal(n) * 10).astype(np.float32)
    x[rng.integers(0, n)] = -77.0
    if rep % 2 and n > 3:  # NaN/Inf at the ends and the middle: the first and last blocks
        x[[0, n // 2, n - 1]] = [np.inf, np.nan, -np.inf]
    yield "float32", x, x, XKind.F32
    h = x.astype(np.float16)
    yield "float16", h, h.view(np.uint16), XKind.F16
    b = x.astype(ml_dtypes.bfloat16)
    yield "bfloat16", b, b.view(np.uint16), XKind.BF16


def test_minmax_reduction_at_block_and_grid_edges():
    """Every (min, max, NaN/Inf count) exact, many times over, with the simulator's threads
    switching as often as CPython allows: the simulator once handed two threads of a block
    different shared arrays (an unlocked allocation), and one in ~15 reductions came back with
    uninitialised memory summed in (a NaN/Inf count of 0x0101010101010104 instead of 3)."""
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        wrong = []
        for n in _edge_sizes():
            for rep in range(6):
                for name, values, bits, kind in _minmax_inputs(n, rep):
                    got = ck.minmax(bits, kind)
                    want = _expected_minmax(values)
                    if got != want:
                        wrong.append(f"n={n} {name} rep {rep}: got {got}, expected {want}")
    finally:
        sys.setswitchinterval(old)
    assert not wrong, f"{len(wrong)} wrong reduction(s):\n" + "\n".join(wrong[:10])


def test_simulator_shared_array_is_one_per_block():
    """The simulator's cuda.shared.array gives every thread of a block the same array, however
    the threads interleave (qcore.kernels.cuda locks its allocation)."""
    if not numba.config.ENABLE_CUDASIM:
        pytest.skip("simulator only")
    import threading

    from numba.cuda.simulator import kernelapi

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        for _ in range(50):
            shared = kernelapi.FakeCUDAShared(0)
            barrier = threading.Barrier(16)
            got = []

            def thread(shared=shared, barrier=barrier, got=got):
                barrier.wait()
                got.append(id(shared.array(8, np.int64)))

            threads = [threading.Thread(target=thread) for _ in range(16)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            assert len(set(got)) == 1
    finally:
        sys.setswitchinterval(old)


# ---------------------------------------------------------------------------------------------
# Device arrays: results stay on the device
# ---------------------------------------------------------------------------------------------


def _on_device(a):
    return hasattr(a, "copy_to_host") and not isinstance(a, np.ndarray)


@pytest.mark.parametrize("target", ["int8", "uint16", "int4", "uint2", "float8e4m3fn",
                                    "float8e5m2fnuz", "float4e2m1", "float6e2m3"])
def test_device_round_trip_stays_on_device(target):
    rng = np.random.default_rng(4)
    x = (rng.standard_normal((6, 20)) * 5).astype(np.float32)
    s = rng.uniform(0.05, 1.0, (6, 4)).astype(np.float32)
    kw = dict(axis=1, block_size=5, output_dtype=target)
    y_cpu = qcore.quantize_linear(x, s, **kw)
    y_dev = qcore.quantize_linear(cuda.to_device(x), s, backend="cuda", **kw)
    assert _on_device(y_dev)
    assert y_dev.shape == x.shape and y_dev.dtype == y_cpu.dtype
    assert_bit_exact(y_cpu, y_dev, x, "device quantize")
    # the device result feeds DequantizeLinear on the device, read as its real type
    x_cpu = qcore.dequantize_linear(y_cpu, s, axis=1, block_size=5)
    x_dev = qcore.dequantize_linear(y_dev, s, axis=1, block_size=5, backend="cuda")
    assert _on_device(x_dev)
    assert_bit_exact(x_cpu, x_dev, what="device dequantize")


def test_device_inputs_of_every_kind():
    rng = np.random.default_rng(5)
    x = (rng.standard_normal((4, 12)) * 3).astype(np.float32)
    for xt, st in ((np.float16, np.float16), (ml_dtypes.bfloat16, ml_dtypes.bfloat16)):
        xx, ss = x.astype(xt), np.float32(0.25).astype(st)
        expected = qcore.quantize_linear(xx, ss, np.int8(1))
        got = qcore.quantize_linear(ck.to_device(xx), ss, np.int8(1), backend="cuda")
        assert_bit_exact(expected, got, what=f"device {np.dtype(xt).name} x")
    xi = rng.integers(-1000, 1000, (3, 7)).astype(np.int32)
    assert_bit_exact(qcore.quantize_linear(xi, np.float32(7.0), np.int16(0)),
                     qcore.quantize_linear(cuda.to_device(xi), np.float32(7.0), np.int16(0),
                                           backend="cuda"), what="device int32 x")
    codes = rng.integers(-128, 128, (5, 9)).astype(np.int8)
    for out in ("float", "float16", "bfloat16"):
        expected = qcore.dequantize_linear(codes, np.float32(0.1), np.int8(3), output_dtype=out)
        got = qcore.dequantize_linear(cuda.to_device(codes), np.float32(0.1), np.int8(3),
                                      output_dtype=out, backend="cuda")
        assert _on_device(got)
        assert_bit_exact(expected, got, what=f"device dequantize -> {out}")
    # device scales and zero points are read to the host
    s = np.full(12, 0.5, np.float32)
    z = np.arange(12, dtype=np.uint8)
    assert_bit_exact(qcore.quantize_linear(x, s, z, axis=1),
                     qcore.quantize_linear(cuda.to_device(x), cuda.to_device(s), cuda.to_device(z),
                                           axis=1, backend="cuda"), what="device scale")


@pytest.mark.parametrize("dtype", [np.float32, np.float16, ml_dtypes.bfloat16, np.int8,
                                   ml_dtypes.float8_e4m3fn, ml_dtypes.int4,
                                   ml_dtypes.float4_e2m1fn])
def test_to_device_copies_every_type(dtype):
    """ml_dtypes' types reach the device by their bytes (numba's cuda.to_device cannot read them
    on a real GPU) and come back as the same type and bits."""
    host = (np.arange(-12, 12, dtype=np.float32) / 4).reshape(4, 6).astype(dtype)
    d = ck.to_device(host)
    assert _on_device(d) and d.dtype == host.dtype and d.shape == host.shape
    back = d.copy_to_host()
    assert back.dtype == host.dtype
    np.testing.assert_array_equal(back.view(f"u{host.itemsize}"), host.view(f"u{host.itemsize}"))


def test_device_dynamic_quantize_linear():
    x = np.random.default_rng(6).standard_normal((9, 11)).astype(np.float32)
    y, s, z = qcore.dynamic_quantize_linear(x)
    yd, sd, zd = qcore.dynamic_quantize_linear(cuda.to_device(x), backend="cuda")
    assert _on_device(yd)
    assert_bit_exact(y, yd, what="device dynamic y")
    assert_bit_exact(s, sd, what="scale")
    assert_bit_exact(z, zd, what="zero point")


@pytest.mark.parametrize("target", ["int4", "uint4", "int2", "uint2", "float4e2m1"])
@pytest.mark.parametrize("n", [1, 7, 8, 45])
def test_pack_on_device(target, n):
    rng = np.random.default_rng(n)
    x = (rng.standard_normal(n) * 3).astype(np.float32)
    y = qcore.quantize_linear(x, np.float32(0.5), output_dtype=target)
    y_dev = qcore.quantize_linear(cuda.to_device(x), np.float32(0.5), output_dtype=target,
                                  backend="cuda")
    packed = ck.pack_device(y_dev)
    assert _on_device(packed)
    np.testing.assert_array_equal(packed.copy_to_host(), packing.pack(y))
    # storage bytes with an explicit type give the same bytes
    np.testing.assert_array_equal(ck.pack_device(y_dev.view(np.uint8), target).copy_to_host(),
                                  packing.pack(y))
    back = ck.unpack_device(packed, get_format(target).dtype, y.shape)
    assert_bit_exact(y, back, what="unpack_device")


def test_device_errors():
    x = cuda.to_device(np.ones((4, 6), np.float32))
    with pytest.raises(qcore.QuantizationError, match="backend='cuda'"):
        qcore.quantize_linear(x, np.float32(1.0))  # backend="cpu" with a device array
    with pytest.raises(qcore.QuantizationError, match="backend='cuda'"):
        qcore.dynamic_quantize_linear(x)
    with pytest.raises(qcore.QuantizationError, match="not C-contiguous"):
        qcore.quantize_linear(x[:, ::2], np.float32(1.0), backend="cuda")
    with pytest.raises(qcore.QuantizationError, match="packing is for"):
        ck.pack_device(cuda.to_device(np.zeros(4, np.int8)))
    with pytest.raises(qcore.QuantizationError, match="bytes cannot hold"):
        ck.unpack_device(cuda.to_device(np.zeros(3, np.uint8)), ml_dtypes.int4, (9,))


# ---------------------------------------------------------------------------------------------
# The timing helpers the benchmark calls
# ---------------------------------------------------------------------------------------------


def test_bench_helpers_run():
    from qcore.bench import cuda as bench_cuda

    rows = bench_cuda.bench_cases(n=256, repeat=1)
    names = [r.name for r in rows]
    assert names[0] == "device copy" and "Q int8 per-tensor" in names
    for r in rows:
        assert r.elements > 0 and r.bytes_moved > 0 and r.kernel_s >= 0 and r.device
        assert r.end_to_end_s >= r.kernel_s
    t = bench_cuda.bench_quantize(np.ones((4, 8), np.float32), np.float32(0.5),
                                  output_dtype="int4", repeat=1)
    assert t.elements == 32 and t.bytes_moved == 32 * 4 + 32
    h = bench_cuda.bench_quantize(np.ones((4, 8), np.float16), np.float16(0.5), repeat=1)
    assert h.bytes_moved == 32 * 2 + 32
    d = bench_cuda.bench_dequantize(np.arange(32, dtype=np.int8).reshape(4, 8),
                                    np.float32(0.5), repeat=1)
    assert d.elements == 32 and d.bytes_moved == 32 + 32 * 4
    m = bench_cuda.bench_minmax(np.arange(300, dtype=np.float32), repeat=1)
    assert m.elements == 300 and m.bytes_moved == 1200


def test_bench_cli_backend_cuda_runs(capsys):
    """`python -m qcore.bench --backend cuda` end to end on a tiny size (ready for a GPU)."""
    from qcore.bench import cli as bench

    assert bench.main(["--backend", "cuda", "--size", "4x64", "--no-peers"]) == 0
    out = capsys.readouterr().out
    for name in ("Q int8 per-tensor", "Q float8e4m3fn per-tensor", "DQ int8 per-tensor",
                 "DynamicQuantizeLinear min/max pass"):
        assert f"| {name} |" in out
    assert "roofline: " in out and "host CPU" in out


def test_available_in_this_process():
    assert qcore.cuda_available()
    assert ck.backend_or_raise("x") is ck


# ---------------------------------------------------------------------------------------------
# The specialised kernels (qcore.kernels.cuda_quantize, cuda_dequantize): every layout family
# x target family
# ---------------------------------------------------------------------------------------------

# (name, x shape, attributes, scale shape): per-tensor with a tail of n % 4, rows along the
# last axis (per-axis, blocked by a multiple of 4 and not), rows along an outer axis (one scale
# per row, a scale per column), one row whose length is not a multiple of 4, rows longer than one
# grid row of threads, an axis between two others
FAST_LAYOUTS = [
    ("per-tensor tail", (5, 7), {}, ()),
    ("last per-axis", (3, 16), dict(axis=1), (16,)),
    ("last blocked 8", (3, 40), dict(axis=1, block_size=8), (3, 5)),
    ("last blocked 3", (2, 12), dict(axis=1, block_size=3), (2, 4)),
    ("outer per-axis", (4, 12), dict(axis=0), (4,)),
    ("outer blocked", (6, 8), dict(axis=0, block_size=4), (2, 8)),
    ("one row", (1, 42), dict(axis=1, block_size=8), (1, 6)),
    ("long rows", (2, 136), dict(axis=1, block_size=8), (2, 17)),
    ("middle blocked", (3, 4, 8), dict(axis=1, block_size=2), (3, 2, 8)),
    ("tall blocked 4", (13, 8), dict(axis=1, block_size=4), (13, 2)),
    ("tall per-axis", (10, 16), dict(axis=1), (16,)),
    ("middle per-axis", (3, 5, 8), dict(axis=1), (5,)),
]
FAST_TARGETS = ["int8", "uint8", "int16", "uint16", "int4", "float8e4m3fn", "float8e5m2",
                "float4e2m1"]


def _family(x, scale, **kwargs):
    call = qcore.ops.prepare_quantize(x, scale, backend="cuda", **kwargs)
    return ck.quantize_family(call.layout_params(), call.params())


@pytest.mark.parametrize("layout", FAST_LAYOUTS, ids=[f[0] for f in FAST_LAYOUTS])
def test_specialised_quantize_families(layout):
    name, shape, attrs, sshape = layout
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    n = int(np.prod(shape))
    scale = _scales(sshape, rng, np.float32)
    with np.errstate(all="ignore"):
        x = (_units(n, rng).reshape(shape) * _expand(scale, attrs, shape)).astype(np.float32)
    for target in FAST_TARGETS:
        fam = _family(x, scale, output_dtype=target, **attrs)
        assert fam is not None and fam[0] == ("per-tensor" if not sshape else "rows")
        assert fam[2] == get_format(target).itemsize
        assert (fam[1] == "fp4") == (target == "float4e2m1"), (target, fam)
        sats = [True, False] if target.startswith("float8") else [True]
        for sat in sats:
            zp = _zero_point("value", target, sshape, rng)
            both(qcore.quantize_linear, x, scale, zp, x=x, saturate=sat, output_dtype=target,
                 **attrs)
        both(qcore.quantize_linear, x, scale, x=x, output_dtype=target, **attrs)


@pytest.mark.parametrize("layout", FAST_LAYOUTS, ids=[f[0] for f in FAST_LAYOUTS])
def test_specialised_dequantize_families(layout):
    name, shape, attrs, sshape = layout
    rng = np.random.default_rng(zlib.crc32(name.encode()) + 1)
    scale = _scales(sshape, rng, np.float32)
    n = int(np.prod(shape))
    for x_type in ("int8", "uint8", "float8e4m3fn", "int4"):
        x = np.resize(get_format(x_type).all_codes(), n).reshape(shape)
        zp = _zero_point("value", x_type, sshape, rng) if x_type != "float8e4m3fn" else None
        for out in ("float", "float16", "bfloat16"):
            both(qcore.dequantize_linear, x, scale, zp, x=x, output_dtype=out, **attrs)


#: The layouts of FAST_LAYOUTS the batched rows walk serves (qcore.kernels.cuda_rows), by its
#: kernel: a scale per column, or one scale per vector and row.
BATCHED = {"last per-axis": "batch-col", "tall per-axis": "batch-col",
           "last blocked 8": "batch-vec", "outer per-axis": "batch-vec",
           "long rows": "batch-vec", "tall blocked 4": "batch-vec",
           "middle per-axis": "batch-vec"}


#: The layouts of FAST_LAYOUTS whose element i has the scale i // q (the flat walk's).
FLAT = {"last blocked 8", "outer per-axis", "long rows", "tall blocked 4"}


def _expected_kernel(name: str, walk: str) -> str:
    """The kernel layout qcore.kernels.cuda.rows_kernel picks for a FAST_LAYOUTS layout."""
    if walk == "rows" or name not in BATCHED:
        return "rows"
    if walk == "flat":
        return "flat-vec" if name in FLAT else BATCHED[name]
    return BATCHED[name].replace("batch", walk)


@pytest.mark.parametrize("walk", ["rows", "batch", "stride", "pipe", "flat"])
def test_rows_walks_give_the_cpu_codes(walk, monkeypatch):
    """Every rows walk (the one-row walk and the batched ones, which the benchmark sets side by
    side) on every layout the batched walks serve, which they are chosen for; the others keep
    the one-row walk."""
    monkeypatch.setattr(ck, "ROWS_WALK", walk)
    for name, shape, attrs, sshape in FAST_LAYOUTS:
        if not sshape:
            continue
        rng = np.random.default_rng(zlib.crc32(name.encode()) + 2)
        n = int(np.prod(shape))
        scale = _scales(sshape, rng, np.float32)
        with np.errstate(all="ignore"):
            x = (_units(n, rng).reshape(shape) * _expand(scale, attrs, shape)).astype(np.float32)
        call = qcore.ops.prepare_quantize(x, scale, backend="cuda", **attrs)
        kernel = ck.rows_kernel(call.layout_params(), 1)[0]
        assert kernel == _expected_kernel(name, walk), name
        for target in ("int8", "uint8", "float8e4m3fn", "float4e2m1"):
            zp = _zero_point("value", target, sshape, rng)
            both(qcore.quantize_linear, x, scale, zp, x=x, output_dtype=target, **attrs)
        codes = np.resize(get_format("int8").all_codes(), n).reshape(shape)
        zp = _zero_point("value", "int8", sshape, rng)
        both(qcore.dequantize_linear, codes, scale, zp, x=codes, **attrs)


def test_specialised_minmax_of_every_kind():
    rng = np.random.default_rng(9)
    for n in (1, 3, 4, 5, 67, 1000):
        for _, values, bits, kind in _minmax_inputs(n, n % 2):
            assert ck.minmax(bits, kind) == _expected_minmax(values), (n, kind)
    # -0 and +0 only: min and max are zeros (their sign is not part of the contract)
    got = ck.minmax(np.array([-0.0, 0.0, -0.0], np.float32), XKind.F32)
    assert got[0] == 0 and got[1] == 0 and got[2] == 0
    all_nan = np.full(9, np.nan, np.float32)
    assert ck.minmax(all_nan, XKind.F32) == (math.inf, -math.inf, 9)
    del rng


# ---------------------------------------------------------------------------------------------
# On a GPU: the float8 conversion instruction against the encoder, and large tensors
# ---------------------------------------------------------------------------------------------


def _float8_probe_values(target: str) -> np.ndarray:
    """float32 values for the float8 conversion: every float32 within 2**17 ulps of each of
    the format's edges (largest finite, the overflow bound and the next midpoints, the smallest
    subnormal and half of it, the smallest normal, 1, Inf, 0 and float32's subnormals, float32's
    smallest normal), both signs; every NaN/Inf pattern class; and 2**23 random bit patterns."""
    fmt = get_format(target)
    big = float(fmt.max)
    edges = [big, big * 1.0625, big * 1.125, big * 1.25, big * 2, 2.0 ** (1 - fmt.bias - fmt.mbits),
             2.0 ** (-fmt.bias - fmt.mbits), 2.0 ** (1 - fmt.bias), 1.0, 3.4e38, 0.0,
             2.0 ** -126]
    window = np.arange(-(2 ** 17), 2 ** 17, dtype=np.int64)
    parts = []
    for e in edges:
        b = np.int64(np.float32(e).view(np.uint32))
        w = np.clip(b + window, 0, 0x7F800000).astype(np.uint32)
        parts += [w, w | np.uint32(0x80000000)]
    parts.append(np.array([0x7F800000, 0xFF800000, 0x7FC00000, 0xFFC00000, 0x7F800001,
                           0xFF800001, 0x7FFFFFFF, 0xFFFFFFFF, 0, 0x80000000], np.uint32))
    rng = np.random.default_rng(11)
    parts.append(rng.integers(0, 2 ** 32, 2 ** 23, dtype=np.uint64).astype(np.uint32))
    return np.concatenate(parts).view(np.float32)


@pytest.mark.parametrize("target", ["float8e4m3fn", "float8e5m2"])
@pytest.mark.parametrize("saturate", [True, False])
def test_float8_conversion_instruction_matches_the_cpu(target, saturate):
    """Where the GPU converts to float8 itself (compute capability >= 8.9), its kernels give
    the CPU's codes for every float32 near the format's edges and a large random sample:
    saturate on and off, NaN (sign kept), Inf, +-0, subnormals; per-tensor and per-axis, with
    and without a zero point."""
    if not ck.fp8_conversion():
        pytest.skip("needs a GPU with compute capability >= 8.9 (the cvt to float8)")
    x = _float8_probe_values(target)
    assert _family(x, np.float32(1.0), output_dtype=target) == ("per-tensor", "fp8-cvt", 1)
    both(qcore.quantize_linear, x, np.float32(1.0), output_dtype=target, saturate=saturate, x=x)
    both(qcore.quantize_linear, x, np.float32(0.5), output_dtype=target, saturate=saturate, x=x)
    m = x[: x.size - x.size % 64].reshape(-1, 64)
    s = np.where(np.arange(64) % 2, 0.25, 2.0).astype(np.float32)
    assert _family(m, s, axis=1, output_dtype=target)[:2] == ("rows", "fp8-cvt")
    zp = np.array(0.0, np.float32).astype(get_format(target).dtype)
    both(qcore.quantize_linear, m, s, np.broadcast_to(zp, (64,)).copy(), axis=1,
         output_dtype=target, saturate=saturate, x=m)


@pytest.mark.parametrize("walk", ["rows", "batch", "stride", "pipe", "flat"])
@pytest.mark.parametrize("case", ["per-tensor", "blocked 32", "blocked 128", "per-axis rows",
                                  "per-axis columns"])
def test_large_tensors_on_the_gpu(case, walk, monkeypatch):
    """Large tensors through every grid-stride loop (many blocks, several rounds each), the
    rows layouts through every rows walk."""
    if numba.config.ENABLE_CUDASIM:
        pytest.skip("a GPU-sized tensor (the simulator runs threads as Python threads)")
    if case == "per-tensor" and walk != "rows":
        pytest.skip("per-tensor has no rows walk")
    monkeypatch.setattr(ck, "ROWS_WALK", walk)
    rng = np.random.default_rng(12)
    x = (rng.standard_normal((1024, 4100)) * 40).astype(np.float32)
    attrs, sshape = {
        "per-tensor": ({}, ()),
        "blocked 32": (dict(axis=1, block_size=32), (1024, 129)),
        "blocked 128": (dict(axis=1, block_size=128), (1024, 33)),
        "per-axis rows": (dict(axis=0), (1024,)),
        "per-axis columns": (dict(axis=1), (4100,)),
    }[case]
    s = rng.uniform(0.05, 1.0, sshape).astype(np.float32) if sshape else np.float32(0.3)
    for target in ("int8", "uint8", "int16", "float8e4m3fn", "float8e5m2", "int4"):
        both(qcore.quantize_linear, x, s, x=x, output_dtype=target, **attrs)
    codes = rng.integers(-128, 128, x.shape, dtype=np.int8)
    for out in ("float", "float16"):
        both(qcore.dequantize_linear, codes, s, x=codes, output_dtype=out, **attrs)
    y = both(qcore.dynamic_quantize_linear, x, x=x)
    assert y is not None
