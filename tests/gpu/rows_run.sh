#!/usr/bin/env bash
# The rows family (per-axis, blocked, DequantizeLinear blocked) on a lent GPU, in about 5
# minutes: wheels (~10 s) -> python -m qcore.bench.cuda --rows-only at 16384x16384 then
# 4096x4096, the default walk (WALKS to name others), first for a baseline tree in base/ when
# there is one (a copy of another commit's qcore/: bench_base.md, bench_base.json; timeout
# 100 s), then for this tree (bench.md, bench.json; timeout 100 s) -> the specialised kernels'
# GPU cases against the CPU backend, every rows walk included (timeout 120 s; tests.txt,
# tests.xml). The baseline and this tree run on the same card, one after the other.
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

bench() {  # bench NAME DIR: the qcore of DIR (python -m puts the working directory first)
  elapsed "benchmark ($1): the rows family"
  (cd "$2" && PYTHONPATH=/tmp/site timeout 100 python3 -m qcore.bench.cuda --rows-only \
    --size 16384x16384,4096x4096 --repeat 10 ${WALKS:+--walks $WALKS} \
    --json "$OUT/$1.json" --markdown "$OUT/$1.md") > "$OUT/$1.log" 2>&1
  echo "$1 exit $? (124: cut by the 100 s limit)" >> "$OUT/$1.log"
  tail -n 40 "$OUT/$1.log"
}
if [ -d base/qcore ]; then
  bench bench_base base
fi
bench bench .

elapsed "the specialised kernels' cases on the GPU (every rows walk)"
timeout 120 python3 -m pytest tests/cuda_sim_cases.py -q -n 12 -p no:cacheprovider \
  -W ignore::RuntimeWarning --tb=short -rs --junitxml="$OUT/tests.xml" \
  -k "float8_conversion or large_tensors or specialised or rows_walks" > "$OUT/tests.txt" 2>&1
echo "tests exit $? (124: cut by the 120 s limit)" >> "$OUT/tests.txt"
tail -n 25 "$OUT/tests.txt"
elapsed "done"
