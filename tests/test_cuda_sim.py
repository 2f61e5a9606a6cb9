"""The CUDA backend in the normal test run.

- tests/cuda_sim_cases.py (bit-exact against the CPU backend) runs in a subprocess under numba's
  CUDA simulator: numba reads NUMBA_ENABLE_CUDASIM when it is imported, so the variable is set
  for that process only; and again without the simulator when this machine has a usable GPU.
- Every kernel specialisation is typed and lowered for the real CUDA target (LLVM IR; no GPU, no
  CUDA toolkit needed): the simulator runs kernels as Python and would not notice code a GPU
  cannot compile.
- Without a GPU, ``backend="cuda"`` raises QuantizationError saying why.
"""

from __future__ import annotations

import re

import ml_dtypes
import numpy as np
import pytest
from conftest import run_pytest

import qcore

CASES = "tests/cuda_sim_cases.py"


def test_cuda_kernels_match_cpu_under_the_simulator():
    run_pytest(CASES, simulator=True)


def _real_gpu() -> bool:
    """A usable GPU (under NUMBA_ENABLE_CUDASIM=1 cuda_available() means the simulator)."""
    import numba

    return not numba.config.ENABLE_CUDASIM and qcore.cuda_available()


@pytest.mark.skipif(not _real_gpu(), reason="no usable GPU here (or this process simulates one)")
def test_cuda_kernels_match_cpu_on_the_gpu():
    run_pytest(CASES, simulator=False)


def test_backend_cuda_without_gpu_raises_quantization_error():
    from qcore.kernels import cuda as ck

    if qcore.cuda_available():
        pytest.skip("a GPU is usable here")
    reason = ck.unavailable_reason()
    assert reason and "\n" not in reason
    x = np.linspace(-2, 2, 12, dtype=np.float32).reshape(3, 4)
    calls = [
        lambda: qcore.quantize_linear(x, np.float32(0.1), backend="cuda"),
        lambda: qcore.quantize_linear(x, np.float32(0.1), output_dtype="float8e4m3fn",
                                      backend="cuda"),
        lambda: qcore.dequantize_linear(np.arange(12, dtype=np.int8), np.float32(0.1),
                                        backend="cuda"),
        lambda: qcore.dynamic_quantize_linear(x, backend="cuda"),
        lambda: ck.to_device(x.astype(ml_dtypes.bfloat16)),
    ]
    for call in calls:
        with pytest.raises(qcore.QuantizationError, match="backend='cuda' is not available") as e:
            call()
        assert reason in str(e.value) and "backend='cpu'" in str(e.value)
    assert qcore.cuda_available() is False
    # the CPU backend is untouched
    assert qcore.quantize_linear(x, np.float32(0.1), backend="cpu").dtype == np.uint8


def _gpu_signatures():
    from numba import typeof
    from numba import types as t

    from qcore.kernels import cuda_kernels as kk
    from qcore.kernels.params import DequantizeParams, LayoutParams, QuantizeParams

    lp = typeof(LayoutParams(*[0] * len(LayoutParams._fields)))
    qp = typeof(QuantizeParams(*[0] * len(QuantizeParams._fields)))
    dp = typeof(DequantizeParams(*[0] * len(DequantizeParams._fields)))

    def arr(ty, nd=1):
        return t.Array(ty, nd, "C")

    f32, f64, i64 = t.float32, t.float64, t.int64
    sigs = []  # every x type and every y type at least once (the rest is the same code)
    for xt, yt in ((t.float32, t.uint8), (t.uint16, t.int8), (t.int32, t.uint16),
                   (t.float32, t.int16)):
        sigs.append((kk.quantize_kernel, (arr(xt), arr(f32), arr(f32), arr(yt), lp, qp)))
    for xt, yt in ((t.int8, t.float32), (t.uint8, t.uint16), (t.int16, t.float32),
                   (t.uint16, t.uint16), (t.int32, t.float32)):
        sigs.append((kk.dequantize_kernel, (arr(xt), arr(f32), arr(f64), arr(yt), lp, dp,
                                            arr(f64))))
    from qcore.kernels import cuda_minmax

    for xt in (t.float32, t.uint16):
        sigs.append((cuda_minmax.minmax_kernel, (arr(xt), i64, arr(t.int32), arr(i64))))
    sigs.append((cuda_minmax.minmax_init_kernel, (arr(t.int32), arr(i64))))
    sigs.append((kk.pack_kernel, (arr(t.uint8), i64, arr(t.uint8))))
    sigs.append((kk.unpack_kernel, (arr(t.uint8), i64, arr(t.uint8))))
    sigs.append((kk.copy_kernel, (arr(f32), arr(f32))))
    return sigs


