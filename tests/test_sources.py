"""app.sources: the model pages' uploads and server paths."""

from __future__ import annotations

from pathlib import Path

import pytest

from app import sources
from qcore.errors import QuantizationError
from qcore.io import DEFAULT_MAX_BYTES


def test_an_upload_is_written_once_per_content_under_its_base_name():
    first = sources.saved_upload("../../etc/model.onnx", b"abc")
    again = sources.saved_upload("model.onnx", b"abc")
    other = sources.saved_upload("model.onnx", b"abd")
    assert first == again != other
    assert Path(first).name == "model.onnx" and Path(first).read_bytes() == b"abc"
    assert Path(other).read_bytes() == b"abd"
    assert not list(Path(first).parent.glob("*.partial"))


@pytest.mark.parametrize("name", ["..", "a/..", "", ".", "x\x00y.onnx"])
def test_an_upload_name_never_leads_out_of_its_folder(name):
    path = Path(sources.saved_upload(name, b"hostile " + name.encode()))
    assert path.is_file() and path.read_bytes() == b"hostile " + name.encode()
    assert path.parent.name.startswith("qcore-upload-") and "\x00" not in str(path)


def test_an_upload_over_the_limit_is_refused():
    with pytest.raises(QuantizationError, match=r"big.npz: 256 MiB, over the 256 MiB an upload"):
        sources.saved_upload("big.npz", bytes(DEFAULT_MAX_BYTES + 1))


def test_paths_resolve_inside_the_allowed_folders_only(tmp_path, monkeypatch):
    monkeypatch.setenv("QCORE_REPORT_ROOTS", str(tmp_path / "ok"))
    (tmp_path / "ok").mkdir()
    assert sources.allowed(str(tmp_path / "ok" / "m.onnx")) == str(tmp_path / "ok" / "m.onnx")
    for bad in (str(tmp_path / "ok" / ".." / "m.onnx"), "/etc/passwd"):
        with pytest.raises(QuantizationError, match="allowed folders"):
            sources.allowed(bad)
