"""numba CPU kernels: which kernel family runs a call, on how many threads, and the host API
(:func:`quantize`, :func:`dequantize`, :func:`minmax`) that :mod:`qcore.ops` calls.

The kernels stream x once in chunks, parallel over chunks (:mod:`qcore.kernels.drivers`); each
chunk is cut into runs by the layout's walk (:mod:`qcore.kernels.walk`) and each run converted by
a segment function with plain loops that LLVM vectorises on AVX2 and AVX-512 alike:

- quantize, float32 x divided in float32, to an integer target: per tensor and with a scale per
  block, row or element (:mod:`qcore.kernels.segments_int`);
- quantize to a small float target, and anything else (16-bit or int32 x, another precision)
  (:mod:`qcore.kernels.segments_float`);
- dequantize: 8/16-bit integers to float32, decode tables to float32, and everything else
  (:mod:`qcore.kernels.segments_dequantize`).

Every element rule lives in :mod:`qcore.kernels.scalar`. A family is compiled only when a call
needs it (a cold start compiles one family, not every path). Parameters are the NamedTuples of
:mod:`qcore.kernels.params` (int64 fields), so one compiled kernel per (family, input dtype,
output dtype) serves every format and granularity; array arguments are passed read-only.
"""

from __future__ import annotations

from enum import Enum

import numpy as np

from ..concurrency import numba_threads, parallel_call, parallel_workers
from ..config import CHUNK, PARALLEL_THRESHOLD
from . import bound, segments_dequantize, segments_float, segments_int
from .bits import FLOAT_CODES
from .drivers import MINMAX, Family, family
from .jit import JIT
from .params import DXKind, NanStyle, PKind, QuantizeParams, TKind, XKind
from .pool import new_output, readonly, release_outputs
from .walk import Run, per_element_scales, single_run_block

__all__ = ["CHUNK", "PARALLEL_THRESHOLD", "FAMILIES", "FamilyName", "dequantize", "minmax",
           "new_output", "quantize", "release_outputs"]

_readonly = readonly  # the name the warm-up and the metrics reductions import


class FamilyName(str, Enum):
    """The kernel families (keys of :data:`FAMILIES`); the values read as they print."""

    QUANTIZE_INT = "quantize int"
    QUANTIZE_INT_BLOCKS = "quantize int blocks"
    QUANTIZE_FLOAT = "quantize float"
    QUANTIZE_FLOAT_ZP = "quantize float zp"
    QUANTIZE_FLOAT_FNUZ = "quantize float fnuz"
    QUANTIZE_FLOAT_FNUZ_ZP = "quantize float fnuz zp"
    QUANTIZE_GENERIC = "quantize generic"
    DEQUANTIZE_NUMERIC = "dequantize numeric"
    DEQUANTIZE_TABLE = "dequantize table"
    DEQUANTIZE_GENERIC = "dequantize generic"
    MINMAX = "minmax"

    def __str__(self) -> str:
        return self.value

    __format__ = str.__format__


#: The small-float quantize families by (target without -0, zero point added).
FLOAT_CASES = {(False, False): FamilyName.QUANTIZE_FLOAT,
               (False, True): FamilyName.QUANTIZE_FLOAT_ZP,
               (True, False): FamilyName.QUANTIZE_FLOAT_FNUZ,
               (True, True): FamilyName.QUANTIZE_FLOAT_FNUZ_ZP}


def float_segment(fnuz: bool, add: bool, suffix: str = "", **constants):
    """seg_float compiled for one small-float case (its flags bound, see
    :func:`qcore.kernels.bound`); `constants` bind more (the tests bind EXPLICIT_VECTORS off)."""
    name = FLOAT_CASES[fnuz, add].value.replace(" ", "_").replace("quantize_", "_seg_")
    return bound(segments_float.seg_float, name + suffix, JIT, _FNUZ=fnuz, _ADD=add,
                 _FLOAT_CODES=FLOAT_CODES[fnuz, add], **constants)


def _families() -> dict[FamilyName, Family]:
    q = {FamilyName.QUANTIZE_INT: family(segments_int.seg_int_tensor, "quantize_int"),
         FamilyName.QUANTIZE_INT_BLOCKS: family(segments_int.seg_int, "quantize_int_blocks",
                                                segments_int.SCRATCH, per_block=True)}
    for (fnuz, add), name in FLOAT_CASES.items():
        q[name] = family(float_segment(fnuz, add), name.value.replace(" ", "_"))
    return {**q,
            FamilyName.DEQUANTIZE_NUMERIC: family(segments_dequantize.seg_numeric,
                                                  "dequantize_numeric", reads_table=True),
            FamilyName.DEQUANTIZE_TABLE: family(segments_dequantize.seg_table,
                                                "dequantize_table", reads_table=True),
            FamilyName.MINMAX: MINMAX}


#: Every kernel as (parallel, serial, ...), by family (for dispatch, the warm-up and tests);
#: the two generic families are in :data:`GENERIC`.
FAMILIES: dict[FamilyName, Family] = _families()


