"""The stale-cache guard drops qcore's numba cache entries when a kernel source changes, in the
folder numba really uses (NUMBA_CACHE_DIR included), at the first kernel call; importing qcore
changes no file."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

_PROBE = """
import sys
import numpy as np
import qcore
from qcore import kernels
if sys.argv[1] == "call":
    qcore.quantize_linear(np.ones(4, np.float32), np.float32(1))
for d in kernels._cache_dirs():
    print(d)
"""


def _cache_dirs(cache: Path, call: bool = True) -> list[Path]:
    """The cache folders numba uses under `cache`, after one kernel call (`call`) or none."""
    env = {**os.environ, "NUMBA_CACHE_DIR": str(cache), "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", _PROBE, "call" if call else "import"], env=env,
                         cwd=ROOT, check=True, capture_output=True, text=True,
                         timeout=600).stdout
    return [Path(line) for line in out.split()]


def test_entries_under_numba_cache_dir_are_dropped_when_the_sources_change(tmp_path):
    dirs = _cache_dirs(tmp_path)
    assert dirs and all(d.is_relative_to(tmp_path) for d in dirs), dirs
    kernels_dir = next(d for d in dirs if d.name.startswith("kernels_"))
    stamp = (kernels_dir / "qcore-kernels.sha256").read_text()
    # an entry compiled from other sources: a marker that no longer matches
    (kernels_dir / "cpu._driver-1.py311.nbi").write_bytes(b"old")
    (kernels_dir / "cpu._driver-1.py311.1.nbc").write_bytes(b"old")
    (kernels_dir / "qcore-kernels.sha256").write_text("sources of another day")
    _cache_dirs(tmp_path)  # (the call then caches its kernels anew)
    assert not (kernels_dir / "cpu._driver-1.py311.nbi").exists()
    assert not (kernels_dir / "cpu._driver-1.py311.1.nbc").exists()
    assert (kernels_dir / "qcore-kernels.sha256").read_text() == stamp
    # matching marker: entries stay
    (kernels_dir / "cpu._driver-1.py311.nbi").write_bytes(b"current")
    _cache_dirs(tmp_path)
    assert (kernels_dir / "cpu._driver-1.py311.nbi").read_bytes() == b"current"


def test_importing_qcore_drops_nothing(tmp_path):
    kernels_dir = next(d for d in _cache_dirs(tmp_path) if d.name.startswith("kernels_"))
    (kernels_dir / "qcore-kernels.sha256").write_text("sources of another day")
    (kernels_dir / "cpu._driver-1.py311.nbi").write_bytes(b"old")
    _cache_dirs(tmp_path, call=False)
    assert (kernels_dir / "cpu._driver-1.py311.nbi").read_bytes() == b"old"
    assert (kernels_dir / "qcore-kernels.sha256").read_text() == "sources of another day"
