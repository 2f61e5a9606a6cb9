"""The machine code LLVM makes of the integer code steps for named x86 targets.

The store form of the steps (qcore.kernels.bits.int_store_split) is chosen per target CPU from
what LLVM gives that CPU; these tests compile the 256-lane step for other targets than the host
(a subprocess with NUMBA_CPU_NAME, NUMBA_CPU_FEATURES="" and its own numba cache: compiled,
never run) and read the assembly, so the choice is checked on any x86 host. The steps' values
are held to the scalar rule in tests/test_element_rules.py (both store forms).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from qcore.kernels import bits

pytestmark = pytest.mark.skipif(os.uname().machine not in ("x86_64", "AMD64"),
                                reason="x86 CPU names")

#: Compiles a loop of 256-lane integer code steps for the target in NUMBA_CPU_NAME, as the
#: kernels compile it (bits.INT_SPLIT) and with the other store form; prints counts of the
#: instructions that tell the forms apart.
_CHILD = """
import json, numpy as np
from numba import njit, typeof
from qcore.kernels import bits

def loop_of(step):
    def loop(xs, ys, s, a, b, z, m):
        bits.wide_vectors()
        j = 0
        while j + 256 <= xs.size:
            step(xs, j, ys, s, a, b, z, m)
            j += 256
    return njit(loop)

x = np.zeros(1024, np.float32)
x.flags.writeable = False
sig = (typeof(x), typeof(np.zeros(1024, np.uint8)), typeof(np.float32(1)),
       typeof(np.float32(1)), typeof(np.float32(1)), typeof(np.int32(1)), typeof(np.int32(1)))
out = {"split": bits.INT_SPLIT}
for name, split in (("chosen", bits.INT_SPLIT), ("other", 0 if bits.INT_SPLIT else 16)):
    fn = loop_of(bits._int_codes_intrinsic(256, split))
    fn.compile(sig)
    asm = fn.inspect_asm(sig)
    out[name] = {op: sum(line.split()[0] == op for line in asm.splitlines() if line.strip())
                 for op in ("vinserti32x4", "vinserti64x4", "vinserti128", "vpmovdb", "vdivps")}
print(json.dumps(out))
"""


def _compiled_for(cpu: str, tmp_path) -> dict:
    env = dict(os.environ, NUMBA_CPU_NAME=cpu, NUMBA_CPU_FEATURES="",
               NUMBA_CACHE_DIR=str(tmp_path / cpu))
    done = subprocess.run([sys.executable, "-c", _CHILD], env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize(("cpu", "split"), [
    ("znver4", 16), ("znver5", 16),  # AMD AVX-512
    ("znver3", 0), ("haswell", 0), ("x86-64", 0),  # AVX2 or less
    ("icelake-server", 0), ("skylake-avx512", 0), ("rocketlake", 0)])  # Intel AVX-512
def test_store_split_follows_the_targets_llvm_features(cpu, split):
    """The rule reads LLVM's own feature set of each CPU (named_cpu_features), not a list."""
    assert bits.int_store_split(cpu, bits.named_cpu_features(cpu)) == split


def test_store_split_needs_avx512_in_the_features():
    """A Zen 5 name with AVX-512 turned off (NUMBA_CPU_FEATURES) keeps whole-vector stores."""
    assert bits.int_store_split("znver5", {"+avx2", "+f16c"}) == 0
    assert bits.int_store_split("znver6", {"+avx512f"}) == 16
    assert bits.int_store_split("znverx", {"+avx512f"}) == 0


def test_host_choice_is_the_rules():
    assert bits.INT_SPLIT == bits.int_store_split(bits._target_cpu_name(),
                                                  bits._target_features())


def test_znver5_step_stores_each_vpmovdb_without_inserts(tmp_path):
    """For Zen 5 the step narrows 16 lanes per vpmovdb and stores each: no insert rebuilds a
    64-byte vector (LLVM's Zen 4/5 model issues the inserts on the dividers' pipe). Whole-step
    stores there do rebuild them, so this test can tell the forms apart."""
    got = _compiled_for("znver5", tmp_path)
    assert got["split"] == 16
    chosen, other = got["chosen"], got["other"]
    assert chosen["vdivps"] >= 16 and chosen["vpmovdb"] >= 16
    assert chosen["vinserti32x4"] + chosen["vinserti64x4"] + chosen["vinserti128"] == 0
    assert other["vinserti32x4"] + other["vinserti64x4"] + other["vinserti128"] >= 12


def test_haswell_step_keeps_whole_vector_stores(tmp_path):
    """The AVX2 path is unchanged: one store form, no per-16-lane split."""
    got = _compiled_for("haswell", tmp_path)
    assert got["split"] == 0
    assert got["chosen"]["vpmovdb"] == 0
