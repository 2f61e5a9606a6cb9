"""The report on hostile files: every bad header, shape, offset or value is an error row (or one
clear TensorFileError), never a silently wrong row or a stray exception."""

from __future__ import annotations

import json
import struct
import zipfile
from pathlib import Path

import numpy as np
import pytest

from qcore.errors import QuantizationError
from qcore.formats import get_format
from qcore.io import TensorFileError, load_tensor
from qcore.report import list_tensors, read_tensor, run_report, sources

RECIPES = ["int8:per-axis", "uint8:per-tensor"]


def raw_safetensors(path: Path, header_text: str, body: bytes) -> Path:
    hb = header_text.encode()
    path.write_bytes(struct.pack("<Q", len(hb)) + hb + body)
    return path


def good_entry(begin: int = 0) -> tuple[str, bytes]:
    w = np.arange(8, dtype=np.float32).reshape(2, 4) - 3.5
    return (f'"good": {{"dtype": "F32", "shape": [2, 4], "data_offsets": [{begin}, '
            f'{begin + 32}]}}'), w.tobytes()


def rows_of(path: Path):
    return run_report(path, RECIPES).rows


@pytest.mark.parametrize("shape, word", [
    ("[4294967296, 4294967296]", "needs"),  # 2**64 elements: no wrap to 0
    ("[18446744073709551616]", "needs"),  # 2**64 in one dimension
    ('"12"', "not a list"),
    ("[2.9]", "not a list"),
    ("[true, 2]", "not a list"),
    ("[-1]", "not a list"),
])
def test_bad_shapes_are_error_rows_and_the_rest_is_reported(tmp_path, shape, word):
    good, body = good_entry()
    text = "{" + good + f', "bad": {{"dtype": "F32", "shape": {shape}, "data_offsets": [32, 32]}}}}'
    rows = rows_of(raw_safetensors(tmp_path / "m.safetensors", text, body))
    ok, bad = rows[rows["tensor"] == "good"], rows[rows["tensor"] == "bad"]
    assert len(ok) == 2 and (ok["error"] == "").all() and (ok["absmax"] == 3.5).all()
    assert len(bad) == 2
    for msg in bad["error"]:
        assert "m.safetensors" in msg and "'bad'" in msg and word in msg


def test_duplicate_names_refuse_the_file(tmp_path):
    good, body = good_entry()
    text = "{" + good + ", " + good + "}"
    path = raw_safetensors(tmp_path / "d.safetensors", text, body)
    (ref,) = list_tensors(path)
    assert ref.error and "'good' twice" in ref.error
    rows = rows_of(path)
    assert (rows["error"].str.contains("twice")).all()
    with pytest.raises(TensorFileError, match="twice"):
        load_tensor(path)


@pytest.mark.parametrize("offsets, word", [
    ("[16, 48]", "overlap"),  # inside good's bytes
    ("[0, 32]", "overlap"),  # the very same bytes
    ("[40, 8]", "end before"),
    ("[32, 64]", "truncated"),  # past the end of the file
])
def test_overlapping_reversed_and_out_of_file_offsets(tmp_path, offsets, word):
    good, body = good_entry()
    text = "{" + good + f', "bad": {{"dtype": "F32", "shape": [8], "data_offsets": {offsets}}}}}'
    path = raw_safetensors(tmp_path / "o.safetensors", text, body)
    refs = {r.name: r for r in list_tensors(path)}
    assert word in refs["bad"].error and not refs["good"].error
    rows = rows_of(path)
    assert (rows[rows["tensor"] == "bad"]["error"].str.contains(word)).all()
    with pytest.raises(TensorFileError, match=word):
        load_tensor(path, "good")  # qcore.io refuses the whole file


def test_deeply_nested_header_and_index_are_clear_errors(tmp_path):
    deep = "[" * 10_000 + "]" * 10_000
    path = raw_safetensors(tmp_path / "n.safetensors", '{"x": ' + deep + "}", b"")
    (ref,) = list_tensors(path)
    assert "nested" in ref.error
    assert "nested" in rows_of(path)["error"].iloc[0]
    with pytest.raises(TensorFileError, match="nested"):
        load_tensor(path)
    folder = tmp_path / "sharded"
    folder.mkdir()
    (folder / "model.safetensors.index.json").write_text('{"weight_map": ' + deep + "}")
    with pytest.raises(TensorFileError, match="nested"):
        list_tensors(folder)
    with pytest.raises(TensorFileError, match="nested"):
        run_report(folder / "model.safetensors.index.json", RECIPES)


