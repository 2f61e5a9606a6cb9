#!/usr/bin/env bash
# The specialised CUDA kernels' GPU cases, then the benchmark, in at most 150 s:
#   wheels (~10 s) -> the float8 instruction, large tensors and every layout x target family
#   on the GPU (timeout 70 s) -> python -m qcore.bench.cuda at 4096x4096 and 16384x16384
#   (timeout 90 s; bench.md, bench.json).
# Run from the repository root with the wheels in .whl/ (carried: the folder is git-ignored):
#   bash tests/gpu/bench_only.sh            results under $OUT (default ./gpu_out)
# The machine has no internet: NumPy 2.3.5 and ml_dtypes come from .whl/ (the image's NumPy
# 2.5 breaks numba-cuda's import); pytest and pytest-xdist from .whl/test/ only when missing.
set -u
OUT=${OUT:-gpu_out}
mkdir -p "$OUT"
START=$(date +%s)
elapsed() { echo "[$(( $(date +%s) - START )) s] $*"; }

{
  elapsed "environment"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv || true
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl
  if ! python3 -c "import pytest, xdist" 2>/dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target /tmp/site .whl/test/*.whl
  fi
} > "$OUT/env.txt" 2>&1
export PYTHONPATH=/tmp/site:.
export PYTHONDONTWRITEBYTECODE=1
export NUMBA_ENABLE_CUDASIM=0
python3 - >> "$OUT/env.txt" 2>&1 <<'PY'
import importlib.metadata as md, sys
print("python", sys.version.split()[0])
for pkg in ("numpy", "ml_dtypes", "numba", "numba-cuda", "llvmlite", "torch"):
    try:
        print(pkg, md.version(pkg))
    except md.PackageNotFoundError:
        print(pkg, "-")
PY
cat "$OUT/env.txt"

elapsed "the specialised kernels' cases on the GPU"
timeout 70 python3 -m pytest tests/cuda_sim_cases.py -q -n 8 -p no:cacheprovider \
  -W ignore::RuntimeWarning --tb=short -rs \
  -k "float8_conversion or large_tensors or specialised" > "$OUT/tests_fast.txt" 2>&1
echo "tests exit $? (124: cut by the 70 s limit)" >> "$OUT/tests_fast.txt"
tail -n 30 "$OUT/tests_fast.txt"

elapsed "benchmark"
timeout 90 python3 -m qcore.bench.cuda --size 4096x4096,16384x16384 --repeat 10 \
  --json "$OUT/bench.json" --markdown "$OUT/bench.md" > "$OUT/bench.log" 2>&1
echo "bench exit $? (124: cut by the 90 s limit)" >> "$OUT/bench.log"
cat "$OUT/bench.log"
elapsed "done"
