#!/usr/bin/env bash
# The rows family (per-axis, blocked, DequantizeLinear blocked) on a lent GPU, in at most 6
# minutes: wheels (~10 s) -> the specialised kernels' GPU cases, every rows walk included
# (timeout 150 s; tests.txt, tests.xml) -> python -m qcore.bench.cuda, the rows family through
# the one-row, batched and flat walks side by side, at 16384x16384 then 4096x4096 (timeout
# 200 s; bench.md, bench.json).
# Run from the repository root with the wheels in .whl/ (tests/gpu/setup.sh installs them):
#   bash tests/gpu/rows_run.sh            results under $OUT (default ./gpu_out)
set -u
. "$(dirname "$0")/setup.sh"

{
  elapsed "environment"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem,clocks.sm,temperature.gpu,power.draw --format=csv || true
  install_wheels
} > "$OUT/env.txt" 2>&1
use_wheels
print_versions numpy ml_dtypes numba numba-cuda llvmlite torch pytest pytest-xdist >> "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"

elapsed "the specialised kernels' cases on the GPU (every rows walk)"
timeout 150 python3 -m pytest tests/cuda_sim_cases.py -q -n 12 -p no:cacheprovider \
  -W ignore::RuntimeWarning --tb=short -rs --junitxml="$OUT/tests.xml" \
  -k "float8_conversion or large_tensors or specialised or rows_walks" > "$OUT/tests.txt" 2>&1
echo "tests exit $? (124: cut by the 150 s limit)" >> "$OUT/tests.txt"
tail -n 25 "$OUT/tests.txt"

elapsed "benchmark: the rows family, every rows walk"
timeout 200 python3 -m qcore.bench.cuda --size 16384x16384,4096x4096 --repeat 10 \
  --walks ${WALKS:-rows,batch,flat} \
  --json "$OUT/bench.json" --markdown "$OUT/bench.md" > "$OUT/bench.log" 2>&1
echo "bench exit $? (124: cut by the 200 s limit)" >> "$OUT/bench.log"
cat "$OUT/bench.log"
elapsed "done"