def test_deeply_nested_output_dtype_string_is_a_quantization_error():
    with pytest.raises(QuantizationError, match="not a type name"):
        get_format("tensor(" * 5000 + "int8" + ")" * 5000, "output_dtype")
    assert get_format("tensor(int8)").name == "int8"


@pytest.mark.parametrize("fill", [np.nan, np.inf, -np.inf])
def test_a_tensor_without_finite_values_is_an_error_row(tmp_path, fill):
    good, body = good_entry()
    bad = np.full(6, fill, np.float32)
    text = ("{" + good + ', "bad": {"dtype": "F32", "shape": [2, 3], "data_offsets": [32, 56]}}')
    rows = rows_of(raw_safetensors(tmp_path / "f.safetensors", text, body + bad.tobytes()))
    bad_rows = rows[rows["tensor"] == "bad"]
    assert len(bad_rows) == 2
    assert bad_rows["error"].str.contains("no finite value").all()
    assert (rows[rows["tensor"] == "good"]["error"] == "").all()


def _onnx_external(tmp_path: Path, offset: str, length: str | None = None) -> Path:
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    (tmp_path / "w.bin").write_bytes(np.ones(64, np.float32).tobytes())
    t = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[8, 8])
    t.data_location = TensorProto.EXTERNAL
    for k, v in [("location", "w.bin"), ("offset", offset)] + (
            [("length", length)] if length is not None else []):
        e = t.external_data.add()
        e.key, e.value = k, v
    graph = helper.make_graph([], "g", [], [], initializer=[t])
    path = tmp_path / "m.onnx"
    onnx.save_model(helper.make_model(graph), path)
    return path


@pytest.mark.parametrize("offset, length, word", [
    ("-8", None, "non-negative"),
    ("abc", None, "non-negative"),
    ("0", "-256", "non-negative"),
    ("99999999999999999999", None, "truncated"),
    ("8", None, "truncated"),  # 256 bytes from 8 run past the 256-byte file
])
def test_onnx_external_offsets_are_checked(tmp_path, offset, length, word):
    path = _onnx_external(tmp_path, offset, length)
    rows = rows_of(path)
    assert len(rows) == 2
    for msg in rows["error"]:
        assert "m.onnx" in msg or "w.bin" in msg
        assert "'w'" in msg and word in msg


def test_onnx_external_good_offset_reads(tmp_path):
    path = _onnx_external(tmp_path, "0")
    rows = rows_of(path)
    assert (rows["error"] == "").all() and (rows["absmax"] == 1.0).all()


def test_compressed_npz_member_over_the_byte_limit_is_not_inflated(tmp_path, monkeypatch):
    path = tmp_path / "z.npz"
    np.savez_compressed(path, big=np.zeros(1 << 16, np.float32), small=np.ones(4, np.float32))
    monkeypatch.setattr(sources, "DEFAULT_MAX_BYTES", 1 << 16)  # 64 KiB; big is 256 KiB
    refs = {r.name: r for r in list_tensors(path)}
    with pytest.raises(TensorFileError, match="over the"):
        read_tensor(refs["big"])
    np.testing.assert_array_equal(read_tensor(refs["small"]), np.ones(4, np.float32))


def test_npy_with_a_corrupt_header_is_an_error_row(tmp_path):
    header = b"{'descr': '<f4', 'fortran_order': False, 'shape': " + b"(" * 3000 + b")" * 3000
    header += b", }"
    header = header.ljust(((len(header) + 11) // 64 + 1) * 64 - 11) + b"\n"
    (tmp_path / "h.npy").write_bytes(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header))
                                     + header)
    np.save(tmp_path / "ok.npy", np.ones(4, np.float32))
    rows = run_report(tmp_path, RECIPES).rows
    assert (rows[rows["tensor"] == "ok"]["error"] == "").all()
    assert rows[rows["file"] == "h.npy"]["error"].str.contains("h.npy").all()


def test_zip_that_is_not_an_npz_is_an_error_row(tmp_path):
    with zipfile.ZipFile(tmp_path / "x.npz", "w") as zf:
        zf.writestr("a.npy", b"not an array")
    rows = run_report(tmp_path, RECIPES).rows
    assert rows["error"].str.contains("x.npz").all()


def test_index_with_non_string_shards_is_clear(tmp_path):
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(
        {"weight_map": {"a": ["x"]}}))
    with pytest.raises(TensorFileError, match="index"):
        list_tensors(tmp_path)
