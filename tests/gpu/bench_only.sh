#!/usr/bin/env bash
# The specialised CUDA kernels' GPU cases, then the benchmark, in at most 150 s:
#   wheels (~10 s) -> the float8 instruction, large tensors and every layout x target family
#   on the GPU (timeout 70 s) -> python -m qcore.bench.cuda at 4096x4096 and 16384x16384
#   (timeout 90 s; bench.md, bench.json).
# Run from the repository root with the wheels in .whl/ (carried: the folder is git-ignored;
# tests/gpu/setup.sh installs them):
#   bash tests/gpu/bench_only.sh            results under $OUT (default ./gpu_out)
set -u
. "$(dirname "$0")/setup.sh"

{
  elapsed "environment"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv || true
  install_wheels
} > "$OUT/env.txt" 2>&1
use_wheels
print_versions numpy ml_dtypes numba numba-cuda llvmlite torch >> "$OUT/env.txt" 2>&1
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