def _culprits(exc: BaseException) -> str:
    """The chain of Python functions numba was compiling for the device when `exc` arose."""
    chain = []
    tb = exc.__traceback__
    while tb is not None:
        frame = tb.tb_frame
        if frame.f_code.co_name == "compile_device":
            fn = getattr(frame.f_locals.get("self"), "py_func", None)
            if fn is not None:
                name = f"{fn.__module__}.{fn.__qualname__}"
                if not chain or chain[-1] != name:
                    chain.append(name)
        tb = tb.tb_next
    return " -> ".join(chain) or "(the kernel itself)"


def test_cuda_kernels_compile_for_the_gpu_target(monkeypatch):
    """Type and lower every kernel for the CUDA target, as a GPU launch would (minus PTX)."""
    try:
        import numba
        import numba.cuda.dispatcher as cuda_dispatcher
        from numba import types
        from numba.cuda.compiler import compile_cuda
    except Exception as exc:  # pragma: no cover - numba without its CUDA target
        pytest.skip(f"numba's CUDA target is not importable: {exc}")
    if numba.config.ENABLE_CUDASIM:
        pytest.skip("this process runs the simulator")

    class Device:  # device functions ask the current GPU for its compute capability
        compute_capability = (8, 0)

    monkeypatch.setattr(cuda_dispatcher, "get_current_device", lambda: Device())
    failures = []
    for kernel, sig in _gpu_signatures():
        try:
            compile_cuda(kernel.py_func, types.void, sig, debug=False, lineinfo=False,
                         cc=(8, 0))
        except Exception as exc:
            lines = [ln for ln in str(exc).splitlines() if ln.strip()][:12]
            failures.append(f"{kernel.py_func.__name__}{tuple(str(a) for a in sig)}: "
                            f"{type(exc).__name__}: " + "\n    ".join(lines)
                            + f"\n    while compiling for the device: {_culprits(exc)}")
    assert not failures, (
        f"{len(failures)} CUDA kernel specialisation(s) do not compile for a GPU (numba "
        f"{numba.__version__}). Note: numba's CUDA target cannot compile the builtins min()/max() "
        f"(vararg overloads) in device code, so code shared with the GPU (kernels/scalar.py and "
        f"the element functions of kernels/scalar.py) must compare explicitly.\n"
        + "\n".join(failures[:4])
    )


# ---------------------------------------------------------------------------------------------
# PTX of the specialised kernels (qcore.kernels.cuda_quantize, cuda_dequantize, cuda_minmax):
# wide accesses, no division in loops
# ---------------------------------------------------------------------------------------------

_INT_DIVISION = re.compile(r"^\s*(?:@%p\d+\s+)?(div|rem)\.[su](16|32|64)\b")


