"""Differential tests: qcore against the onnx reference evaluator, bit for bit.

Every case runs three implementations on the same inputs -- qcore, the onnx reference evaluator
(a one-node model at the operator's opset) and the spec oracle in ``tests/oracle.py`` -- and
checks qcore == oracle on every element and qcore == reference on every element except those
where docs/semantics.md documents that qcore decided differently from the reference
(each such mask below carries its reason). The oracle agreeing with the reference everywhere
else is what makes it trustworthy where the reference is wrong.

Coverage: QuantizeLinear at every version x every valid x type x target type, every
granularity (per-tensor, per-axis on the first/middle/last axis, blocked on the first/last
axis with divisible and non-divisible dimensions) x saturate x zero point (none/zero/non-zero);
at 23 every (x type, scale type, precision) triple for every target, and at 24/25/28 every
triple for the feature the version adds (float8e8m0 scales, int2/uint2, float6) plus one
rotating triple for each other (x type, target). The same for DequantizeLinear with output
types, an exhaustive pass over every bit pattern of every <= 16-bit type, DynamicQuantizeLinear,
and large tensors (parallel kernel path).
"""

from __future__ import annotations

import itertools
import zlib
from dataclasses import dataclass
from functools import cache

import ml_dtypes
import numpy as np
import oracle
import pytest
from conftest import assert_bits_equal, bits, reference

import qcore

onnx = pytest.importorskip("onnx")

Q_VERSIONS = (10, 13, 19, 21, 23, 24, 25, 28)
DQ_VERSIONS = Q_VERSIONS
SHAPE = (8, 5, 9)  # 360 elements: small, yet every axis has its own length


# ----------------------------------------------------------------------------------------------
# What each version accepts, read from the ONNX schemas (the spec), not from qcore's table.


def _schema_types(op: str, version: int) -> dict[str, tuple[str, ...]]:
    schema = onnx.defs.get_schema(op, version)
    constraints = {tc.type_param_str: tuple(t[7:-1] for t in tc.allowed_type_strs)
                   for tc in schema.type_constraints}

    def of(i):
        ts = schema.inputs[i].type_str
        return constraints.get(ts, (ts[7:-1],) if ts.startswith("tensor(") else ())

    if op == "QuantizeLinear":
        return {"x": of(0), "scale": of(1), "quantized": of(2)}
    out = schema.outputs[0].type_str
    outputs = constraints.get(out, of(1))
    return {"quantized": of(0), "scale": of(1), "output": outputs}


@cache
def _attrs(op: str, version: int) -> frozenset[str]:
    return frozenset(onnx.defs.get_schema(op, version).attributes)


# ----------------------------------------------------------------------------------------------
# Granularities


@dataclass(frozen=True)
class Gran:
    name: str
    x_shape: tuple[int, ...]
    scale_shape: tuple[int, ...]
    axis: int | None  # None: leave the attribute out
    block: int = 0
    min_version: int = 10


GRANULARITIES = (
    Gran("pt", SHAPE, (), None),
    Gran("pt-rank1", (SHAPE[0] * SHAPE[1] * SHAPE[2],), (1,), None),  # 1-element 1-D scale
    Gran("pt-rank1-axis0", (360,), (1,), 0, min_version=13),
    Gran("axis0", SHAPE, (8,), 0, min_version=13),
    Gran("axis1", SHAPE, (5,), 1, min_version=13),
    Gran("axis-1", SHAPE, (9,), -1, min_version=13),
    Gran("block0-div", SHAPE, (2, 5, 9), 0, 4, 21),  # 8 = 2 x 4
    Gran("block0-rem", SHAPE, (3, 5, 9), 0, 3, 21),  # 8 = 3 + 3 + 2
    Gran("block-1-div", SHAPE, (8, 5, 3), -1, 3, 21),  # 9 = 3 x 3
    Gran("block-1-rem", SHAPE, (8, 5, 3), 2, 4, 21),  # 9 = 4 + 4 + 1 (upper edge of range)
    Gran("block-rank1", (360,), (45,), 0, 8, 21),  # 1-D x: 360 = 45 x 8, range [8, 8]
)


def _grans(version, full=True, key=""):
    grans = [g for g in GRANULARITIES if version >= g.min_version]
    if full or len(grans) == 1:
        return grans
    return [grans[0], grans[1 + zlib.crc32(key.encode()) % (len(grans) - 1)]]


# ----------------------------------------------------------------------------------------------
# Input generation


def _rng(*key) -> np.random.Generator:
    return np.random.default_rng(zlib.crc32(repr(key).encode()))


def _scale_pool(scale_type: str) -> np.ndarray:
    if scale_type == "int32":
        return np.array([1, 2, 3, 4, 7], np.float64)
    # the extremes stay normal in every division type (float16: 2**-14 .. 65504)
    if scale_type == "float8e8m0":
        return np.ldexp(1.0, np.concatenate([np.arange(-8, 9), [-14, 15]]))
    # mostly powers of two (exact ties of x/scale survive), some that are not
    return np.array([0.5, 2.0, 0.25, 4.0, 0.0625, 1.0, 0.375, 0.011, 3.3, 1e-3, 96.0, 0.1,
                     2.0**-14, 2.0**15])


def make_scale(scale_type: str, shape, rng) -> np.ndarray:
    pool = _scale_pool(scale_type)
    values = rng.choice(pool, size=int(np.prod(shape, dtype=int)))
    dt = oracle.DTYPES[scale_type]
    return values.reshape(shape).astype(np.float32).astype(dt)


@cache
def _finite_values(name: str) -> np.ndarray:
    """Every finite value of a <= 8-bit float format, sorted, unique (float64)."""
    dt = oracle.DTYPES[name]
    with np.errstate(all="ignore"):
        v = np.arange(256, dtype=np.uint8).view(dt).astype(np.float64)
    return np.unique(v[np.isfinite(v)])