def _generic_quantize(x: XKind, p: PKind, t: TKind) -> Family:
    """seg_generic compiled for one (x kind, precision, target family) (see
    :func:`qcore.kernels.bound`): a 16-bit x is exact in its own type, so it loads unrounded
    (float32) where the precision is that type."""
    half = x in (XKind.F16, XKind.BF16)
    load = PKind.F32 if half and int(p) == int(x) else p
    name = f"generic_{x.name}_{p.name}_{t.name}".lower()
    segment = bound(segments_float.seg_generic, "_seg_" + name, JIT, _XKIND=x, _PKIND=p,
                    _LOAD_PKIND=load, _INT_TARGET=t == TKind.INT, _HALF_X=half,
                    _INT32_X=x == XKind.I32)
    return family(segment, "quantize_" + name, CHUNK)


def _generic_dequantize(x: DXKind, o: PKind) -> Family:
    """segments_dequantize.seg_generic compiled for one (x kind, output kind)."""
    name = f"generic_{x.name}_{o.name}".lower()
    segment = bound(segments_dequantize.seg_generic, "_seg_dequantize_" + name, JIT,
                    _DXKIND=x, _OKIND=o)
    return family(segment, "dequantize_" + name, reads_table=True)


#: The generic families, one compiled copy per combination of kinds (a first call compiles
#: the loops of its own combination only): (QUANTIZE_GENERIC, x kind, precision, target
#: family) and (DEQUANTIZE_GENERIC, x kind, output kind), every combination the specialised
#: families above do not take.
GENERIC: dict[tuple[FamilyName, int, ...], Family] = {
    **{(FamilyName.QUANTIZE_GENERIC, x, p, t): _generic_quantize(x, p, t)
       for x in XKind for p in PKind for t in TKind if (x, p) != (XKind.F32, PKind.F32)},
    **{(FamilyName.DEQUANTIZE_GENERIC, x, o): _generic_dequantize(x, o)
       for x in DXKind for o in PKind if (o != PKind.F32 or x == DXKind.I32)}}


def kernels_for(name: FamilyName, params) -> Family:
    """The kernels of family `name` for these parameters (a generic family's copy for their
    kinds)."""
    if name == FamilyName.QUANTIZE_GENERIC:
        return GENERIC[name, params.xkind, params.pkind, params.tkind]
    if name == FamilyName.DEQUANTIZE_GENERIC:
        return GENERIC[name, params.xkind, params.okind]
    return FAMILIES[name]


#: The quantize kernels' table argument (the drivers are shared with dequantize, whose decode
#: tables it carries): small floats are encoded arithmetically, so quantize has no table.
_NO_TABLE = np.zeros(1, np.uint8)
_NO_TABLE.flags.writeable = False

#: Families whose speed is the memory's rather than the core's, on a per-tensor layout: when
#: other processes keep cores busy these calls run on the free cores alone, since a worker on a
#: taken core makes the join wait a time slice. Everything else (small-float encoding, table
#: decoding, 16-bit conversions, the per-block walk) scales with cores and keeps every thread.
#: Measured with ``python -m qcore.bench --busy``.
BANDWIDTH_BOUND = frozenset({FamilyName.QUANTIZE_INT, FamilyName.DEQUANTIZE_NUMERIC,
                             FamilyName.MINMAX})

#: Whether a call below the parallel threshold whose elements map to their scales as one run
#: of equal blocks (:func:`~qcore.kernels.walk.single_run_block`: per tensor, and the common
#: blocked and per-axis layouts) runs its family's segment alone, in that one run (the integer
#: blocks family: where its scratch holds a zero point for each block): chunks add nothing to
#: one serial stream, and a cold start then compiles no driver. False: the drivers always (the
#: tests compare the two).
DIRECT = True


