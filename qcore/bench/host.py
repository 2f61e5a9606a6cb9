"""What a benchmark ran on, and running the qcore side compiled for another CPU target.

:func:`host_info` names the host CPU and its vector ISA (llvmlite's view of the host, what numba
compiles for), ``NUMBA_CPU_NAME`` when set, numba's threading layer and thread count.
:func:`target_problem` says why code compiled for a named target cannot run here (it needs
AVX-512 or AVX2 and this CPU lacks it); :func:`run_for_target` runs a command in a subprocess
with ``NUMBA_CPU_NAME`` set and a numba cache folder of its own, and reports a SIGILL clearly.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

#: LLVM CPU names whose code uses AVX-512 (numba vectorises with it) ...
AVX512_TARGETS = frozenset({
    "skylake-avx512", "cascadelake", "cooperlake", "cannonlake", "icelake-client",
    "icelake-server", "tigerlake", "rocketlake", "sapphirerapids", "emeraldrapids",
    "graniterapids", "graniterapids-d", "knl", "knm", "znver4", "znver5", "x86-64-v4",
})
#: ... and AVX2 without AVX-512 (a few common ones; unknown names are tried and SIGILL caught).
AVX2_TARGETS = frozenset({
    "haswell", "broadwell", "skylake", "alderlake", "raptorlake", "meteorlake", "arrowlake",
    "lunarlake", "gracemont", "znver1", "znver2", "znver3", "x86-64-v3", "bdver4",
})


def vector_isa(features: dict[str, bool]) -> str:
    """The widest x86 vector ISA in an llvmlite feature map: AVX-512, AVX2, AVX or SSE."""
    if features.get("avx512f"):
        return "AVX-512"
    if features.get("avx2"):
        return "AVX2"
    if features.get("avx"):
        return "AVX"
    if features.get("sse2"):
        return "SSE2"
    return "no x86 vector ISA"


def host_features() -> dict[str, bool]:
    import llvmlite.binding as llvm

    try:
        return {k: bool(v) for k, v in llvm.get_host_cpu_features().items()}
    except RuntimeError:  # llvmlite cannot read them on some hosts
        return {}


def host_info() -> dict:
    """Host CPU name and vector ISA, NUMBA_CPU_NAME, numba threading layer and thread count."""
    import llvmlite.binding as llvm
    import numba

    try:
        layer = numba.threading_layer()
    except ValueError:  # no parallel kernel has run yet in this process
        layer = f"not chosen yet (NUMBA_THREADING_LAYER={numba.config.THREADING_LAYER})"
    features = host_features()
    return {
        "host_cpu": llvm.get_host_cpu_name(),
        "host_isa": vector_isa(features),
        "numba_cpu_name": os.environ.get("NUMBA_CPU_NAME") or None,
        "numba_cpu_features": os.environ.get("NUMBA_CPU_FEATURES") or None,
        "target_isa": target_isa(),
        "threading_layer": layer,
        "threads": numba.get_num_threads(),
        "cores": os.cpu_count(),
        "numba": numba.__version__,
    }


def target_isa() -> str:
    """The widest vector ISA of the code numba compiles here (see bits._target_features)."""
    from ..kernels.bits import _target_features

    features = _target_features()
    return vector_isa({name.lstrip("+"): True for name in features if name.startswith("+")})


def describe(info: dict) -> str:
    """One line for the benchmark's header."""
    compiled = info["numba_cpu_name"] or "the host (native)"
    compiled += f", {info['target_isa']}" if info.get("target_isa") else ""
    line = (f"host CPU {info['host_cpu']} ({info['host_isa']}), {info['cores']} cores; "
            f"qcore compiled for {compiled}")
    if info["numba_cpu_features"]:
        line += f" with features {info['numba_cpu_features']}"
    return (line + f"; numba {info['numba']}, threading layer {info['threading_layer']}, "
            f"{info['threads']} threads")


def target_problem(cpu_name: str, features: dict[str, bool] | None = None) -> str | None:
    """Why code compiled for `cpu_name` cannot run on this host, or None when it can (or the
    name is not one we know: then the run itself tells, see :func:`run_for_target`)."""
    features = host_features() if features is None else features
    if not features:
        return None
    name = cpu_name.lower()
    if name in AVX512_TARGETS and not features.get("avx512f"):
        return (f"--cpu {cpu_name}: code compiled for {cpu_name} may use AVX-512, which this "
                f"CPU ({vector_isa(features)}) lacks: a kernel that does dies of an illegal "
                f"instruction (SIGILL), and one that happens not to would not measure AVX-512 "
                f"code. Run that column on an AVX-512 host (or pass an AVX2 target such as "
                f"haswell)")
    if name in AVX2_TARGETS and not features.get("avx2"):
        return (f"--cpu {cpu_name}: code compiled for {cpu_name} uses AVX2, which this CPU "
                f"({vector_isa(features)}) lacks")
    return None


def target_cache_dir(cpu_name: str) -> Path:
    """A numba cache folder for one target (numba would otherwise mix targets' cached code)."""
    return Path(tempfile.gettempdir()) / f"qcore-numba-cache-{cpu_name}"


def run_for_target(cpu_name: str, args: list[str], *, cache_dir: Path | None = None,
                   timeout: float | None = None) -> subprocess.CompletedProcess:
    """``python -m qcore.bench ARGS`` with NUMBA_CPU_NAME=cpu_name and its own cache folder.

    Raises RuntimeError naming the cause when the child dies of SIGILL (the target needs
    instructions this CPU lacks), when LLVM does not know the name, or when it fails otherwise.
    """
    cache = cache_dir or target_cache_dir(cpu_name)
    cache.mkdir(parents=True, exist_ok=True)
    # NUMBA_CPU_NAME alone tunes for the name but keeps the host's features (AVX-512 code on an
    # AVX-512 host for "haswell"); an empty feature string gives the named CPU's own
    env = dict(os.environ, NUMBA_CPU_NAME=cpu_name, NUMBA_CPU_FEATURES="",
               NUMBA_CACHE_DIR=str(cache))
    proc = subprocess.run([sys.executable, "-m", "qcore.bench", *args], env=env,
                          capture_output=True, text=True, timeout=timeout)
    if proc.returncode == -signal.SIGILL or proc.returncode == 128 + signal.SIGILL:
        raise RuntimeError(
            f"--cpu {cpu_name}: the code compiled for {cpu_name} hit an illegal instruction "
            f"(SIGILL) on this CPU ({host_info()['host_cpu']}): the target needs instructions "
            f"this host lacks")
    if "is not a recognized processor" in proc.stderr:
        raise RuntimeError(f"--cpu {cpu_name}: LLVM does not know the CPU name {cpu_name!r} "
                           f"(try haswell, skylake-avx512, znver3, x86-64-v3, ...)")
    if proc.returncode != 0:
        tail = (proc.stdout + proc.stderr).strip().splitlines()[-8:]
        raise RuntimeError(f"--cpu {cpu_name}: the benchmark exited with {proc.returncode}:\n"
                           + "\n".join(tail))
    return proc