def _fast_signatures():
    """(name, kernel, signature, expected instructions) of every specialised kernel."""
    from numba import typeof
    from numba import types as t

    from qcore.kernels import cuda as ck
    from qcore.kernels import cuda_dequantize, cuda_device, cuda_minmax, cuda_quantize
    from qcore.kernels.params import DequantizeParams, LayoutParams, QuantizeParams

    qp = typeof(QuantizeParams(*[0] * len(QuantizeParams._fields)))
    dp = typeof(DequantizeParams(*[0] * len(DequantizeParams._fields)))
    rp = typeof(ck.row_params(LayoutParams(4, 64, 1, 32, 4, 2, 1, 0), 1))
    fp = typeof((32, 1.0 / 32, 1))  # the flat kernels' (q, 1/q, zstep)

    def rows_args(layout):
        return () if layout == "per-tensor" else (fp,) if layout == "flat-vec" else (rp,)

    def arr(ty):
        return t.Array(ty, 1, "C")

    out = []
    for (layout, family, width), kernel in cuda_quantize.QUANTIZE_KERNELS.items():
        y = t.uint8 if width == 1 else t.uint16
        sig = (arr(t.float32), arr(y), arr(t.float32), arr(t.float32), qp)
        sig += rows_args(layout)
        want = ["ld.global.v4.f32", "st.global.u32" if width == 1 else "st.global.u64"]
        if family == "fp8-cvt":
            want += ["cvt.rn.satfinite.e4m3x2.f32", "cvt.rn.satfinite.e5m2x2.f32"]
        out.append((f"quantize {layout} {family} {8 * width}-bit", kernel, sig, want))
    for (layout, okind), kernel in cuda_dequantize.DEQUANTIZE_KERNELS.items():
        y = t.float32 if okind == "f32" else t.uint16
        sig = (arr(t.int8), arr(y), arr(t.float32), arr(t.float64), dp, t.int64,
               arr(t.float64)) + rows_args(layout)
        want = ["ld.global.u32", "st.global.v4.f32" if okind == "f32" else "st.global.u64"]
        out.append((f"dequantize {layout} -> {okind}", kernel, sig, want))
    out.append(("minmax", cuda_minmax.minmax_kernel,
                (arr(t.float32), t.int64, arr(t.int32), arr(t.int64)),
                ["ld.global.v4.f32", "shfl.sync.down", "atom.global.min.s32",
                 "atom.global.max.s32", "atom.global.add.u64"]))
    out.append(("spin", cuda_device.spin_kernel, (t.int64,), ["%globaltimer"]))
    return out


def _loop_ranges(lines: list[str]) -> list[tuple[int, int]]:
    """(first, last) line of every loop in PTX: a branch back to a label above it."""
    labels = {ln.strip()[:-1]: i for i, ln in enumerate(lines) if re.match(r"^\$\w+:$",
                                                                          ln.strip())}
    loops = []
    for i, ln in enumerate(lines):
        m = re.search(r"\bbra(?:\.uni)?\s+(\$\w+);", ln)
        if m and labels.get(m.group(1), i + 1) <= i:
            loops.append((labels[m.group(1)], i))
    return loops


def test_specialised_kernels_ptx(monkeypatch):
    """Each specialised kernel compiled to PTX for sm_90 (NVVM, no GPU needed): 16-byte loads
    of x, packed 32/64-bit or 16-byte stores, the float8 cvt where chosen, and no integer
    division or remainder inside any loop (a loop's trip count may be divided once before it).
    """
    try:
        import numba
        import numba.cuda.dispatcher as cuda_dispatcher
        from numba import cuda
    except Exception as exc:  # pragma: no cover - numba without its CUDA target
        pytest.skip(f"numba's CUDA target is not importable: {exc}")
    if numba.config.ENABLE_CUDASIM:
        pytest.skip("this process runs the simulator")

    class Device:
        compute_capability = (9, 0)

    monkeypatch.setattr(cuda_dispatcher, "get_current_device", lambda: Device())

    def probe(a):
        a[0] = 1

    try:
        cuda.compile_ptx(probe, "void(int32[::1])", cc=(9, 0))
    except Exception as exc:
        pytest.skip(f"PTX compilation is unavailable here (numba.cuda.compile_ptx needs the "
                    f"CUDA toolkit's NVVM): {type(exc).__name__}: {str(exc)[:200]}")
    problems = []
    for name, kernel, sig, want in _fast_signatures():
        ptx, _ = cuda.compile_ptx(kernel.py_func, sig, cc=(9, 0))
        lines = ptx.splitlines()
        for instr in want:
            if instr not in ptx:
                problems.append(f"{name}: no {instr}")
        loops = _loop_ranges(lines)
        if not loops:
            problems.append(f"{name}: no loop found in the PTX")
        for first, last in loops:
            for ln in lines[first:last + 1]:
                if _INT_DIVISION.match(ln):
                    problems.append(f"{name}: integer division in a loop: {ln.strip()}")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("shape", [(3, 8, 12), (5, 7), (2, 3, 4, 5), (1, 42), (16,)])
