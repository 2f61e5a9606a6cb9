"""LLVM-level helpers for the numba CPU kernels: bit casts (free), an atomic counter, float16
conversions, the vector width the kernels ask for, the features of the target numba compiles
for, and (on x86) the integer and small-float code steps written out as LLVM vector code."""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils
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


def _target_features() -> set[str]:
    """The CPU features numba compiles for, as "+name": NUMBA_CPU_FEATURES when set (empty with
    NUMBA_CPU_NAME: the named CPU's own, see :func:`named_cpu_features`), else the host's (also
    with NUMBA_CPU_NAME alone: numba then tunes for the name but keeps the host's features).
    Empty where they cannot be read."""
    try:
        from numba.core import codegen, config

        features = config.CPU_FEATURES
        if features == "" and config.CPU_NAME:
            return named_cpu_features(config.CPU_NAME)
        if features is None:
            features = codegen.get_host_cpu_features()
        return set(str(features).split(","))
    except Exception:  # noqa: BLE001 - unknown target: the portable rules
        return set()


#: Compiled for the probe of named_cpu_features: a float16 -> float32 vector conversion (one
#: vcvtph2ps with F16C), a 512-bit addition (zmm registers with AVX-512) and a 256-bit integer
#: addition (one vpaddd on ymm registers with AVX2).
_PROBE = """
define void @probe(ptr %h, ptr %f, ptr %v, ptr %i) {
  %e = load <8 x i32>, ptr %i
  %g = add <8 x i32> %e, <i32 3, i32 3, i32 3, i32 3, i32 3, i32 3, i32 3, i32 3>
  store <8 x i32> %g, ptr %i
  %a = load <8 x half>, ptr %h
  %b = fpext <8 x half> %a to <8 x float>
  store <8 x float> %b, ptr %f
  %c = load <16 x float>, ptr %v
  %d = fadd <16 x float> %c, %c
  store <16 x float> %d, ptr %v
  ret void
}
"""


def named_cpu_features(cpu_name: str) -> set[str]:
    """The features among those the kernels and the benchmark test ("+f16c", "+avx2",
    "+avx512f") that LLVM gives the CPU `cpu_name` by itself (NUMBA_CPU_FEATURES=""), read off
    a tiny probe compiled for it."""
    import llvmlite.binding as llvm

    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    machine = llvm.Target.from_default_triple().create_target_machine(cpu=cpu_name,
                                                                      features="")
    asm = machine.emit_assembly(llvm.parse_assembly(_PROBE))
    found = {"+f16c": "vcvtph2ps" in asm, "+avx512f": "zmm" in asm,
             "+avx2": any("vpaddd" in line and "ymm" in line for line in asm.splitlines())}
    return {name for name, present in found.items() if present}


#: True where f32_via_f16 compiles to vcvtps2ph/vcvtph2ps; without F16C LLVM would call a
#: compiler-rt routine that numba's JIT does not provide, so callers keep an integer rule.
HAS_F16C = "+f16c" in _target_features()


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


@intrinsic
def f16_bits_as_f32(typingctx, value):
    """float16 bits (a uint16) as float32, exactly (vcvtph2ps where HAS_F16C; callers keep an
    integer rule elsewhere). A signalling NaN comes back quiet, its payload kept."""
    if not (isinstance(value, types.Integer) and value.bitwidth == 16):
        return None
    sig = types.float32(value)

    def codegen(context, builder, signature, args):
        return builder.fpext(builder.bitcast(args[0], ir.HalfType()), ir.FloatType())

    return sig, codegen


@intrinsic
def rint_to_int32(typingctx, value):
    """A float32 rounded half to even and converted to int32 in one step (LLVM's lrint: one
    cvtps2dq per vector on x86, where np.rint then a conversion take two instructions, three
    micro-ops on 512-bit vectors). Only for values already clamped into int32's range: outside
    it the result is unspecified. Rounds in the current rounding mode, which numba (and so
    every kernel's np.rint) leaves at the default, half to even."""
    if value != types.float32:
        return None
    sig = types.int32(types.float32)

    def codegen(context, builder, signature, args):
        fnty = ir.FunctionType(ir.IntType(32), [ir.FloatType()])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.lrint.i32.f32")
        return builder.call(fn, args)

    return sig, codegen


