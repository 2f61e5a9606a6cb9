"""Scalar float32 <-> uint32 bit casts for the numba CPU kernels (an LLVM bitcast, free)."""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.extending import intrinsic


@intrinsic
def f32_as_u32(typingctx, value):
    """The IEEE bits of a float32 as uint32."""
    if value != types.float32:
        return None
    sig = types.uint32(types.float32)

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.IntType(32))

    return sig, codegen


@intrinsic
def u32_as_f32(typingctx, value):
    """The float32 whose IEEE bits are the low 32 bits of an integer."""
    if not isinstance(value, types.Integer):
        return None
    sig = types.float32(value)

    def codegen(context, builder, signature, args):
        v = args[0]
        if value.bitwidth > 32:
            v = builder.trunc(v, ir.IntType(32))
        elif value.bitwidth < 32:
            v = builder.zext(v, ir.IntType(32))
        return builder.bitcast(v, ir.FloatType())

    return sig, codegen


@intrinsic
def fetch_add(typingctx, counter, value):
    """Atomically add `value` to counter[0] (a writable int64 array) and return the old value:
    the work counter threads draw chunks from (dynamic scheduling)."""
    if not (isinstance(counter, types.Array) and counter.dtype == types.int64
            and counter.mutable and isinstance(value, types.Integer)):
        return None
    sig = types.int64(counter, value)

    def codegen(context, builder, signature, args):
        ary = context.make_array(signature.args[0])(context, builder, args[0])
        v = context.cast(builder, args[1], signature.args[1], types.int64)
        return builder.atomic_rmw("add", ary.data, v, "monotonic")

    return sig, codegen


def _target_has_f16c() -> bool:
    """Whether numba compiles for a CPU with F16C (float <-> half in one vector instruction):
    the features numba itself passes to LLVM (NUMBA_CPU_FEATURES, else the host's)."""
    try:
        from numba.core import codegen, config

        features = config.CPU_FEATURES
        if features is None:
            features = codegen.get_host_cpu_features()
        return "+f16c" in str(features).split(",")
    except Exception:  # noqa: BLE001 - unknown target: the portable integer rule
        return False


#: True where f32_via_f16 compiles to vcvtps2ph/vcvtph2ps; without F16C LLVM would call a
#: compiler-rt routine that numba's JIT does not provide, so callers keep an integer rule.
HAS_F16C = _target_has_f16c()


@intrinsic
def f32_via_f16(typingctx, value):
    """A float32 rounded to float16 (IEEE, half to even; overflow to Inf) and back, as float32.
    NaN payloads follow the hardware: callers that need a canonical NaN select it."""
    if value != types.float32:
        return None
    sig = types.float32(types.float32)

    def codegen(context, builder, signature, args):
        return builder.fpext(builder.fptrunc(args[0], ir.HalfType()), ir.FloatType())

    return sig, codegen
