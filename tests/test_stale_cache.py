"""The stale-cache guard drops qcore's numba cache entries when a kernel source changes, in the
folder numba really uses (NUMBA_CACHE_DIR included)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

_PROBE = """
from qcore import kernels
for d in kernels._cache_dirs():
    print(d)
"""


def _cache_dirs(cache: Path) -> list[Path]:
    env = {**os.environ, "NUMBA_CACHE_DIR": str(cache), "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", _PROBE], env=env, cwd=ROOT, check=True,
                         capture_output=True, text=True, timeout=600).stdout
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
    _cache_dirs(tmp_path)
    assert not list(kernels_dir.glob("*.nb[ic]"))
    assert (kernels_dir / "qcore-kernels.sha256").read_text() == stamp
    # matching marker: entries stay
    (kernels_dir / "cpu._driver-1.py311.nbi").write_bytes(b"current")
    _cache_dirs(tmp_path)
    assert (kernels_dir / "cpu._driver-1.py311.nbi").read_bytes() == b"current"