def test_row_view_is_the_layout_index_map(shape):
    """The rows kernels' view of a layout (qcore.kernels.cuda.row_params) gives every element
    the scale qcore.layout's index map gives it, for per-axis and blocked on every axis."""
    from qcore.kernels import cuda as ck
    from qcore.kernels.params import LayoutParams
    from qcore.layout import BLOCKED, PER_AXIS, Layout

    n = int(np.prod(shape))
    flat = np.arange(n)
    for axis in range(len(shape)):
        grans = [(PER_AXIS, 0)] + [(BLOCKED, b) for b in (1, 2, 3, 4, shape[axis])]
        for gran, block in grans:
            layout = Layout.from_granularity(shape, gran, axis, block)
            rows, length, d1, _, b, _, sb, sp, pmul, bc, _, _, _ = ck.row_params(
                LayoutParams.from_layout(layout), 1)
            assert rows * length == n
            r, c = np.divmod(flat, length)
            p, d = np.divmod(r, d1)
            got = (p * pmul * sb + d // b) * sp + c // bc
            np.testing.assert_array_equal(got, layout.scale_index(flat),
                                          err_msg=f"{shape} axis {axis} {gran} {block}")


def test_div_exact_is_floor_division():
    """The kernels' division without a division instruction: (n // d, n % d) for n < 2**50."""
    from qcore.kernels.cuda_device import div_exact

    fn = getattr(div_exact, "py_func", div_exact)
    rng = np.random.default_rng(0)
    ds = [1, 2, 3, 4, 7, 32, 128, 1000, 4096, 16383, 2**20 + 1, 2**31 - 1]
    ns = [0, 1, 2**24 - 1, 2**24 + 1, 2**31, 2**40 - 1, 2**50 - 1]
    ns += rng.integers(0, 2**50, 200).tolist()
    for d in ds:
        for n in ns + [k * d + j for k in (1, 2**20, 2**40 // d) for j in (-1, 0, 1)]:
            if 0 <= n < 2**50:
                assert tuple(int(v) for v in fn(n, d, 1.0 / d)) == divmod(n, d), (n, d)


def test_gpu_launch_keeps_one_overload_per_argument_types(monkeypatch):
    """qcore.kernels.cuda.launch on a GPU: the dispatcher's typing runs once per kernel and
    argument types, then the compiled overload is launched with 3-D grid and block."""
    from qcore.kernels import cuda as ck
    from qcore.kernels.params import QuantizeParams

    class Dev:
        def __init__(self, dtype, n):
            self.dtype, self.strides, self.ndim = np.dtype(dtype), (np.dtype(dtype).itemsize,), 1
            self.size = n

    class Overload:
        def __init__(self):
            self.calls = []

        def launch(self, args, grid, block, stream, shared):
            self.calls.append((args, grid, block, stream, shared))

        def max_cooperative_grid_blocks(self, threads):
            return 10 if threads == 64 else 1000

    class Kernel:
        def __init__(self):
            self.typed, self.compiled = 0, []

        def typeof_pyval(self, a):
            self.typed += 1
            return getattr(a, "dtype", type(a))

        def compile(self, argtypes):
            self.compiled.append(argtypes)
            return Overload()

        def __getitem__(self, conf):  # pragma: no cover - the dispatcher path
            raise AssertionError("the dispatcher was called")

    monkeypatch.setattr(ck, "SIMULATOR", False)
    monkeypatch.setattr(ck, "_OVERLOADS", {})
    monkeypatch.setattr(ck, "_launch_stream", lambda: "default stream")
    k = Kernel()
    qp = QuantizeParams(*range(14))
    x, y = Dev(np.float32, 64), Dev(np.uint8, 64)
    for _ in range(3):
        ck.launch(k, 7, 32, x, y, qp, (1, 2.0), 5)
    ck.launch(k, (3, 4), 64, x, Dev(np.uint16, 64), qp, (1, 2.0), 5)
    assert len(k.compiled) == 2 and k.typed == 10
    first, second = (ck._OVERLOADS[key] for key in ck._OVERLOADS)
    assert [c[1:] for c in first.calls] == [((7, 1, 1), (32, 1, 1), "default stream", 0)] * 3
    assert second.calls[0][1:3] == ((3, 3, 1), (64, 1, 1))  # capped at 10 resident blocks
    assert first.calls[0][0] == (x, y, qp, (1, 2.0), 5)