#: The function attribute wide_vectors() sets: LLVM reads it when it vectorises the function.
_WIDE = '"prefer-vector-width"="512"'


@intrinsic
def wide_vectors(typingctx):
    """Ask LLVM to vectorise the calling function with 512-bit vectors where the target has them.

    LLVM's tuning for Intel's AVX-512 cores prefers 256-bit vectors (older cores lowered their
    clock for 512-bit work); our streaming loops then issue twice the instructions and stay
    short of the memory's speed (onnxruntime's own AVX-512 kernels use 512 bits too). On a target
    without AVX-512 the attribute changes nothing. Call it once at the top of a function whose
    loops should be wide (every function: inlining does not carry it to the caller)."""
    sig = types.void()

    def codegen(context, builder, signature, args):
        # llvmlite's attribute set accepts only keyword attributes; a string attribute is
        # written as is into the function's definition
        set.add(builder.function.attributes, _WIDE)
        return context.get_dummy_value()

    return sig, codegen


def _target_is_x86() -> bool:
    """Whether numba compiles for x86-64, where LLVM lowers a vector lrint to cvtps2dq (one
    instruction per vector); elsewhere it may become a call per lane."""
    import platform

    return platform.machine().lower() in ("x86_64", "amd64")


#: True where int_codes_32 / int_codes_64 compile to straight vector code (see their doc).
EXPLICIT_VECTORS = _target_is_x86()


def _splat(builder, value, vec: ir.VectorType):
    """`value` in every lane of a vector of type `vec`."""
    lane0 = ir.Constant(ir.IntType(32), 0)
    one = builder.insert_element(ir.Constant(vec, ir.Undefined), value, lane0)
    return builder.shuffle_vector(one, ir.Constant(vec, ir.Undefined),
                                  ir.Constant(ir.VectorType(ir.IntType(32), vec.count),
                                              [0] * vec.count))


def _quotients(context, builder, xs_ty, xs_v, index, scale_v, width: int):
    """xs[index:index + width] / scale as one float32 vector (xs contiguous float32)."""
    fvec = ir.VectorType(ir.FloatType(), width)
    xdata = context.make_array(xs_ty)(context, builder, xs_v).data
    xp = builder.bitcast(builder.gep(xdata, [index]), fvec.as_pointer())
    return builder.fdiv(builder.load(xp, align=4), _splat(builder, scale_v, fvec))


