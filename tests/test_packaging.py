"""Packaging and the README: what a new user runs works as written.

- the README's runnable code blocks run in a fresh interpreter (no prior imports);
- ``import qcore`` alone gives ``qcore.packing``, ``qcore.datasets``, ``qcore.io``, ... and
  imports none of the app's dependencies;
- the wheel (a normal, non-editable install) holds the engine and the shipped tensors, no
  top-level ``app`` package, the app's dependencies only as extras, and a shipped tensor loads
  from the unpacked wheel with the checkout out of sight.

Everything is built and run under ``tmp_path``: the working tree stays clean.
"""

from __future__ import annotations

import email
import os
import re
import shutil
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"

pytestmark = pytest.mark.xdist_group("wheel")  # the wheel is built once, on one worker


def _fresh_python(code: str, cwd: Path, pythonpath: Path) -> subprocess.CompletedProcess:
    """Run `code` in a new interpreter that sees `pythonpath` first (not the caller's state)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "QCORE_DATASETS")}
    env["PYTHONPATH"] = str(pythonpath)
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=1800)


def readme_blocks() -> list[str]:
    """The README's runnable Python blocks: those that start with an import."""
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S)
    return [b for b in blocks if re.match(r"(import|from) ", b.lstrip())]


def test_readme_has_a_runnable_example():
    blocks = readme_blocks()
    assert blocks, "no runnable ```python block in README.md"
    text = "\n".join(blocks)
    for name in ("packing", "datasets", "io", "synthetic"):
        assert f"qcore.{name}." in text, f"the README example does not use qcore.{name}"


@pytest.mark.parametrize("index", range(len(readme_blocks())))
def test_readme_code_block_runs_in_a_fresh_interpreter(index, tmp_path):
    block = readme_blocks()[index]
    proc = _fresh_python(block, tmp_path, ROOT)
    assert proc.returncode == 0, f"README block {index} failed:\n{block}\n{proc.stderr[-3000:]}"


def test_readme_cites_only_files_in_the_repository():
    text = README.read_text(encoding="utf-8")
    assert "DESIGN" not in text, "the README cites DESIGN, which is not in the repository"
    for link in re.findall(r"\]\(([^)#:]+)\)", text):
        assert (ROOT / link).exists(), f"README links to {link}, which does not exist"


def test_bare_import_reaches_the_submodules_and_no_app_dependency(tmp_path):
    code = textwrap.dedent(f"""\
        import sys, qcore
        heavy = [m for m in ('streamlit', 'plotly', 'pandas') if m in sys.modules]
        assert not heavy, heavy
        assert qcore.__file__.startswith({str(ROOT)!r}), qcore.__file__
        for name in ('packing', 'datasets', 'io', 'synthetic'):
            assert getattr(qcore, name).__name__ == 'qcore.' + name
        assert 'packing' in dir(qcore)
        try:
            qcore.no_such_thing
        except AttributeError:
            pass
        else:
            raise AssertionError('qcore.no_such_thing did not raise')
        """)
    proc = _fresh_python(code, tmp_path, ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]


def test_every_qcore_package_is_listed_for_the_wheel():
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    listed = set(re.findall(r'"([^"]+)"', re.search(r"^packages = \[(.*?)\]", text, re.M)[1]))
    found = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "qcore").rglob("__init__.py")}
    assert found <= listed, f"packages missing from pyproject.toml: {sorted(found - listed)}"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel built from a copy of the checkout (build artefacts stay out of the tree)."""
    src = tmp_path_factory.mktemp("src")
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        if (ROOT / name).exists():
            shutil.copy2(ROOT / name, src / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.nbi", "*.nbc")
    for folder in ("qcore", "datasets"):
        shutil.copytree(ROOT / folder, src / folder, ignore=ignore)
    out = tmp_path_factory.mktemp("wheel")
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w",
                           str(out), str(src)], capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    (whl,) = out.glob("qcore-*.whl")
    return whl


def test_wheel_holds_the_engine_and_the_tensors_not_the_app(wheel):
    import json

    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        top = {n.split("/")[0] for n in names}
        assert top == {"qcore", next(t for t in top if t.endswith(".dist-info"))}, top
        manifest = json.loads(z.read("qcore/_datasets/manifest.json"))
        for entry in manifest["tensors"]:
            file = entry.get("file", f"{entry['name']}.npz")
            assert f"qcore/_datasets/{file}" in names, file
        meta = email.message_from_bytes(
            z.read(next(n for n in names if n.endswith(".dist-info/METADATA"))))
    requires = meta.get_all("Requires-Dist") or []
    core = [r for r in requires if "extra ==" not in r]
    for dep in ("streamlit", "plotly", "pandas"):
        assert not any(r.startswith(dep) for r in core), (dep, core)
        assert any(r.startswith(dep) and "extra == \"app\"" in r for r in requires), dep
        assert any(r.startswith(dep) and "extra == \"test\"" in r for r in requires), dep


def test_a_shipped_tensor_loads_from_the_unpacked_wheel(wheel, tmp_path):
    """What ``pip install qcore-*.whl`` puts in site-packages, alone on the path."""
    site = tmp_path / "site-packages"
    with zipfile.ZipFile(wheel) as z:
        z.extractall(site)
    code = textwrap.dedent(f"""\
        import qcore, numpy as np
        assert qcore.__file__.startswith({str(site)!r}), qcore.__file__
        assert str(qcore.datasets.datasets_dir()).startswith({str(site)!r})
        names = [e['name'] for e in qcore.datasets.list()]
        assert len(names) >= 20, names
        x = qcore.datasets.load(names[0])
        assert x.size > 0 and np.isfinite(x).all()
        print(names[0], x.shape)
        """)
    proc = _fresh_python(code, tmp_path, site)
    assert proc.returncode == 0, proc.stderr[-3000:]
