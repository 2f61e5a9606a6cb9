"""Shared helpers: the onnx reference evaluator on cached one-node models, bit comparison."""

from __future__ import annotations

import os
from functools import lru_cache

import numpy as np
import pytest

#: The app's background warm-up process compiles every kernel for minutes: not beside the tests
#: (the AppTest runs and the browser tests' servers inherit this); tests/test_warm.py tests it.
os.environ.setdefault("QCORE_APP_WARMUP", "0")

#: Test workers with ``-n auto`` (pyproject's addopts): one per core, at most this many (each
#: worker compiles the numba kernels it needs until numba's disk cache holds them).
MAX_WORKERS = 4


def pytest_xdist_auto_num_workers(config) -> int:
    return max(1, min(MAX_WORKERS, len(os.sched_getaffinity(0))))


@lru_cache(maxsize=4096)
def _evaluator(op: str, opset: int, input_types: tuple[int, ...], attributes: tuple):
    from onnx.reference import ReferenceEvaluator

    from qcore.onnx_models import node_model

    return ReferenceEvaluator(node_model(op, opset, input_types, dict(attributes)))


def reference(op: str, opset: int, *inputs, **attributes):
    """Run the onnx reference evaluator on a one-node `op` model at `opset`.

    `inputs` are arrays (a trailing None is dropped); attributes set to None are left out, so
    the schema's defaults apply. Returns the single output, or the tuple of outputs for
    DynamicQuantizeLinear.
    """
    from qcore.onnx_models import feeds, onnx_type

    arrays = [np.asarray(a) for a in inputs if a is not None]
    types = tuple(onnx_type(a) for a in arrays)
    attrs = tuple(sorted((k, int(v)) for k, v in attributes.items() if v is not None))
    out = _evaluator(op, opset, types, attrs).run(None, feeds(op, *arrays))
    return tuple(out) if op == "DynamicQuantizeLinear" else out[0]


def bits(a) -> np.ndarray:
    """The stored bits of an array as unsigned integers (sub-byte types: one byte each)."""
    a = np.ascontiguousarray(np.asarray(a))
    return a.view({1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[a.dtype.itemsize])


def assert_bits_equal(got, expected, *, where=None, context=""):
    """Bit-for-bit equality of dtype, shape and every element (or those selected by `where`).

    NaNs are compared by their bits too (sign and payload): qcore matches the reference there.
    """
    got = np.asarray(got)
    expected = np.asarray(expected)
    assert got.dtype == expected.dtype, f"{context}: dtype {got.dtype} != {expected.dtype}"
    assert got.shape == expected.shape, f"{context}: shape {got.shape} != {expected.shape}"
    gb, eb = bits(got).reshape(-1), bits(expected).reshape(-1)
    diff = gb != eb
    if where is not None:
        diff &= np.broadcast_to(where, got.shape).reshape(-1)
    if diff.any():
        idx = np.flatnonzero(diff)
        rows = [
            f"  [{np.unravel_index(i, got.shape) if got.ndim else ()}] "
            f"got {got.reshape(-1)[i]!r} (0x{int(gb[i]):x}) "
            f"expected {expected.reshape(-1)[i]!r} (0x{int(eb[i]):x})"
            for i in idx[:8]
        ]
        raise AssertionError(f"{context}: {idx.size} of {diff.size} elements differ\n"
                             + "\n".join(rows))


def euler_circuit(nodes: list[str]) -> list[str]:
    """A walk through every ordered pair (a, b), a != b, exactly once (Hierholzer): a tour
    of the app's pages that arrives at every page from every other one."""
    out = {n: [m for m in nodes if m != n] for n in nodes}
    stack, walk = [nodes[0]], []
    while stack:
        if out[stack[-1]]:
            stack.append(out[stack[-1]].pop())
        else:
            walk.append(stack.pop())
    return walk[::-1]



def open_app_page(page: str, query: dict | None = None, state: dict | None = None):
    """An AppTest of streamlit_app.py switched to `page` (e.g. "pages/model_report.py") with
    `state` in its session and `query` in its URL, run once: no exception, and no error box
    saying the app failed unexpectedly."""
    from pathlib import Path

    from streamlit.testing.v1 import AppTest

    from app import errors

    at = AppTest.from_file(str(Path(__file__).resolve().parent.parent / "streamlit_app.py"),
                           default_timeout=300)
    for k, v in (state or {}).items():
        at.session_state[k] = v
    if query:
        at.query_params.update(query)
    at.switch_page(page)
    at.run()
    assert not at.exception, [e.message for e in at.exception]
    assert not [e.value for e in at.error if errors.UNEXPECTED in e.value]
    return at



def run_pytest(path: str, *args: str, simulator: bool, timeout: int = 1200) -> None:
    """Run pytest on `path` (with `args`) in a fresh interpreter, under numba's CUDA simulator
    or not: numba reads NUMBA_ENABLE_CUDASIM when it is imported, so the variable is set for
    that process only. Fails with the run's output tail unless it passed."""
    import subprocess
    import sys
    from pathlib import Path

    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PYTEST_", "NUMBA_ENABLE_CUDASIM"))}
    env["NUMBA_ENABLE_CUDASIM"] = "1" if simulator else "0"
    # -n 0: one process (the calling test already runs in one of the suite's workers)
    cmd = [sys.executable, "-m", "pytest", path, *args, "-q", "--tb=short", "-p",
           "no:cacheprovider", "-n", "0", "-W", "ignore::RuntimeWarning"]
    proc = subprocess.run(cmd, cwd=Path(__file__).resolve().parent.parent, env=env,
                          capture_output=True, text=True, timeout=timeout)
    out = proc.stdout + proc.stderr
    where = "under the CUDA simulator" if simulator else "on the GPU"
    assert proc.returncode == 0 and " passed" in out, (
        f"{path} {' '.join(args)} {where} failed (exit {proc.returncode}); run "
        f"`NUMBA_ENABLE_CUDASIM={int(simulator)} python -m pytest {path} {' '.join(args)}` to "
        f"reproduce. Output tail:\n{out[-8000:]}"
    )


def interrupt_report(run_report, *args, after: int, **kwargs) -> None:
    """Run `run_report(*args, **kwargs)` and stop it as its `after`-th tensor finishes, the way
    Ctrl-C does (KeyboardInterrupt from the progress callback)."""

    def stop(done, total, el, el_total):
        if done == after:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_report(*args, progress=stop, **kwargs)


@pytest.fixture
def ref():
    return reference
