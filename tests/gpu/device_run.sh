#!/usr/bin/env bash
# The CUDA backend on a lent GPU machine, in one run of at most 6 minutes:
#   versions -> a smoke check -> the specialised kernels' GPU cases (the float8 instruction
#   against the CPU, large tensors, every layout x target family) -> the benchmark (4096x4096
#   and 16384x16384 float32, every case against the copy roofline and torch) -> the rest of
#   tests/cuda_sim_cases.py on the GPU, in the time left.
# Run from the repository root with the wheels in .whl/ (carried: the folder is git-ignored;
# tests/gpu/setup.sh installs them):
#   bash tests/gpu/device_run.sh            results under $OUT (default ./gpu_out)
set -u
. "$(dirname "$0")/setup.sh"

{
  elapsed "environment"
  nvidia-smi || true
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv || true
  install_wheels
} > "$OUT/env.txt" 2>&1
use_wheels
{
  print_versions numpy ml_dtypes numba numba-cuda llvmlite torch pytest pytest-xdist \
    cuda-python nvidia-cuda-nvcc-cu12 nvidia-cuda-nvrtc-cu12
  python3 -c "import numpy, numba; print('numpy from', numpy.__file__)"
} >> "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"

# The benchmark module: qcore/bench/cuda.py once moved into the bench package, else
# qcore/bench_cuda.py.
if [ -f qcore/bench/cuda.py ]; then BENCH=qcore.bench.cuda; else BENCH=qcore.bench_cuda; fi

elapsed "smoke check"
timeout 75 python3 - > "$OUT/smoke.txt" 2>&1 <<'EOF'
import numpy as np, qcore
from qcore.kernels import cuda as ck
from qcore import ops
print("cuda:", ck.unavailable_reason() or "usable", "| device:", ck.device_name(),
      "| float8 cvt instruction:", ck.fp8_conversion())
x = np.random.default_rng(0).standard_normal((64, 256)).astype(np.float32)
for target in ("int8", "float8e4m3fn", "float8e5m2"):
    for sat in (True, False):
        call = ops.prepare_quantize(x, np.float32(0.01), backend="cuda", output_dtype=target,
                                    saturate=sat)
        fam = ck.quantize_family(call.layout_params(), call.params())
        a = qcore.quantize_linear(x, np.float32(0.01), output_dtype=target, saturate=sat)
        b = qcore.quantize_linear(x, np.float32(0.01), output_dtype=target, saturate=sat,
                                  backend="cuda")
        same = np.array_equal(a.view(np.uint8), b.view(np.uint8))
        print(f"{target} saturate={sat}: kernel {fam}, bit-exact {same}")
y, s, z = qcore.dynamic_quantize_linear(x, backend="cuda")
print("DynamicQuantizeLinear", float(s), int(z),
      all(np.array_equal(np.asarray(p), np.asarray(q)) for p, q in
          zip((y, s, z), qcore.dynamic_quantize_linear(x))))
EOF
echo "smoke exit $?" >> "$OUT/smoke.txt"
cat "$OUT/smoke.txt"

FAST="float8_conversion or large_tensors or specialised"
elapsed "the specialised kernels' cases on the GPU"
timeout 100 python3 -m pytest tests/cuda_sim_cases.py -q -n 8 -p no:cacheprovider \
  -W ignore::RuntimeWarning --tb=short -rs -k "$FAST" > "$OUT/tests_fast.txt" 2>&1
echo "tests exit $? (124: cut by the 100s limit)" >> "$OUT/tests_fast.txt"
tail -n 30 "$OUT/tests_fast.txt"

elapsed "benchmark ($BENCH)"
timeout 140 python3 -m "$BENCH" --size 4096x4096,16384x16384 --repeat 10 \
  --json "$OUT/bench.json" --markdown "$OUT/bench.md" > "$OUT/bench.log" 2>&1
echo "bench exit $?" >> "$OUT/bench.log"
cat "$OUT/bench.log"

elapsed "the rest of tests/cuda_sim_cases.py on the GPU"
LEFT=$(( 345 - ($(date +%s) - START) ))
[ "$LEFT" -lt 20 ] && LEFT=20
timeout "$LEFT" python3 -m pytest tests/cuda_sim_cases.py -q -n 12 -p no:cacheprovider \
  -W ignore::RuntimeWarning --tb=short -rs -k "not ($FAST)" --junitxml="$OUT/tests.xml" \
  > "$OUT/tests.txt" 2>&1
echo "tests exit $? (124: cut by the ${LEFT}s limit)" >> "$OUT/tests.txt"
tail -n 60 "$OUT/tests.txt"
elapsed "done"