def _store_codes(context, builder, ys_ty, ys_v, index, codes, split: int = 0):
    """ys[index:index + lanes] = an int32 vector of codes, truncated to ys's item type: as one
    truncation and one store, or as one truncation and store per `split` lanes (see
    :func:`int_store_split`)."""
    item = ir.IntType(ys_ty.dtype.bitwidth)
    ydata = context.make_array(ys_ty)(context, builder, ys_v).data
    lanes = codes.type.count
    step = split if split and split < lanes else lanes
    for k in range(0, lanes, step):
        part = codes
        if step < lanes:
            part = builder.shuffle_vector(codes, ir.Constant(codes.type, ir.Undefined),
                                          ir.Constant(ir.VectorType(ir.IntType(32), step),
                                                      list(range(k, k + step))))
        ovec = ir.VectorType(item, step)
        if item.width < 32:
            part = builder.trunc(part, ovec)
        at = builder.add(index, ir.Constant(index.type, k)) if k else index
        yp = builder.bitcast(builder.gep(ydata, [at]), ovec.as_pointer())
        builder.store(part, yp, align=item.width // 8)


def _int_codes_intrinsic(width: int, split: int = 0):
    """An intrinsic that writes `width` integer codes at once: ys[j + k] =
    (lrint(clamp(xs[j + k] / scale, a, b)) + zero) & mask for k < width, as one vector
    division, two compare-and-selects, one lrint, an add, an AND, a truncation to ys's item
    and one store (one per `split` lanes, see :func:`int_store_split`), with the same IEEE
    operations per lane as the scalar rule (so the same bits). `a`, `b` are the clamp bounds
    (lo - zero point, hi - zero point); NaN fails the first test and becomes `a`. xs
    (float32) and ys (integers) are contiguous 1-D arrays and j + width <= their sizes (not
    checked)."""

    def typer(typingctx, xs, j, ys, scale, a, b, zero, mask):
        if not (isinstance(xs, types.Array) and xs.dtype == types.float32 and xs.ndim == 1
                and xs.layout == "C" and isinstance(ys, types.Array) and ys.ndim == 1
                and ys.layout == "C" and isinstance(ys.dtype, types.Integer)
                and ys.dtype.bitwidth <= 32 and isinstance(j, types.Integer)):
            return None
        sig = types.void(xs, j, ys, types.float32, types.float32, types.float32, types.int32,
                         types.int32)

        def codegen(context, builder, signature, args):
            xs_ty, j_ty, ys_ty = signature.args[:3]
            xs_v, j_v, ys_v, scale_v, a_v, b_v, zero_v, mask_v = args
            index = context.cast(builder, j_v, j_ty, types.int64)
            fvec = ir.VectorType(ir.FloatType(), width)
            ivec = ir.VectorType(ir.IntType(32), width)
            q = _quotients(context, builder, xs_ty, xs_v, index, scale_v, width)
            lo = _splat(builder, a_v, fvec)
            hi = _splat(builder, b_v, fvec)
            q = builder.select(builder.fcmp_ordered(">", q, lo), q, lo)
            q = builder.select(builder.fcmp_ordered("<", q, hi), q, hi)
            lrint = cgutils.get_or_insert_function(
                builder.module, ir.FunctionType(ivec, [fvec]),
                f"llvm.lrint.v{width}i32.v{width}f32")
            codes = builder.add(builder.call(lrint, [q]), _splat(builder, zero_v, ivec))
            codes = builder.and_(codes, _splat(builder, mask_v, ivec))
            _store_codes(context, builder, ys_ty, ys_v, index, codes, split)
            return context.get_dummy_value()

        return sig, codegen

    typer.__name__ = f"int_codes_{width}" + (f"_split{split}" if split else "")
    return intrinsic(typer)


def _target_cpu_name() -> str:
    """The LLVM CPU name numba compiles for: NUMBA_CPU_NAME when set, else the host's."""
    try:
        from numba.core import config

        if config.CPU_NAME:
            return str(config.CPU_NAME)
        import llvmlite.binding as llvm

        return str(llvm.get_host_cpu_name())
    except Exception:  # noqa: BLE001 - unknown target: the generic choice
        return ""


def _zen_generation(cpu_name: str) -> int:
    """N of an AMD "znverN" LLVM CPU name; 0 for any other name."""
    digits = cpu_name[5:] if cpu_name.startswith("znver") else ""
    return int(digits) if digits.isdigit() else 0


def int_store_split(cpu_name: str, features: set[str]) -> int:
    """Lanes per store of the integer code steps on target `cpu_name` with `features` (the
    "+name" set of :func:`_target_features`); 0: the step's codes as one truncation and one
    store.

    16 on AMD's AVX-512 cores (Zen 4 and later): LLVM narrows each 16 lanes with one vpmovdb,
    and a store of a whole step's bytes then rebuilds 64-byte vectors with three inserts per
    64 codes, which its Zen 4/5 model issues on the pipe the float divisions occupy (FP1; 6
    cycles per 16-lane vdivps): the step is bound by that pipe, 114 cycles per 256 codes
    against 96 with a store per 16 lanes (llvm-mca, -mcpu=znver5). onnxruntime's AVX-512
    kernel stores 16 codes at a time too. 0 elsewhere: AVX2's pack chains store whole
    vectors (a store per 16 lanes spills there), and LLVM's Intel models time the AVX-512 step
    the same either way."""
    return 16 if "+avx512f" in features and _zen_generation(cpu_name) >= 4 else 0


#: Lanes per store of the integer code steps on the target numba compiles for.
INT_SPLIT = int_store_split(_target_cpu_name(), _target_features())

int_codes_32 = _int_codes_intrinsic(32, INT_SPLIT)
int_codes_64 = _int_codes_intrinsic(64, INT_SPLIT)
int_codes_128 = _int_codes_intrinsic(128, INT_SPLIT)

#: Lanes of the integer kernels' widest step: more independent loads and divisions in flight
#: per iteration, as many as the registers hold without spilling (AVX-512: 32 registers of 16
#: lanes; AVX2: 16 of 8, where 256 lanes spill).
INT_STEP = 256 if "+avx512f" in _target_features() else 128
int_codes_step = _int_codes_intrinsic(INT_STEP, INT_SPLIT)


def _float_codes_intrinsic(width: int, fnuz: bool, add: bool):
    """An intrinsic that writes `width` small-float codes at once: for k < width, ys[j + k] =
    encode_with(bits of xs[j + k] / scale (+ zero, when `add`), consts, `fnuz`) (see
    :func:`qcore.kernels.scalar.encode_with`, whose every step it writes out as one vector
    operation: the same IEEE division, addition and 32-bit integer steps per lane, so the same
    bits). `consts` is encode_consts' EncodeConsts (ten int32); xs (float32) and ys (8-bit codes) are
    contiguous 1-D arrays and j + width <= their sizes (not checked)."""

    def typer(typingctx, xs, j, ys, scale, zero, consts):
        if not (isinstance(xs, types.Array) and xs.dtype == types.float32 and xs.ndim == 1
                and xs.layout == "C" and isinstance(ys, types.Array) and ys.ndim == 1
                and ys.layout == "C" and isinstance(ys.dtype, types.Integer)
                and ys.dtype.bitwidth == 8 and isinstance(j, types.Integer)
                and isinstance(consts, (types.UniTuple, types.NamedUniTuple))
                and consts.count == 10 and consts.dtype == types.int32):
            return None
        sig = types.void(xs, j, ys, types.float32, types.float32, consts)

        def codegen(context, builder, signature, args):
            xs_ty, j_ty, ys_ty = signature.args[:3]
            xs_v, j_v, ys_v, scale_v, zero_v, consts_v = args
            index = context.cast(builder, j_v, j_ty, types.int64)
            fvec = ir.VectorType(ir.FloatType(), width)
            ivec = ir.VectorType(ir.IntType(32), width)

            def const(value):
                return ir.Constant(ivec, [value] * width)

            # EncodeConsts' fields, in their order
            (shift, min_normal, offset, over, cap, nan_code, nan_sign, neg_zero, sbit,
             nan_bound) = (_splat(builder, builder.extract_value(consts_v, i), ivec)
                           for i in range(10))
            q = _quotients(context, builder, xs_ty, xs_v, index, scale_v, width)
            if add:
                q = builder.fadd(q, _splat(builder, zero_v, fvec))
            b = builder.bitcast(q, ivec)
            shift = builder.and_(shift, const(31))
            a = builder.and_(b, const(0x7FFFFFFF))
            smask = builder.ashr(b, const(31))
            ac = builder.select(builder.icmp_signed("<", a, over), a, over)
            e = builder.and_(ac, const(0x7F800000))
            e = builder.select(builder.icmp_signed(">", e, min_normal), e, min_normal)
            m = builder.add(e, builder.shl(shift, const(23)))
            k = builder.bitcast(builder.fadd(builder.bitcast(ac, fvec), builder.bitcast(m, fvec)),
                                ivec)
            code = builder.sub(builder.add(builder.sub(k, e), builder.ashr(e, shift)), offset)
            code = builder.select(builder.icmp_signed("<", code, cap), code, cap)
            r = builder.or_(code, builder.and_(sbit, smask))
            if fnuz:
                r = builder.select(builder.icmp_signed("==", r, neg_zero), const(0), r)
            nan = builder.or_(nan_code, builder.and_(nan_sign, r))
            r = builder.select(builder.icmp_signed(">", a, nan_bound), nan, r)
            _store_codes(context, builder, ys_ty, ys_v, index, r)
            return context.get_dummy_value()

        return sig, codegen

    typer.__name__ = f"float_codes_{width}{'_fnuz' if fnuz else ''}{'_zp' if add else ''}"
    return intrinsic(typer)


#: float_codes(fnuz, add): the intrinsic of float_codes_intrinsic for one small-float case.
FLOAT_CODES = {(fnuz, add): _float_codes_intrinsic(32, fnuz, add)
               for fnuz in (False, True) for add in (False, True)}