def _launch(kernels: Family, args: tuple, n: int, bandwidth_bound: bool) -> tuple:
    """Run `kernels` (a family's) for n elements: serial below the parallel threshold,
    else parallel on numba's threads (when `bandwidth_bound`: on the cores other processes
    leave free; one means the serial kernel); below the threshold by the segment alone where
    x is one run (see DIRECT). Returns the kernel's result (the quantize and dequantize
    drivers: how many unusable scales they read) and each worker's (chunks done, unusable
    scales read) (a direct run counts as one chunk)."""
    if DIRECT and kernels.segment is not None and n < PARALLEL_THRESHOLD:
        x, s, z, y, lp, params, table = args
        block = single_run_block(lp, n)
        if block and (not kernels.per_block or -(-n // block) + 2 <= kernels.buffer):
            work = table if kernels.reads_table else np.empty(kernels.buffer, np.float32)
            bad = kernels.segment(Run(x, y, s, z, block, 0), params, work) if n else 0
            return bad, np.array([[1 if n else 0, bad]], np.int64)
    workers = threads = 1
    if n >= PARALLEL_THRESHOLD:
        threads = numba_threads()
        workers = parallel_workers(threads) if bandwidth_bound else threads
    tally = np.zeros((workers, 2), np.int64)
    if workers == 1:
        return kernels.serial(*args, tally), tally
    with parallel_call(workers, threads):
        return kernels.parallel(*args, tally), tally


def _bandwidth_bound(name: FamilyName, lp) -> bool:
    return name in BANDWIDTH_BOUND and lp.uniform == 1


def quantize_family(qp: QuantizeParams, lp) -> FamilyName:
    """Which kernel family converts with these parameters on layout `lp`: the integer family
    (per tensor, or with a scale per block, row or element), a small-float one (by target
    without -0 and whether a zero point is added), or the generic one."""
    if qp.xkind == XKind.F32 and qp.pkind == PKind.F32:
        if qp.tkind == TKind.INT:
            return (FamilyName.QUANTIZE_INT if lp.uniform == 1
                    else FamilyName.QUANTIZE_INT_BLOCKS)
        return FLOAT_CASES[qp.nan_style == NanStyle.NEG_ZERO, qp.has_zp == 1]
    return FamilyName.QUANTIZE_GENERIC


def dequantize_family(dp, okind_is_f32: bool) -> FamilyName:
    """Which kernel family dequantizes: 8/16-bit integers to float32, sub-byte and small-float
    codes to float32 (decode table), or the generic one (int32, 16-bit outputs)."""
    if okind_is_f32 and dp.xkind == DXKind.NUMERIC:
        return FamilyName.DEQUANTIZE_NUMERIC
    if okind_is_f32 and dp.xkind == DXKind.TABLE:
        return FamilyName.DEQUANTIZE_TABLE
    return FamilyName.DEQUANTIZE_GENERIC


def checks_values(qp: QuantizeParams, lp) -> bool:
    """Whether the quantize kernel for `qp` on layout `lp` checks its scales itself
    (:func:`quantize` returns how many were not positive and finite): the integer families on
    layouts with a scale per block or per row, which read each scale once anyway. Layouts with
    a scale per element of a run (per-axis on the last axis, blocked on an earlier axis), whose
    runs read each scale many times, and other families take scales checked before the call."""
    return reads_codes(qp, lp) and not per_element_scales(lp)


def reads_codes(qp: QuantizeParams, lp) -> bool:
    """Whether the quantize kernel for `qp` on layout `lp` reads its zero points as the target's
    codes, viewed as int8 or int16 (see :func:`zero_point_view`), rather than as float32: the
    integer families, except on layouts with a scale per element of a run whose zero points as
    float32 take at most 1/16 of the output (per-axis on the last axis: one row of them;
    blocked on an earlier axis with blocks of 64 or more for an 8-bit target). Reading codes
    spares a float32 copy of the zero points per call; reading float32 spares the decode, which
    is the cheaper of the two where the copy is that small."""
    if quantize_family(qp, lp) not in (FamilyName.QUANTIZE_INT, FamilyName.QUANTIZE_INT_BLOCKS):
        return False
    if not per_element_scales(lp):
        return True
    output_bytes = lp.pre * lp.dim * lp.post * (1 if qp.mask < 256 else 2)
    return 4 * lp.scale_pre * lp.scale_blocks * lp.scale_post * 16 > output_bytes


def zero_point_view(codes: np.ndarray) -> np.ndarray:
    """Integer zero points (a target's codes, any shape) flat, as the int8 or int16 the integer
    family reads (no copy where they are contiguous)."""
    return codes.reshape(-1).view(np.int8 if codes.dtype.itemsize == 1 else np.int16)


def quantize(x, s, z, y, lp, qp) -> int:
    """Run the quantize kernel: x flat input, s float32 scales, z zero points (float32, or the
    target's codes where :func:`reads_codes`), y codes. Returns how many scales the kernel
    found not positive and finite (always 0 where it does not check them)."""
    name = quantize_family(qp, lp)
    args = (readonly(x), readonly(s), readonly(z), y, lp, qp, _NO_TABLE)
    bad, _ = _launch(kernels_for(name, qp), args, x.size, _bandwidth_bound(name, lp))
    return bad


def dequantize(x, s, z, y, lp, dp, tab) -> None:
    """Run the dequantize kernel: x flat codes, y float32 or 16-bit float bits."""
    name = dequantize_family(dp, dp.okind == PKind.F32)
    args = (readonly(x), readonly(s), readonly(z), y, lp, dp, readonly(tab))
    _launch(kernels_for(name, dp), args, x.size, _bandwidth_bound(name, lp))


def minmax(x, xkind) -> tuple[float, float, int]:
    """(min, max, count of NaN/Inf) of a flat float32 array (DynamicQuantizeLinear-11 takes only
    float32; `xkind` keeps the signature of the CUDA backend, which also reads 16-bit floats)."""
    nchunks = (x.size + CHUNK - 1) // CHUNK
    out = np.empty((nchunks, 3), np.float32)
    _launch(FAMILIES[FamilyName.MINMAX], (readonly(x), out), x.size, True)
    return float(out[:, 0].min()), float(out[:, 1].max()), int(out[:, 2].sum())