def make_zero_point(target: str, kind: str, shape, rng):
    """None, zeros, or non-zero values (the range's ends included) of the target type."""
    if kind == "none":
        return None
    dt = oracle.DTYPES[target]
    n = int(np.prod(shape, dtype=int))
    if kind == "zero":
        return np.zeros(shape, np.float32).astype(dt)
    if target in oracle.INT_RANGES:
        lo, hi = oracle.INT_RANGES[target]
        pool = np.array([v for v in (lo, hi, lo + 1, hi - 1, (lo + hi) // 2 + 1, 1) if v != 0])
        values = rng.choice(pool, size=n)
        if n == 1:
            values = rng.choice(pool, size=1)
        return values.reshape(shape).astype(np.int64).astype(dt)
    finite = _finite_values(target)
    m = finite.max()
    pool = np.array([1.0, -2.0, 0.5, m, -m, finite[finite > 0].min(), 3.0, -1.5])
    return rng.choice(pool, size=n).reshape(shape).astype(np.float32).astype(dt)


def _adversarial_quotients(target: str, z: np.ndarray, rng) -> np.ndarray:
    """Per element, a quotient x/scale at a decision boundary of `target` given zero point z."""
    n = z.size
    if target in oracle.INT_RANGES:
        lo, hi = oracle.INT_RANGES[target]
        d = np.array([-1.5, -1.0, -0.5, -0.49, 0.0, 0.49, 0.5, 1.0, 1.5])
        edges = np.concatenate([lo + d, hi + d])
        q = rng.choice(edges, size=n) - z
        ties = rng.integers(lo - 3, hi + 3, size=n) + 0.5 - z
        small = rng.choice(np.array([-2.5, -1.5, -0.5, -0.0, 0.0, 0.5, 1.5, 2.5]), size=n)
        huge = rng.choice(np.array([1e10, -1e10, 2.0**31, -(2.0**31), 2.0**31 - 1,
                                    -(2.0**31) - 1, 3e38, -3e38]), size=n)
        pick = rng.integers(0, 10, size=n)
        return np.select([pick < 4, pick < 7, pick < 9], [q, ties, small], huge)
    v = _finite_values(target)
    pos = v[v > 0]
    mids = (pos[1:] + pos[:-1]) / 2  # exact ties between neighbours
    ulp_top = pos[-1] - pos[-2]
    top = pos[-1]
    boundary = np.array([top, top + ulp_top / 2, top + ulp_top / 2 + ulp_top / 64,
                         top + ulp_top / 2 - ulp_top / 64, top + ulp_top, top + 1.5 * ulp_top,
                         2 * top, pos[0] / 2, pos[0] / 4, 0.75 * pos[0], pos[0] / 2 + pos[0] / 64])
    pool = np.concatenate([v, mids, mids * (1 + 2.0**-10), mids * (1 - 2.0**-10), boundary])
    q = rng.choice(pool, size=n) * rng.choice(np.array([1.0, -1.0]), size=n)
    return q - z


def _specials(x_type: str) -> np.ndarray:
    """Raw x values: signed zeros, subnormals, extremes, Inf and NaN of x's type."""
    if x_type == "int32":
        i32 = np.iinfo(np.int32)
        return np.array([0, 1, -1, i32.max, i32.min, i32.min + 1, 2**24 + 1, -(2**24) - 1,
                         2**30 + 2**22 + 1, -(2**30) - 2**22 - 1, 65519, 65520, 2**24 + 2**16 + 1],
                        np.float64)
    layout = oracle.FLOAT_LAYOUT[x_type]
    mbits, emin, top = layout
    sub = 2.0 ** (emin - mbits)
    return np.array([0.0, -0.0, sub, -sub, 3 * sub, 2.0**emin - sub, -(2.0**emin), top, -top,
                     np.inf, -np.inf, np.nan, -np.nan, 1e10, -1e10, 3e38, -3e38, 1.0, -1.0])


def make_x(x_type: str, target: str, s_elem: np.ndarray, z_elem: np.ndarray, rng):
    """x (shape of s_elem) with adversarial quotients, raw specials and random values."""
    shape = s_elem.shape
    s = s_elem.astype(np.float64).reshape(-1)
    z = z_elem.astype(np.float64).reshape(-1)
    n = s.size
    q = _adversarial_quotients(target, z, rng)
    if target in oracle.INT_RANGES:
        lo, hi = oracle.INT_RANGES[target]
        rand = rng.uniform(lo - 2, hi + 2, size=n) - z
    else:
        m = oracle.finfo_max(target)
        rand = rng.standard_normal(n) * m / 4
    with np.errstate(all="ignore"):
        v = np.where(rng.random(n) < 0.55, q, rand) * s
    specials = _specials(x_type)
    k = max(1, n // 6)
    where = rng.choice(n, size=min(n, k), replace=False)
    v[where] = rng.choice(specials, size=where.size)
    v[: min(n, specials.size)] = specials[: min(n, specials.size)]  # every special at least once
    if x_type == "int32":
        i32 = np.iinfo(np.int32)
        v = np.where(np.isfinite(v), v, 0.0)
        v = np.clip(np.rint(v), i32.min, i32.max).astype(np.int64).astype(np.int32)
        return v.reshape(shape)
    with np.errstate(all="ignore"):
        return v.astype(np.float32).astype(oracle.DTYPES[x_type]).reshape(shape)


# ----------------------------------------------------------------------------------------------
# QuantizeLinear


@dataclass(frozen=True)
class QCase:
    version: int
    x: str
    scale: str
    precision: str | None
    target: str
    full: bool = True  # every granularity; else per-tensor and one rotating granularity

    @property
    def id(self) -> str:
        p = f"-prec_{self.precision}" if self.precision else ""
        return f"Q{self.version}-x_{self.x}-scale_{self.scale}{p}-to_{self.target}"


#: The element types a version adds (24 adds a scale type, float8e8m0).
NEW_TYPES = {25: ("int2", "uint2"), 28: ("float6e2m3", "float6e3m2")}


def _matrix(v: int, t: str, combos: list[tuple], every: bool) -> list[tuple]:
    """The (scale type, precision or output) combinations a (version, type) runs beyond its
    rotating one: all where `every` or where t is the version's new type, the float8e8m0
    scale's at 24, else none."""
    if every or t in NEW_TYPES.get(v, ()):
        return combos
    if v == 24:
        return [c for c in combos if c[0] == "float8e8m0"]
    return []


def _q_cases() -> list[QCase]:
    """Every (version, x type, target) with every granularity x saturate x zero point ("full",
    one (scale type, precision) pair rotating through them); at 23 every (x, scale, precision)
    triple for every target, and at 24/25/28 every triple for the version's new feature, with
    per-tensor and one rotating granularity each (the granularity code is shared and already
    covered by the full cases)."""
    cases: list[QCase] = []
    for v in Q_VERSIONS:
        types = _schema_types("QuantizeLinear", v)
        if v < 23:  # scale is float (10, 13) or x's type (19, 21)
            for x, t in itertools.product(types["x"], types["quantized"]):
                cases.append(QCase(v, x, x if v >= 19 else "float", None, t))
            continue
        precisions = [None, "float", "float16", "bfloat16"]
        for i, (x, t) in enumerate(itertools.product(types["x"], types["quantized"])):
            triples = list(itertools.product(types["scale"], precisions))
            core = triples[(i * 7 + v) % len(triples)]
            cases.append(QCase(v, x, core[0], core[1], t))
            matrix = _matrix(v, t, triples, every=v == 23)
            cases.extend(QCase(v, x, sc, p, t, full=False) for sc, p in matrix if (sc, p) != core)
    return cases


Q_CASES = _q_cases()


def _reference_division(x_dtype, scale_dtype) -> np.dtype:
    """The type the reference divides in without `precision`: NumPy's promotion."""
    return (np.ones(1, x_dtype) / np.ones(1, scale_dtype)).dtype


def quantize_divergences(case_target, x, q, zp_elem, ref_converts_int32_to) -> list:
    """(mask, reason) for every documented difference between qcore and the reference."""
    out = []
    t = case_target
    with np.errstate(all="ignore"):
        q64 = q.astype(np.float64)
    if t in oracle.INT_RANGES:
        out.append((np.isinf(q64) | (np.abs(q64) >= 2.0**31 - 2.0**17),
                    "integer overflow: the reference casts to int32 first and wraps to the "
                    "minimum; qcore saturates (docs/semantics.md: integer overflow)"))
        if zp_elem is not None:
            out.append((np.isnan(q64) & (zp_elem.astype(np.float64) < 0),
                        "NaN with a negative zero point: the reference's int32 minimum plus the "
                        "zero point wraps to the maximum; qcore gives the type's minimum "
                        "whatever the zero point (docs/semantics.md: NaN into an integer type)"))
    # float8 zero point: none. qcore ignores it in QuantizeLinear as the reference (and
    # onnxruntime) do, so every element is compared (docs/semantics.md: zero point with float targets).
    if t in oracle.NO_SPECIALS:
        out.append((np.isnan(q64), "NaN into float4/float6: the reference (ml_dtypes) gives a "
                    "sign-flipped zero; qcore gives +0 (docs/semantics.md)"))
        if zp_elem is not None and q.dtype != np.float32:
            with np.errstate(all="ignore"):
                in_f32 = q.astype(np.float32) + zp_elem.astype(np.float32)
                in_div = (q + zp_elem.astype(np.float32).astype(q.dtype)).astype(q.dtype)
            out.append((in_f32.astype(np.float64) != in_div.astype(np.float64),
                        "float4/6 zero point with a 16-bit division type: the reference adds "
                        "it in float32 (NumPy promotion); qcore adds in the division type "
                        "(docs/semantics.md: zero point with float targets)"))
    if ref_converts_int32_to == "bfloat16":
        wrong = bits(x.astype(ml_dtypes.bfloat16)) != bits(oracle.to_float(x, "bfloat16"))
        out.append((wrong, "int32 -> bfloat16: ml_dtypes rounds through float32 (double "
                    "rounding) in the reference; qcore rounds once"))
    return out


def check_quantize(version, x, scale, zp, *, gran: Gran, saturate, target, precision,
                   context, check_reference=True):
    attrs = _attrs("QuantizeLinear", version)
    axis = gran.axis
    block = gran.block
    output_dtype = target if zp is None and target != "uint8" else None
    kw = {}
    if axis is not None:
        kw["axis"] = axis
    if block:
        kw["block_size"] = block
    if "saturate" in attrs:
        kw["saturate"] = saturate
    if output_dtype:
        kw["output_dtype"] = output_dtype
    if precision:
        kw["precision"] = precision
    got = qcore.quantize_linear(x, scale, zp, opset=version, **kw)
    ax = 1 if axis is None else axis
    expected = oracle.quantize(x, scale, zp, axis=ax, block_size=block, saturate=saturate,
                               output_dtype=output_dtype, precision=precision)
    assert_bits_equal(got, expected, context=f"{context} vs oracle")
    if not check_reference:
        return got
    # The reference divides in NumPy's promoted type of (x, scale) unless `precision` is set.
    # Where that is not qcore's division type (int32 x: float64; mixed types at 23+), it is
    # run with precision = qcore's division type -- at opset 23 for the versions without the
    # attribute (the reference's versions share one implementation).
    div = oracle.division_type(scale.dtype, precision)
    ref_opset, ref_precision = version, precision
    if not precision and _reference_division(x.dtype, scale.dtype) != oracle.DTYPES[div]:
        ref_opset, ref_precision = max(version, 23), div
    ref_kw = {k: v for k, v in kw.items() if k != "precision"}
    if "saturate" in ref_kw:
        ref_kw["saturate"] = int(saturate)
    if output_dtype:
        ref_kw["output_dtype"] = int(qcore.get_format(output_dtype).onnx_id)
    if ref_precision:
        ref_kw["precision"] = int(qcore.get_format(ref_precision).onnx_id)
    ref = reference("QuantizeLinear", ref_opset, x, scale, zp, **ref_kw)
    q = oracle.quotient(x, scale, axis=ax, block_size=block, precision=precision)
    zp_elem = None if zp is None else oracle.expand(zp, x.shape, ax, block)
    int32_to = ref_precision if (x.dtype == np.int32 and ref_precision) else None
    agree = np.ones(x.shape, bool)
    for mask, _reason in quantize_divergences(target, x, q, zp_elem, int32_to):
        agree &= ~mask
    assert_bits_equal(got, ref, where=agree, context=f"{context} vs reference")
    return got


def _zp_kinds(version, target):
    # before 21 the output type comes from the zero point alone: no zero point means uint8
    kinds = ["none", "zero", "nonzero"]
    if version < 21 and target != "uint8":
        kinds.remove("none")
    return kinds


@pytest.mark.parametrize("case", Q_CASES, ids=[c.id for c in Q_CASES])
def test_quantize_matches_reference(case: QCase):
    float_target = case.target not in oracle.INT_RANGES
    has_saturate = case.version >= 19
    for gran in _grans(case.version, case.full, case.id):
        sats = [True, False] if has_saturate and (float_target or gran.name == "pt") else [True]
        for saturate, zkind in itertools.product(sats, _zp_kinds(case.version, case.target)):
            rng = _rng(case.id, gran.name, saturate, zkind)
            scale = make_scale(case.scale, gran.scale_shape, rng)
            zp = make_zero_point(case.target, zkind, gran.scale_shape, rng)
            ax = 1 if gran.axis is None else gran.axis
            div = oracle.division_type(scale.dtype, case.precision)
            s_elem = oracle.expand(oracle.to_float(scale, div), gran.x_shape, ax, gran.block)
            z_elem = (np.zeros(gran.x_shape) if zp is None
                      else oracle.expand(zp, gran.x_shape, ax, gran.block).astype(np.float64))
            x = make_x(case.x, case.target, s_elem, z_elem, rng)
            check_quantize(case.version, x, scale, zp, gran=gran, saturate=saturate,
                           target=case.target, precision=case.precision,
                           context=f"{case.id} {gran.name} saturate={saturate} zp={zkind}")


# ----------------------------------------------------------------------------------------------
# DequantizeLinear


@dataclass(frozen=True)
class DQCase:
    version: int
    x: str
    scale: str
    output: str | None
    full: bool = True

    @property
    def id(self) -> str:
        o = f"-out_{self.output}" if self.output else ""
        return f"DQ{self.version}-x_{self.x}-scale_{self.scale}{o}"


def _dq_cases() -> list[DQCase]:
    """Every (version, x type) with every granularity x zero point (scale type and output type
    rotating); every (scale type, output type) pair for every x type at 19, 21 and 23, and at
    24/25/28 for the version's new feature, with per-tensor and one rotating granularity."""
    cases = []
    for v in DQ_VERSIONS:
        types = _schema_types("DequantizeLinear", v)
        outputs = [None] + (list(types["output"]) if v >= 23 else [])
        combos = list(itertools.product(types["scale"], outputs))
        for i, x in enumerate(types["quantized"]):
            core = combos[(3 * i + v) % len(combos)]
            cases.append(DQCase(v, x, *core))
            matrix = _matrix(v, x, combos, every=v <= 23)
            cases.extend(DQCase(v, x, sc, o, full=False) for sc, o in matrix if (sc, o) != core)
    return cases


DQ_CASES = _dq_cases()


def make_quantized(x_type: str, shape, rng) -> np.ndarray:
    """Random bit patterns of the type, with its extremes present."""
    n = int(np.prod(shape, dtype=int))
    dt = oracle.DTYPES[x_type]
    if x_type == "int32":
        i32 = np.iinfo(np.int32)
        v = rng.integers(i32.min, i32.max, size=n, endpoint=True, dtype=np.int64)
        special = np.array([i32.min, i32.max, 0, 1, -1, 2**24 + 1, -(2**24) - 1, 2**30 + 2**22 + 1,
                            65519, 65520, 1 << 20])
        small = rng.integers(-1000, 1000, size=n)
        v = np.where(rng.random(n) < 0.5, v, small)
        v[: min(n, special.size)] = special[:n]
        return v.astype(np.int32).reshape(shape)
    if x_type in oracle.INT_RANGES:
        lo, hi = oracle.INT_RANGES[x_type]
        v = rng.integers(lo, hi, size=n, endpoint=True)
        v[: min(n, 2)] = (lo, hi)[:n]
        return v.astype(np.int64).astype(dt).reshape(shape)
    codes = rng.integers(0, 256, size=n).astype(np.uint8)
    bits = {1: 8}.get(dt.itemsize, 8)
    nbits = {"float4e2m1": 4, "float6e2m3": 6, "float6e3m2": 6}.get(x_type, bits)
    codes &= np.uint8((1 << nbits) - 1)
    return codes.view(dt).reshape(shape)


def make_dq_zero_point(x_type: str, kind: str, shape, rng):
    if kind == "none":
        return None
    dt = oracle.DTYPES[x_type]
    if kind == "zero":
        return np.zeros(shape, np.float32).astype(dt)
    if x_type == "int32":
        v = rng.choice(np.array([5, -7, 2**31 - 1, -(2**31), 1 << 24]), size=int(np.prod(shape)))
        return v.astype(np.int32).reshape(shape)
    return make_zero_point(x_type, "nonzero", shape, rng)


def dequantize_divergences(x_type: str, zp_elem) -> list:
    out = []
    if zp_elem is not None and x_type == "float4e2m1":
        out.append((zp_elem.astype(np.float64) != 0,
                    "float4 zero point in DequantizeLinear: the reference ignores it and "
                    "onnxruntime has no kernel; qcore subtracts it, as the formula says (docs/semantics.md: "
                    "zero point with float targets)"))
    if zp_elem is not None and x_type == "int32":
        out.append((np.ones(zp_elem.shape, bool),
                    "int32 with a zero point: the reference computes in float64 (NumPy "
                    "promotion of float32 - int32); the spec says int32 has no zero point, and "
                    "qcore subtracts exactly, rounds once to float32 and multiplies in float32"))
    return out


def check_dequantize(version, x, scale, zp, *, gran: Gran, output, context):
    kw = {}
    if gran.axis is not None:
        kw["axis"] = gran.axis
    if gran.block:
        kw["block_size"] = gran.block
    if output:
        kw["output_dtype"] = output
    ax = 1 if gran.axis is None else gran.axis
    x_type = oracle.name_of(x.dtype)
    if x_type in oracle.FLOAT8 and zp is not None and (zp.astype(np.float64) != 0).any():
        # A non-zero float8 zero point: the reference and onnxruntime refuse it, so does qcore
        # (docs/semantics.md: zero point with float targets). The reference ignores the ones whose uint8
        # cast is 0 (|zp| < 1), where onnxruntime still refuses; the oracle refuses them all.
        with pytest.raises(qcore.QuantizationError, match="x_zero_point"):
            qcore.dequantize_linear(x, scale, zp, opset=version, **kw)
        with pytest.raises(ValueError):
            oracle.dequantize(x, scale, zp, axis=ax, block_size=gran.block, output_dtype=output)
        return None
    got = qcore.dequantize_linear(x, scale, zp, opset=version, **kw)
    expected = oracle.dequantize(x, scale, zp, axis=ax, block_size=gran.block,
                                 output_dtype=output)
    assert_bits_equal(got, expected, context=f"{context} vs oracle")
    ref_kw = dict(kw)
    if output:
        ref_kw["output_dtype"] = int(qcore.get_format(output).onnx_id)
    elif scale.dtype == oracle.E8M0:
        # The reference would return float8e8m0 (x_scale's type) -- no output type at all;
        # qcore gives float32 (docs/semantics.md), which is the reference with output_dtype=FLOAT.
        ref_kw["output_dtype"] = 1
    # onnx's reference has no DequantizeLinear before 19; 10 and 13 are 19 restricted to
    # int8/uint8/int32 and float32 scales, so the version-19 implementation is their reference.
    ref = reference("DequantizeLinear", max(version, 19), x, scale, zp, **ref_kw)
    zp_elem = None if zp is None else oracle.expand(zp, x.shape, ax, gran.block)
    agree = np.ones(x.shape, bool)
    for mask, _reason in dequantize_divergences(x_type, zp_elem):
        agree &= ~mask
    assert_bits_equal(got, ref, where=agree,
                      context=f"{context} vs reference")
    return got


@pytest.mark.parametrize("case", DQ_CASES, ids=[c.id for c in DQ_CASES])
def test_dequantize_matches_reference(case: DQCase):
    for gran in _grans(case.version, case.full, case.id):
        for zkind in ("none", "zero", "nonzero"):
            rng = _rng(case.id, gran.name, zkind)
            x = make_quantized(case.x, gran.x_shape, rng)
            scale = make_scale(case.scale, gran.scale_shape, rng)
            zp = make_dq_zero_point(case.x, zkind, gran.scale_shape, rng)
            check_dequantize(case.version, x, scale, zp, gran=gran, output=case.output,
                             context=f"{case.id} {gran.name} zp={zkind}")


# ----------------------------------------------------------------------------------------------
# Regressions


@pytest.mark.parametrize("gran", [g for g in GRANULARITIES if g.axis is not None
                                  and g.scale_shape != (1,)], ids=lambda g: g.name)
def test_no_zero_point_means_zero_for_every_scale(gran):
    """Regression: without a zero point qcore passed the kernels one zero while they index zero
    points like scales (one per channel/block), so channels past the first read stray memory."""
    rng = _rng("no-zp", gran.name)
    scale = make_scale("float", gran.scale_shape, rng)
    x = rng.standard_normal(gran.x_shape).astype(np.float32) * 3
    kw = {"axis": gran.axis, "block_size": gran.block}
    for _ in range(3):  # stray memory differs between calls; all must be right
        expected = oracle.quantize(x, scale, None, axis=gran.axis, block_size=gran.block,
                                   output_dtype="int8")
        got = qcore.quantize_linear(x, scale, output_dtype="int8", **kw)
        assert_bits_equal(got, expected, context=f"quantize {gran.name}")
        assert_bits_equal(got, reference("QuantizeLinear", 21, x, scale, axis=gran.axis,
                                         block_size=gran.block or None, output_dtype=3),
                          context=f"quantize {gran.name} vs reference")
        xq = make_quantized("int8", gran.x_shape, rng)
        expected = oracle.dequantize(xq, scale, None, axis=gran.axis, block_size=gran.block)
        got = qcore.dequantize_linear(xq, scale, **kw)
        assert_bits_equal(got, expected, context=f"dequantize {gran.name}")


# ----------------------------------------------------------------------------------------------
# DequantizeLinear over every bit pattern


def _first_version(op: str, role: str, type_name: str) -> int:
    return next(v for v in Q_VERSIONS if type_name in _schema_types(op, v)[role])


SMALL_TYPES = ("int2", "uint2", "int4", "uint4", "int8", "uint8", "float8e4m3fn",
               "float8e4m3fnuz", "float8e5m2", "float8e5m2fnuz", "float6e2m3", "float6e3m2",
               "float4e2m1", "int16", "uint16")
EXHAUSTIVE = [(t, v, s) for t in SMALL_TYPES
              for v in sorted({max(_first_version("DequantizeLinear", "quantized", t), 19), 28})
              for s in ("float", "float16", "bfloat16")]


def _all_codes(name: str) -> np.ndarray:
    dt = oracle.DTYPES[name]
    if name in ("int16", "uint16"):
        lo, hi = oracle.INT_RANGES[name]
        return np.arange(lo, hi + 1).astype(dt)
    if name in oracle.INT_RANGES:
        lo, hi = oracle.INT_RANGES[name]
        return np.arange(lo, hi + 1).astype(np.int64).astype(dt)
    nbits = {"float4e2m1": 4, "float6e2m3": 6, "float6e3m2": 6}.get(name, 8)
    return np.arange(1 << nbits, dtype=np.uint8).view(dt)


@pytest.mark.parametrize("x_type,version,scale_type", EXHAUSTIVE,
                         ids=[f"DQ{v}-{t}-scale_{s}" for t, v, s in EXHAUSTIVE])
def test_dequantize_every_bit_pattern(x_type, version, scale_type):
    """Every code of the type, four per-axis scales (1, an inexact 0.1, a tiny one that makes
    float16 subnormals and underflow, a large one that overflows float16), every output type
    the version has, without and with a non-zero zero point."""
    codes = _all_codes(x_type)
    x = np.tile(codes, (4, 1))
    scale = np.array([1.0, 0.1, 2.0**-20, 3.0e3], np.float32).astype(oracle.DTYPES[scale_type])
    outputs = [None] + (["float", "float16", "bfloat16"] if version >= 23 else [])
    rng = _rng("exhaustive", x_type, version, scale_type)
    zps = [None, make_zero_point(x_type, "nonzero", (4,), rng)]
    gran = Gran("axis0", x.shape, (4,), 0)
    for output, zp in itertools.product(outputs, zps):
        check_dequantize(version, x, scale, zp, gran=gran, output=output,
                         context=f"every code of {x_type} DQ{version} out={output} zp={zp}")


# ----------------------------------------------------------------------------------------------
# DynamicQuantizeLinear-11


def _dynamic_inputs():
    rng = _rng("dynamic")
    yield "normal", rng.standard_normal((6, 50)).astype(np.float32)
    yield "positive", rng.uniform(0.5, 3, (300,)).astype(np.float32)
    yield "negative", -rng.uniform(0.5, 3, (7, 7, 7)).astype(np.float32)
    yield "zeros", np.zeros((5, 4), np.float32)
    yield "neg-zeros", np.full((9,), -0.0, np.float32)
    yield "one", np.array([2.5], np.float32)
    yield "scalar", np.array(-1.25, np.float32)
    yield "tiny", (rng.standard_normal(200) * 1e-38).astype(np.float32)  # subnormals
    yield "huge", (rng.standard_normal(200) * 1e37).astype(np.float32)
    # x = (k + 0.5) * scale: ties of x/scale for a range of exactly 255 (scale = 1)
    yield "ties", np.concatenate([[0.0, 255.0], np.arange(0, 255) + 0.5]).astype(np.float32)
    yield "ties-shifted", np.concatenate([[-100.0, 155.0], np.arange(-100, 155) + 0.5]
                                         ).astype(np.float32)
    yield "zp-tie", np.array([-0.5, 254.5, 3.0], np.float32)  # -min/scale = 0.5: a tie
    yield "large", (rng.standard_normal(1 << 17) * 3 - 1).astype(np.float32)  # parallel min/max
    for k in range(5):
        n = int(rng.integers(1, 400))
        yield f"random{k}", (rng.standard_normal(n) * 10.0 ** rng.uniform(-3, 3) +
                             rng.uniform(-5, 5)).astype(np.float32)


DYNAMIC = list(_dynamic_inputs())


@pytest.mark.parametrize("opset", [11, 19, 28])
@pytest.mark.parametrize("name,x", DYNAMIC, ids=[n for n, _ in DYNAMIC])
def test_dynamic_quantize_matches_reference(name, x, opset):
    got = qcore.dynamic_quantize_linear(x, opset=opset)
    expected = oracle.dynamic_quantize(x)
    ref = reference("DynamicQuantizeLinear", opset, x)
    for g, e, r, what in zip(got, expected, ref, ("y", "y_scale", "y_zero_point")):
        assert_bits_equal(g, e, context=f"{name} {what} vs oracle")
        assert_bits_equal(g, r, context=f"{name} {what} vs reference")


def test_dynamic_quantize_empty():
    # The reference cannot reduce an empty tensor; qcore treats it like all zeros (docs/semantics.md).
    got = qcore.dynamic_quantize_linear(np.zeros((0, 3), np.float32))
    assert got[0].shape == (0, 3) and got[0].dtype == np.uint8
    assert_bits_equal(got[1], np.array(np.float32(1) / np.float32(255), np.float32))
    assert_bits_equal(got[2], np.array(0, np.uint8))


# ----------------------------------------------------------------------------------------------
# Large tensors: the parallel kernel path (>= 2**17 elements, several chunks per thread)

LARGE_SHAPE = (64, 2050)  # 131200 elements; 2050 = 64 blocks of 32 + a short block of 2
LARGE_GRANS = {
    "pt": Gran("pt", LARGE_SHAPE, (), None),
    "axis0": Gran("axis0", LARGE_SHAPE, (64,), 0),
    "axis1": Gran("axis1", LARGE_SHAPE, (2050,), 1),
    "block1-32": Gran("block1-32", LARGE_SHAPE, (64, 65), 1, 32, 21),
    "block0-5": Gran("block0-5", LARGE_SHAPE, (13, 2050), 0, 5, 21),  # 64 = 12 x 5 + 4
}
LARGE_Q = [
    ("float", "float", None, "int8", "pt", True, "nonzero"),
    ("float", "float", None, "uint8", "axis0", True, "none"),
    ("float", "float", None, "int4", "block1-32", True, "nonzero"),
    ("float16", "float16", None, "float8e4m3fn", "axis1", False, "none"),
    ("bfloat16", "float", "bfloat16", "uint4", "block0-5", True, "zero"),
    ("float", "float16", None, "float4e2m1", "block1-32", True, "nonzero"),
    ("int32", "float", None, "int16", "axis1", True, "nonzero"),
    ("float", "float8e8m0", None, "float8e5m2", "block1-32", False, "zero"),
    ("float", "float", None, "float6e3m2", "pt", True, "none"),
    ("float16", "float", "float16", "int2", "axis0", True, "nonzero"),
]


@pytest.mark.parametrize("x_type,scale_type,precision,target,gran,saturate,zkind", LARGE_Q,
                         ids=[f"{c[0]}-{c[1]}-{c[2]}-{c[3]}-{c[4]}" for c in LARGE_Q])
def test_quantize_large_tensor(x_type, scale_type, precision, target, gran, saturate, zkind):
    g = LARGE_GRANS[gran]
    rng = _rng("large", x_type, target, gran)
    scale = make_scale(scale_type, g.scale_shape, rng)
    zp = make_zero_point(target, zkind, g.scale_shape, rng)
    ax = 1 if g.axis is None else g.axis
    div = oracle.division_type(scale.dtype, precision)
    s_elem = oracle.expand(oracle.to_float(scale, div), g.x_shape, ax, g.block)
    z_elem = (np.zeros(g.x_shape) if zp is None
              else oracle.expand(zp, g.x_shape, ax, g.block).astype(np.float64))
    x = make_x(x_type, target, s_elem, z_elem, rng)
    assert x.size >= 1 << 17
    check_quantize(28, x, scale, zp, gran=g, saturate=saturate, target=target,
                   precision=precision, context=f"large {x_type}->{target} {gran}")


LARGE_DQ = [
    ("int8", "float", None, "axis1", "nonzero"),
    ("uint8", "float16", None, "pt", "nonzero"),
    ("int4", "bfloat16", "float", "block1-32", "nonzero"),
    ("float8e4m3fn", "float", "float16", "block0-5", "none"),
    ("uint16", "float8e8m0", "bfloat16", "axis0", "zero"),
    ("int32", "float", None, "axis1", "none"),
    ("float4e2m1", "float16", None, "block1-32", "nonzero"),
]


@pytest.mark.parametrize("x_type,scale_type,output,gran,zkind", LARGE_DQ,
                         ids=[f"{c[0]}-{c[1]}-{c[2]}-{c[3]}" for c in LARGE_DQ])
def test_dequantize_large_tensor(x_type, scale_type, output, gran, zkind):
    g = LARGE_GRANS[gran]
    rng = _rng("large-dq", x_type, gran)
    x = make_quantized(x_type, g.x_shape, rng)
    scale = make_scale(scale_type, g.scale_shape, rng)
    zp = make_dq_zero_point(x_type, zkind, g.scale_shape, rng)
    check_dequantize(28, x, scale, zp, gran=g, output=output,
                     context=f"large {x_type} {gran}")


# ----------------------------------------------------------------------------------------------
# Every documented difference, one concrete input each: qcore's value is computed by hand from
# the spec and docs/semantics.md; the reference's (onnx 1.23) is pinned so that the masks above are known
# to hide real differences, not agreements.

E4 = ml_dtypes.float8_e4m3fn
F4 = ml_dtypes.float4_e2m1fn
BF = ml_dtypes.bfloat16
DOCUMENTED = [
    # (id, op, opset, inputs, attributes, qcore's value, the reference's value)
    ("int-overflow-saturates", "QuantizeLinear", 21,
     (np.array([1e10, np.inf, -np.inf], np.float32), np.float32(1), np.int8(0)), {},
     np.array([127, 127, -128], np.int8), np.array([-128, -128, -128], np.int8)),
    ("nan-with-negative-zp-is-minimum", "QuantizeLinear", 21,
     (np.array([np.nan], np.float32), np.float32(1), np.int8(-1)), {},
     np.array([-128], np.int8), np.array([127], np.int8)),
    ("nan-into-float4-is-plus-zero", "QuantizeLinear", 23,
     (np.array([np.nan], np.float32), np.float32(1)), {"output_dtype": 23},
     np.array([0.0], F4), np.array([-0.0], F4)),
    # 0.5 + 2**-11 + 2 = 2.5 in float16 (the division type): a tie, to even = 2
    ("float4-zp-added-in-division-type", "QuantizeLinear", 23,
     (np.array([0.50048828125], np.float16), np.float16(1), np.array(2, F4)), {},
     np.array([2.0], F4), np.array([3.0], F4)),
    # 2**24 + 2**16 + 1 rounds once to bfloat16 as 2**24 + 2**17; / 2**10 = 16512
    ("int32-to-bfloat16-rounds-once", "QuantizeLinear", 23,
     (np.array([2**24 + 2**16 + 1], np.int32), np.array(2**10, BF), np.int16(0)),
     {"precision": 16}, np.array([16512], np.int16), np.array([16384], np.int16)),
    # 25296897 = 96.5 * 2**18 + 1 is a float32 tie, rounds to 96.5 * 2**18; / 2**18 -> 96
    ("int32-x-divides-in-float32", "QuantizeLinear", 13,
     (np.array([25296897], np.int32), np.float32(2**18), np.uint8(0)), {},
     np.array([96], np.uint8), np.array([97], np.uint8)),
    # float16 scale: x rounded to float16 (2.5), a tie to even = 2
    ("mixed-types-divide-in-scale-type", "QuantizeLinear", 23,
     (np.array([2.5 + 2**-12], np.float32), np.float16(1), np.uint8(0)), {},
     np.array([2], np.uint8), np.array([3], np.uint8)),
    ("int32-zero-point-exact-difference", "DequantizeLinear", 21,
     (np.array([2**24 + 1], np.int32), np.float32(1), np.int32(1)), {},
     np.array([2**24], np.float32), np.array([2**24 - 1], np.float32)),
    ("e8m0-scale-gives-float32", "DequantizeLinear", 24,
     (np.array([3], np.int8), np.array(2, ml_dtypes.float8_e8m0fnu)), {},
     np.array([6.0], np.float32), np.array([8.0], ml_dtypes.float8_e8m0fnu)),
    ("float4-zero-point-subtracted", "DequantizeLinear", 23,
     (np.array([3.0], F4), np.float32(1), np.array(1.0, F4)), {},
     np.array([2.0], np.float32), np.array([3.0], np.float32)),
]


@pytest.mark.parametrize("op,opset,inputs,attrs,ours,theirs", [d[1:] for d in DOCUMENTED],
                         ids=[d[0] for d in DOCUMENTED])
def test_documented_difference(op, opset, inputs, attrs, ours, theirs):
    kw = dict(attrs)
    if "output_dtype" in kw:
        kw["output_dtype"] = qcore.get_format(kw["output_dtype"]).name
    if "precision" in kw:
        kw["precision"] = qcore.get_format(kw["precision"]).name
    fn = qcore.quantize_linear if op == "QuantizeLinear" else qcore.dequantize_linear
    assert_bits_equal(fn(*inputs, opset=opset, **kw), ours, context="qcore")
    if not onnx.__version__.startswith("1.23."):
        pytest.skip(f"the reference's values are pinned for onnx 1.23, not {onnx.__version__}")
    if theirs is ValueError:
        with pytest.raises(ValueError):
            reference(op, max(opset, 19), *inputs, **attrs)
    else:
        assert_bits_equal(reference(op, max(opset, 19) if op == "DequantizeLinear" else opset,
                                    *inputs, **attrs), theirs, context="reference")


# ----------------------------------------------------------------------------------------------
# Where the onnx reference and onnxruntime agree, qcore agrees with both (docs/semantics.md):
# the float8 zero point, run through all three.


def _onnxruntime(op: str, opset: int, *inputs, **attributes):
    """Run one node on onnxruntime's CPU provider (graph optimisations off)."""
    ort = pytest.importorskip("onnxruntime")
    from onnx import helper

    from qcore.onnx_models import feeds, node_model

    out_type = np.asarray(inputs[2]).dtype if op == "QuantizeLinear" else np.float32
    model = node_model(op, opset, list(inputs), attributes, output_types=[out_type])
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(model.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    fed = {n: ort.OrtValue.ortvalue_from_numpy_with_onnx_type(  # float8 as an OrtValue
        a.view(np.uint8), helper.np_dtype_to_tensor_dtype(a.dtype)) if a.dtype == E4 else a
        for n, a in feeds(op, *inputs).items()}
    (y,) = session.run(None, fed)
    return np.asarray(y).view(E4) if op == "QuantizeLinear" else y


F8_X = np.array([-0.0, 0.0, 1.0, -3.0, 448.0, 500.0], np.float32)


@pytest.mark.parametrize("zp", [0.0, -0.0, 1.0, -2.0, 0.5])
def test_float8_zero_point_quantize_is_ignored_as_both_implementations_do(zp):
    z = np.array(zp, np.float32).astype(E4)
    got = qcore.quantize_linear(F8_X, np.float32(1), z, opset=21)
    assert_bits_equal(got, reference("QuantizeLinear", 21, F8_X, np.float32(1), z),
                      context="reference")
    assert_bits_equal(got, _onnxruntime("QuantizeLinear", 21, F8_X, np.float32(1), z),
                      context="onnxruntime")
    assert_bits_equal(got, np.clip(F8_X, -448, 448).astype(E4),
                      context="the zero point changes nothing (saturate=1)")


def test_float8_zero_point_dequantize_nonzero_is_refused_as_both_implementations_do():
    x = np.array([1.0, -2.0, 0.0], E4)
    z = np.array(1.0, E4)
    with pytest.raises(qcore.QuantizationError, match="DequantizeLinear-21: x_zero_point"):
        qcore.dequantize_linear(x, np.float32(1), z, opset=21)
    with pytest.raises(ValueError):
        reference("DequantizeLinear", 21, x, np.float32(1), z)
    with pytest.raises(Exception, match="(?i)zero"):
        _onnxruntime("DequantizeLinear", 21, x, np.float32(1), z)
    # a zero zero point is accepted by all three, and changes nothing
    z0 = np.array(0.0, E4)
    got = qcore.dequantize_linear(x, np.float32(1), z0, opset=21)
    assert_bits_equal(got, reference("DequantizeLinear", 21, x, np.float32(1), z0))
    assert_bits_equal(got, _onnxruntime("DequantizeLinear", 21, x, np.float32(1), z0))
