"""Cold start: ``python -m qcore.bench --cold``.

Times the first call of four typical operations on a 1024x1024 float32 tensor in fresh Python
processes: first each in its own process with an empty numba cache folder (each pays for every
compilation it needs), then the four in one process with an empty cache (shared helpers compile
once), then the same two with the cache that run left behind (a warm restart). The targets
(issue: cold start in seconds) are printed beside the figures; nothing here asserts them.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

#: seconds: each first call from an empty cache, the four together
COLD_EACH_TARGET_S = 5.0
COLD_TOGETHER_TARGET_S = 12.0
#: seconds a warm restart (primed cache) may take for the four together (the app's page bound)
PRIMED_TOGETHER_TARGET_S = 3.0

COLD_CASES = ("Q int8 per-tensor", "Q float8e4m3fn", "Q int4 blocked 32", "DQ int8 per-tensor")


def cold_call(name: str, shape: tuple[int, int] = (1024, 1024)) -> Callable[[], object]:
    """The operation a cold-start case times (inputs made outside the clock)."""
    import qcore

    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape, dtype=np.float32)
    if name == "Q int8 per-tensor":
        return lambda: qcore.quantize_linear(x, np.float32(0.02), np.int8(0))
    if name == "Q float8e4m3fn":
        return lambda: qcore.quantize_linear(x, np.float32(0.01), output_dtype="float8e4m3fn")
    if name == "Q int4 blocked 32":
        s = np.full((shape[0], -(-shape[1] // 32)), 0.4, np.float32)
        return lambda: qcore.quantize_linear(x, s, output_dtype="int4", axis=1, block_size=32)
    if name == "DQ int8 per-tensor":
        q = rng.integers(-128, 128, shape, dtype=np.int8)
        return lambda: qcore.dequantize_linear(q, np.float32(0.02), np.int8(0))
    raise ValueError(f"unknown cold-start case {name!r}; valid: {', '.join(COLD_CASES)}")


def child(names: list[str], shape: tuple[int, int]) -> dict:
    """In the timed process: import qcore, then each case's first call, timed separately: wall
    seconds in "calls", CPU seconds of the process (compilation included) in "calls_cpu"."""
    t0 = time.perf_counter()
    import qcore  # noqa: F401 - the import is part of what a first call waits for

    out = {"import_s": time.perf_counter() - t0, "calls": {}, "calls_cpu": {}}
    for name in names:
        fn = cold_call(name, shape)
        t0, c0 = time.perf_counter(), time.process_time()
        fn()
        out["calls"][name] = time.perf_counter() - t0
        out["calls_cpu"][name] = time.process_time() - c0
    return out


# The timed process: `import qcore` (numpy and numba with it) on the clock, then the calls.
_CHILD = (
    "import sys, time, json\n"
    "t0 = time.perf_counter()\n"
    "import qcore\n"
    "imported = time.perf_counter() - t0\n"
    "from qcore.bench.cold import child\n"
    "rows, cols = (int(v) for v in sys.argv[2].split('x'))\n"
    "out = child(sys.argv[1].split(','), (rows, cols))\n"
    "out['import_s'] = imported\n"
    "out['load_average'] = __import__('os').getloadavg()[0]\n"
    "print(json.dumps(out))\n"
)


def _spawn(names: list[str], cache: Path, shape: tuple[int, int], timeout: float) -> dict:
    env = dict(os.environ, NUMBA_CACHE_DIR=str(cache))
    cmd = [sys.executable, "-c", _CHILD, ",".join(names), f"{shape[0]}x{shape[1]}"]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        tail = (proc.stdout + proc.stderr).strip().splitlines()[-6:]
        raise RuntimeError(f"cold-start child for {names} exited with {proc.returncode}:\n"
                           + "\n".join(tail))
    return json.loads(proc.stdout.strip().splitlines()[-1])


def measure(names=COLD_CASES, shape: tuple[int, int] = (1024, 1024), *, timeout: float = 900,
            spawn=None, progress=None) -> dict:
    """Cold (empty cache) and primed first-call seconds, each case alone and all together.

    `spawn(names, cache_dir, shape, timeout)` runs one timed process (default: a fresh Python
    running ``python -m qcore.bench --cold-child``) and returns its JSON."""
    spawn = spawn or _spawn
    names = list(names)
    root = Path(tempfile.mkdtemp(prefix="qcore-cold-"))
    result: dict = {"shape": list(shape), "cold_each": {}, "primed_each": {}}
    try:
        for name in names:
            if progress:
                progress(f"cold: {name}")
            result["cold_each"][name] = spawn([name], root / f"each-{len(result['cold_each'])}",
                                              shape, timeout)
        shared = root / "together"
        if progress:
            progress("cold: all together")
        result["cold_together"] = spawn(names, shared, shape, timeout)
        for name in names:
            if progress:
                progress(f"primed: {name}")
            result["primed_each"][name] = spawn([name], shared, shape, timeout)
        if progress:
            progress("primed: all together")
        result["primed_together"] = spawn(names, shared, shape, timeout)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return result


def _verdict(seconds: float, target: float | None) -> str:
    if target is None:
        return "—"
    return f"≤ {target:g} s: {'met' if seconds <= target else 'NOT met'}"


def format_report(result: dict) -> str:
    """A table of first-call seconds with the targets beside them."""
    lines = [f"cold start, first call on a {result['shape'][0]}x{result['shape'][1]} float32 "
             f"tensor, a fresh process each (import qcore, with numpy and numba, timed apart); "
             f"wall seconds (targets), CPU seconds of the process beside them",
             "| case | cold wall s | cold CPU s | target | primed wall s | load average |",
             "|---|---|---|---|---|---|"]
    for name, cold in result["cold_each"].items():
        primed = result["primed_each"].get(name, {"calls": {}})["calls"].get(name, float("nan"))
        c = cold["calls"][name]
        cpu = cold.get("calls_cpu", {}).get(name, float("nan"))
        lines.append(f"| {name} | {c:.2f} | {cpu:.2f} | {_verdict(c, COLD_EACH_TARGET_S)} | "
                     f"{primed:.2f} | {cold.get('load_average', float('nan')):.1f} |")
    together = result["cold_together"]
    cold_all = sum(together["calls"].values())
    cpu_all = sum(together.get("calls_cpu", {}).values()) if together.get("calls_cpu") else (
        float("nan"))
    primed_all = sum(result["primed_together"]["calls"].values())
    lines.append(f"| all four in one process | {cold_all:.2f} | {cpu_all:.2f} | "
                 f"{_verdict(cold_all, COLD_TOGETHER_TARGET_S)} | {primed_all:.2f} "
                 f"({_verdict(primed_all, PRIMED_TOGETHER_TARGET_S)}) | "
                 f"{together.get('load_average', float('nan')):.1f} |")
    lines.append(f"import qcore (numpy, numba included): cold cache "
                 f"{result['cold_together']['import_s']:.2f} s, primed "
                 f"{result['primed_together']['import_s']:.2f} s")
    return "\n".join(lines)
