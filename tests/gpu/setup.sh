# Sourced by the scripts in tests/gpu (from the repository root): $OUT, the clock, and the
# wheels. The machine has no internet: NumPy 2.3.5 and ml_dtypes come from .whl/ (the image's
# NumPy 2.5 breaks numba-cuda's import); pytest and pytest-xdist from .whl/test/ only when
# missing.
OUT=${OUT:-gpu_out}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)  # absolute: steps may run in another folder
START=$(date +%s)
elapsed() { echo "[$(( $(date +%s) - START )) s] $*"; }

# The wheels of .whl/ (and .whl/test/ when pytest or xdist is missing) into /tmp/site.
install_wheels() {
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl
  if ! python3 -c "import pytest, xdist" 2>/dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target /tmp/site .whl/test/*.whl
  fi
}

# The environment the tests and the benchmark run in: /tmp/site first, a real GPU.
use_wheels() {
  export PYTHONPATH=/tmp/site:.
  export PYTHONDONTWRITEBYTECODE=1
  export NUMBA_ENABLE_CUDASIM=0
}

# print_versions PKG...: Python's version and each package's ("-" where it is missing).
print_versions() {
  python3 - "$@" <<'PY'
import importlib.metadata as md, sys
print("python", sys.version.split()[0])
for pkg in sys.argv[1:]:
    try:
        print(pkg, md.version(pkg))
    except md.PackageNotFoundError:
        print(pkg, "-")
PY
}
