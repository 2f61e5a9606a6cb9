"""qcore.io: every loader on good files, and on corrupt, truncated, pickled, oversized, empty
and non-numeric ones (which must raise TensorFileError, never anything else)."""

from __future__ import annotations

import io
import json
import os
import pickle
import sys
import zipfile

import ml_dtypes
import numpy as np
import pytest

from qcore.errors import QuantizationError
from qcore.io import (
    DEFAULT_MAX_BYTES,
    SUPPORTED_EXTENSIONS,
    TensorFileError,
    list_tensors,
    load_all,
    load_tensor,
)

# --------------------------------------------------------------------------- helpers

ST_CODES = {
    np.dtype("float64"): "F64",
    np.dtype("float32"): "F32",
    np.dtype("float16"): "F16",
    np.dtype(ml_dtypes.bfloat16): "BF16",
    np.dtype("int64"): "I64",
    np.dtype("int32"): "I32",
    np.dtype("int16"): "I16",
    np.dtype("int8"): "I8",
    np.dtype("uint8"): "U8",
}


def safetensors_bytes(tensors: dict[str, np.ndarray], metadata: dict | None = None) -> bytes:
    """Write the safetensors format by hand: u64 LE header length, JSON header, raw data."""
    header: dict = {"__metadata__": metadata} if metadata else {}
    blobs, offset = [], 0
    for name, array in tensors.items():
        raw = np.ascontiguousarray(array).tobytes()
        header[name] = {
            "dtype": ST_CODES[array.dtype],
            "shape": list(array.shape),
            "data_offsets": [offset, offset + len(raw)],
        }
        blobs.append(raw)
        offset += len(raw)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    return len(text).to_bytes(8, "little") + text + b"".join(blobs)


def npy_bytes(array: np.ndarray, allow_pickle: bool = False) -> bytes:
    buf = io.BytesIO()
    np.save(buf, array, allow_pickle=allow_pickle)
    return buf.getvalue()


def npz_bytes(compressed: bool = True, **arrays: np.ndarray) -> bytes:
    buf = io.BytesIO()
    (np.savez_compressed if compressed else np.savez)(buf, **arrays)
    return buf.getvalue()


def onnx_model_bytes(initializers: dict[str, np.ndarray]) -> bytes:
    onnx = pytest.importorskip("onnx")
    from onnx import helper, numpy_helper

    inits = [numpy_helper.from_array(a, name) for name, a in initializers.items()]
    names = list(initializers)
    node = helper.make_node("Identity", [names[0]], ["y"])
    out = helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)
    graph = helper.make_graph([node], "g", [], [out], initializer=inits)
    return helper.make_model(graph).SerializeToString()


def write(tmp_path, name: str, data: bytes):
    path = tmp_path / name
    path.write_bytes(data)
    return path


RNG = np.random.default_rng(0)
X = RNG.standard_normal((3, 5)).astype(np.float32)


# --------------------------------------------------------------------------- general


def test_error_type_is_a_quantization_error():
    assert issubclass(TensorFileError, QuantizationError)
    assert issubclass(TensorFileError, ValueError)
    assert DEFAULT_MAX_BYTES == 256 * 2**20


def test_missing_file(tmp_path):
    with pytest.raises(TensorFileError, match="no such file"):
        load_tensor(tmp_path / "nope.npy")


def test_directory(tmp_path):
    (tmp_path / "d.npy").mkdir()
    with pytest.raises(TensorFileError, match="not a regular file"):
        load_tensor(tmp_path / "d.npy")


@pytest.mark.parametrize("ext", SUPPORTED_EXTENSIONS)
def test_empty_file(tmp_path, ext):
    path = write(tmp_path, f"e{ext}", b"")
    with pytest.raises(TensorFileError, match="empty") as info:
        load_tensor(path)
    assert str(path) in str(info.value)
    with pytest.raises(TensorFileError, match="empty"):
        list_tensors(b"", filename=f"e{ext}")


def test_unsupported_extension(tmp_path):
    path = write(tmp_path, "x.pt", b"abc")
    with pytest.raises(TensorFileError, match=r"unsupported file type '\.pt'.*\.safetensors"):
        load_tensor(path)


def test_oversized_path_is_refused_before_reading(tmp_path):
    path = write(tmp_path, "x.npy", npy_bytes(np.zeros(1000, np.float32)))
    with pytest.raises(TensorFileError, match="over the limit") as info:
        load_tensor(path, max_bytes=1000)
    assert "max_bytes" in str(info.value) and "x.npy" in str(info.value)
    assert load_tensor(path, max_bytes=10_000).shape == (1000,)


def test_oversized_bytes_and_file_object():
    data = npy_bytes(np.zeros(1000, np.float32))
    with pytest.raises(TensorFileError, match="over the limit"):
        load_tensor(data, filename="u.npy", max_bytes=100)
    with pytest.raises(TensorFileError, match="over the limit"):
        load_tensor(io.BytesIO(data), filename="u.npy", max_bytes=100)


def test_bytes_are_sniffed_or_need_a_filename():
    assert load_tensor(npy_bytes(X)).shape == X.shape
    assert [n for n, _, _ in list_tensors(npz_bytes(a=X))] == ["a"]
    with pytest.raises(TensorFileError, match="filename="):
        load_tensor(b"1,2,3")
    assert load_tensor(b"1,2,3", filename="t.CSV").tolist() == [1, 2, 3]


def test_file_like_object_uses_its_name():
    upload = io.BytesIO(b"a,b\n1,2\n3,4\n")
    upload.name = "upload.csv"
    assert list_tensors(upload) == [("upload", (2, 2), "float32")]
    np.testing.assert_array_equal(load_tensor(upload), [[1, 2], [3, 4]])  # read twice


def test_plain_binary_file_object(tmp_path):
    path = write(tmp_path, "f.npy", npy_bytes(X))
    with open(path, "rb") as fh:
        np.testing.assert_array_equal(load_tensor(fh), X)
    with open(path, "rb") as fh:
        with pytest.raises(TensorFileError, match="more than"):
            load_tensor(fh, max_bytes=50)
    with open(path) as fh:
        with pytest.raises(TensorFileError, match="binary mode"):
            load_tensor(fh, filename="f.npy")


def test_unknown_source_type():
    with pytest.raises(TensorFileError, match="pass a path"):
        load_tensor(12345)


# --------------------------------------------------------------------------- .npy


@pytest.mark.parametrize(
    "dtype", ["float32", "float16", "float64", "int8", "uint8", "int32", "int64", ">f4", "<i2"]
)
def test_npy_roundtrip(tmp_path, dtype):
    x = (X * 10).astype(dtype)
    path = write(tmp_path, "w.npy", npy_bytes(x))
    y = load_tensor(path)
    np.testing.assert_array_equal(y, x)
    assert y.dtype == x.dtype.newbyteorder("=") and y.flags.writeable and y.flags.c_contiguous
    assert list_tensors(path) == [("w", (3, 5), y.dtype.name)]
    assert load_tensor(path, "w").shape == (3, 5)


def test_npy_fortran_order(tmp_path):
    x = np.asfortranarray(np.arange(24, dtype=np.float32).reshape(2, 3, 4))
    np.testing.assert_array_equal(load_tensor(write(tmp_path, "f.npy", npy_bytes(x))), x)


def test_npy_object_array_is_refused(tmp_path):
    path = write(tmp_path, "o.npy", npy_bytes(np.array([1, "a", None], object), True))
    with pytest.raises(TensorFileError, match="object array") as info:
        load_tensor(path)
    assert "never loaded" in str(info.value)
    with pytest.raises(TensorFileError, match="object array"):
        list_tensors(path)


class _Payload:
    """Unpickling this would create a directory: the loader must never unpickle."""

    def __init__(self, target: str):
        self.target = target

    def __reduce__(self):
        return (os.mkdir, (self.target,))


def test_pickle_disguised_as_npy_is_never_executed(tmp_path):
    target = tmp_path / "pwned"
    path = write(tmp_path, "evil.npy", pickle.dumps(_Payload(str(target))))
    with pytest.raises(TensorFileError, match="pickle"):
        load_tensor(path)
    with pytest.raises(TensorFileError, match="pickle"):
        list_tensors(path)
    assert not target.exists()


def test_npy_truncated(tmp_path):
    data = npy_bytes(X)
    with pytest.raises(TensorFileError, match="truncated") as info:
        load_tensor(write(tmp_path, "t.npy", data[:-7]))
    assert "bytes" in str(info.value)
    with pytest.raises(TensorFileError, match="header"):
        load_tensor(write(tmp_path, "h.npy", data[:20]))


def test_npy_garbage(tmp_path):
    with pytest.raises(TensorFileError, match="not a .npy file"):
        load_tensor(write(tmp_path, "g.npy", b"hello world, not numpy"))


def test_npy_zero_elements(tmp_path):
    path = write(tmp_path, "z.npy", npy_bytes(np.zeros((0, 3), np.float32)))
    assert list_tensors(path) == [("z", (0, 3), "float32")]
    with pytest.raises(TensorFileError, match="no elements"):
        load_tensor(path)


@pytest.mark.parametrize(
    "array, word",
    [
        (np.array(["a", "b"]), "not numeric"),
        (np.array([True, False]), "not numeric"),
        (np.array([1 + 2j]), "not numeric"),
        (np.ones(3, ml_dtypes.bfloat16), "ml_dtypes"),
        (np.zeros(2, dtype=[("a", "f4"), ("b", "i4")]), "not numeric"),
    ],
)
def test_npy_non_numeric(tmp_path, array, word):
    with pytest.raises(TensorFileError, match=word) as info:
        load_tensor(write(tmp_path, "n.npy", npy_bytes(array)))
    assert "valid tensors are" in str(info.value)


def test_npy_wrong_name(tmp_path):
    path = write(tmp_path, "w.npy", npy_bytes(X))
    with pytest.raises(TensorFileError, match="no tensor named 'v'.*'w'"):
        load_tensor(path, "v")


# --------------------------------------------------------------------------- .npz


def test_npz_multi(tmp_path):
    b = np.arange(4, dtype=np.int8)
    path = write(tmp_path, "m.npz", npz_bytes(a=X, b=b))
    assert list_tensors(path) == [("a", (3, 5), "float32"), ("b", (4,), "int8")]
    np.testing.assert_array_equal(load_tensor(path, "b"), b)
    with pytest.raises(TensorFileError, match="holds 2 tensors.*'a', 'b'"):
        load_tensor(path)
    with pytest.raises(TensorFileError, match="no tensor named 'c'; valid names: 'a', 'b'"):
        load_tensor(path, "c")
    assert set(load_all(path)) == {"a", "b"}


@pytest.mark.parametrize("compressed", [True, False])
def test_npz_single(tmp_path, compressed):
    path = write(tmp_path, "s.npz", npz_bytes(compressed, x=X))
    np.testing.assert_array_equal(load_tensor(path), X)


def test_npz_object_member_is_refused(tmp_path):
    path = write(tmp_path, "o.npz", npz_bytes(False, a=X, o=np.array([{}, []], object)))
    with pytest.raises(TensorFileError, match="object array"):
        load_tensor(path, "a")


def test_npz_truncated_and_corrupt(tmp_path):
    data = npz_bytes(x=RNG.standard_normal(1000))
    with pytest.raises(TensorFileError, match="corrupt or truncated"):
        load_tensor(write(tmp_path, "t.npz", data[: len(data) // 2]))
    bad = bytearray(data)
    for i in range(100, 400):
        bad[i] ^= 0x5A
    with pytest.raises(TensorFileError, match="corrupt"):
        load_tensor(write(tmp_path, "c.npz", bytes(bad)))


def test_npz_decompression_bomb(tmp_path):
    path = write(tmp_path, "b.npz", npz_bytes(x=np.zeros(1_000_000)))
    assert path.stat().st_size < 100_000
    with pytest.raises(TensorFileError, match="decompress"):
        load_tensor(path, max_bytes=1_000_000)


def test_npz_foreign_member(tmp_path):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("readme.txt", "hi")
    with pytest.raises(TensorFileError, match="not a .npy array"):
        load_tensor(write(tmp_path, "f.npz", buf.getvalue()))


# --------------------------------------------------------------------------- .safetensors


def test_safetensors_all_dtypes(tmp_path):
    tensors = {
        "f64": RNG.standard_normal(3),
        "f32": X,
        "f16": X.astype(np.float16),
        "bf16": X.astype(ml_dtypes.bfloat16),
        "i64": np.arange(-3, 3, dtype=np.int64),
        "i32": np.arange(-3, 3, dtype=np.int32).reshape(2, 3),
        "i16": np.arange(-3, 3, dtype=np.int16),
        "i8": np.arange(-3, 3, dtype=np.int8),
        "u8": np.arange(6, dtype=np.uint8),
        "scalar": np.array(2.5, np.float32),
    }
    path = write(tmp_path, "m.safetensors", safetensors_bytes(tensors, {"format": "pt"}))
    listed = {n: (s, d) for n, s, d in list_tensors(path)}
    assert set(listed) == set(tensors)
    for name, x in tensors.items():
        y = load_tensor(path, name)
        assert y.dtype == x.dtype and y.shape == x.shape and listed[name] == (x.shape, x.dtype.name)
        np.testing.assert_array_equal(y.astype(np.float64), x.astype(np.float64))
    assert load_tensor(path, "bf16").dtype == np.dtype(ml_dtypes.bfloat16)


def test_safetensors_matches_the_reference_writer(tmp_path):
    st = pytest.importorskip("safetensors.numpy")
    tensors = {"w": X, "h": X.astype(np.float16), "b": X.astype(ml_dtypes.bfloat16)}
    data = st.save(tensors)
    for name, x in tensors.items():
        np.testing.assert_array_equal(load_tensor(data, name, filename="r.safetensors"), x)


def test_safetensors_truncated_data(tmp_path):
    data = safetensors_bytes({"a": X, "b": X})
    path = write(tmp_path, "t.safetensors", data[:-10])
    with pytest.raises(TensorFileError, match="truncated") as info:
        load_tensor(path, "a")
    assert "t.safetensors" in str(info.value) and "'b'" in str(info.value)


def test_safetensors_header_claims_more_than_present(tmp_path):
    data = safetensors_bytes({"a": X})
    forged = (10_000).to_bytes(8, "little") + data[8:]
    with pytest.raises(TensorFileError, match="claims 10000 bytes"):
        load_tensor(write(tmp_path, "h.safetensors", forged))
    huge = (2**63).to_bytes(8, "little") + data[8:]
    with pytest.raises(TensorFileError, match="header claims"):
        load_tensor(write(tmp_path, "g.safetensors", huge))


def test_safetensors_shorter_than_length_field(tmp_path):
    with pytest.raises(TensorFileError, match="8-byte header length"):
        load_tensor(write(tmp_path, "s.safetensors", b"\x01\x02\x03"))


def _forged(header: object, body: bytes = b"\0" * 64) -> bytes:
    text = json.dumps(header).encode()
    return len(text).to_bytes(8, "little") + text + body


@pytest.mark.parametrize(
    "header, word",
    [
        ({"a": {"dtype": "C64", "shape": [2], "data_offsets": [0, 16]}}, "not a safetensors"),
        ({"a": {"dtype": "BOOL", "shape": [2], "data_offsets": [0, 2]}}, "not numeric"),
        ({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 4]}}, "needs 8"),
        ({"a": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}}, "non-negative"),
        ({"a": {"dtype": "F32", "shape": [2]}}, "data_offsets"),
        ({"a": {"dtype": "F32", "shape": [100], "data_offsets": [0, 400]}}, "truncated"),
        ([1, 2, 3], "not a JSON object"),
        ({}, "no tensors"),
    ],
)
def test_safetensors_bad_headers(tmp_path, header, word):
    with pytest.raises(TensorFileError, match=word):
        load_tensor(write(tmp_path, "b.safetensors", _forged(header)))


def test_safetensors_not_json(tmp_path):
    data = (8).to_bytes(8, "little") + b"\xff{nope}\x00" + b"\0" * 8
    with pytest.raises(TensorFileError, match="not valid JSON"):
        load_tensor(write(tmp_path, "j.safetensors", data))


# --------------------------------------------------------------------------- .onnx


def test_onnx_initializers(tmp_path):
    w = X
    h = X.astype(np.float16)
    q = np.arange(-4, 4, dtype=np.int8)
    path = write(tmp_path, "m.onnx", onnx_model_bytes({"w": w, "h": h, "q": q}))
    assert list_tensors(path) == [
        ("w", (3, 5), "float32"),
        ("h", (3, 5), "float16"),
        ("q", (8,), "int8"),
    ]
    np.testing.assert_array_equal(load_tensor(path, "w"), w)
    np.testing.assert_array_equal(load_tensor(path, "h"), h)
    np.testing.assert_array_equal(load_tensor(path, "q"), q)
    with pytest.raises(TensorFileError, match="holds 3 tensors"):
        load_tensor(path)


def test_onnx_made_with_helper_make_tensor(tmp_path):
    onnx = pytest.importorskip("onnx")
    from onnx import helper

    t = helper.make_tensor("t", onnx.TensorProto.FLOAT, [2, 2], [1.0, 2.0, 3.0, 4.0])
    s = helper.make_tensor("s", onnx.TensorProto.STRING, [1], [b"x"])
    out = helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)
    graph = helper.make_graph(
        [helper.make_node("Identity", ["t"], ["y"])], "g", [], [out], initializer=[t, s]
    )
    path = tmp_path / "h.onnx"
    onnx.save(helper.make_model(graph), path)
    np.testing.assert_array_equal(load_tensor(path, "t"), [[1, 2], [3, 4]])
    with pytest.raises(TensorFileError, match="not numeric"):
        load_tensor(path, "s")


def test_onnx_external_data_is_not_loaded(tmp_path):
    onnx = pytest.importorskip("onnx")
    from onnx import helper, numpy_helper

    t = numpy_helper.from_array(X, "w")
    t.ClearField("raw_data")
    t.data_location = onnx.TensorProto.EXTERNAL
    entry = t.external_data.add()
    entry.key, entry.value = "location", "../../etc/passwd"
    out = helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)
    graph = helper.make_graph(
        [helper.make_node("Identity", ["w"], ["y"])], "g", [], [out], initializer=[t]
    )
    path = write(tmp_path, "e.onnx", helper.make_model(graph).SerializeToString())
    assert list_tensors(path) == [("w", (3, 5), "float32")]
    with pytest.raises(TensorFileError, match="external data"):
        load_tensor(path)


def test_onnx_corrupt_and_truncated(tmp_path):
    data = onnx_model_bytes({"w": RNG.standard_normal((20, 20)).astype(np.float32)})
    with pytest.raises(TensorFileError):
        load_tensor(write(tmp_path, "t.onnx", data[: len(data) // 2]))
    with pytest.raises(TensorFileError, match="onnx|ONNX|tensors"):
        load_tensor(write(tmp_path, "g.onnx", b"\xff\xfe this is not protobuf \x00\x01"))


def test_onnx_without_the_onnx_package(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "onnx", None)
    path = write(tmp_path, "m.onnx", b"\x08\x07")
    with pytest.raises(TensorFileError, match="optional 'onnx' package.*pip install onnx"):
        load_tensor(path)


# --------------------------------------------------------------------------- .csv


@pytest.mark.parametrize(
    "text, expected",
    [
        ("1,2,3\n4,5,6\n", [[1, 2, 3], [4, 5, 6]]),
        ("a,b,c\n1,2,3\n4,5,6\n", [[1, 2, 3], [4, 5, 6]]),
        ('"a","b"\n"1","2"\n', [1, 2]),
        ("x\n1.5\n-2\n3e2\n", [1.5, -2, 300]),
        ("1;2\n3;4\n", [[1, 2], [3, 4]]),
        ("1\t2\n3\t4\n", [[1, 2], [3, 4]]),
        ("1 2  3\n", [1, 2, 3]),
        ("# comment\n\n1,2\n\n3,4\n", [[1, 2], [3, 4]]),
        ("\ufeff1,nan\ninf,-inf\n", [[1, np.nan], [np.inf, -np.inf]]),
    ],
)
def test_csv_good(tmp_path, text, expected):
    path = write(tmp_path, "t.csv", text.encode())
    y = load_tensor(path)
    assert y.dtype == np.float32
    np.testing.assert_array_equal(y, np.array(expected, np.float32))
    assert list_tensors(path) == [("t", y.shape, "float32")]


@pytest.mark.parametrize(
    "text, word",
    [
        ("a,b\n1,2\n3,x\n", r"line 3: 'x' is not a number"),
        ("1,2\n3\n", r"line 2 has 1 cells but the first row has 2"),
        ("1,2\n3,4,5\n", r"line 2 has 3 cells"),
        ("a,b\nc,d\n", r"line 2: 'c' is not a number"),
        ("a,b\n", "header row but no numbers"),
        ("# only a comment\n\n", "no numbers"),
        ("1,,2\n", "line 1 has an empty cell"),
        ("a,b\n1,\n", "line 2 has an empty cell"),
    ],
)
def test_csv_bad(tmp_path, text, word):
    with pytest.raises(TensorFileError, match=word) as info:
        load_tensor(write(tmp_path, "bad.csv", text.encode()))
    assert "bad.csv" in str(info.value)


def test_csv_binary(tmp_path):
    with pytest.raises(TensorFileError, match="not a UTF-8 text file"):
        load_tensor(write(tmp_path, "b.csv", bytes(range(128, 256))))


# --------------------------------------------------------------------------- robustness


def _good_files() -> dict[str, bytes]:
    files = {
        "a.npy": npy_bytes(X),
        "a.npz": npz_bytes(a=X, b=X[0]),
        "a.safetensors": safetensors_bytes({"a": X, "b": X.astype(ml_dtypes.bfloat16)}),
        "a.csv": b"p,q\n1,2\n3,4\n",
    }
    try:
        files["a.onnx"] = onnx_model_bytes({"a": X, "b": X[0]})
    except pytest.skip.Exception:
        pass
    return files


@pytest.mark.parametrize("filename", sorted(_good_files()))
def test_every_truncation_and_corruption_raises_only_tensor_file_error(filename):
    data = _good_files()[filename]
    rng = np.random.default_rng(1)
    variants = [data[:n] for n in range(0, len(data), max(1, len(data) // 97))]
    for _ in range(150):
        bad = bytearray(data)
        for i in rng.integers(0, len(bad), size=rng.integers(1, 6)):
            bad[i] = int(rng.integers(0, 256))
        variants.append(bytes(bad))
    for variant in variants:
        try:
            names = [n for n, _, _ in list_tensors(variant, filename=filename)]
            for name in names:
                out = load_tensor(variant, name, filename=filename)
                assert isinstance(out, np.ndarray)
        except TensorFileError as exc:
            assert filename in str(exc)


def test_absurd_shapes_do_not_overflow(tmp_path):
    header = {"a": {"dtype": "F32", "shape": [2**40, 2**40], "data_offsets": [0, 4]}}
    with pytest.raises(TensorFileError, match="header is corrupt"):
        load_tensor(write(tmp_path, "s.safetensors", _forged(header)))
    text = "{'descr': '<f4', 'fortran_order': False, 'shape': (1099511627776, 1099511627776), }"
    text = text.ljust(117) + "\n"
    data = b"\x93NUMPY\x01\x00" + len(text).to_bytes(2, "little") + text.encode() + b"\0" * 16
    with pytest.raises(TensorFileError, match="truncated"):
        load_tensor(write(tmp_path, "h.npy", data))


# --------------------------------------------------------------------------- strict headers


@pytest.mark.parametrize("shape", [[2**32, 2**32], [2**64], [True, 2], [2.0], "12"])
def test_safetensors_shapes_are_exact_non_negative_ints(tmp_path, shape):
    header = {"a": {"dtype": "F32", "shape": shape, "data_offsets": [0, 0]}}
    with pytest.raises(TensorFileError, match="'a'"):
        load_tensor(write(tmp_path, "s.safetensors", _forged(header)))


def test_safetensors_duplicate_names_and_deep_nesting_are_refused(tmp_path):
    entry = '"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}'
    text = ("{" + entry + ", " + entry + "}").encode()
    data = len(text).to_bytes(8, "little") + text + b"\0" * 4
    with pytest.raises(TensorFileError, match="twice"):
        load_tensor(write(tmp_path, "d.safetensors", data))
    text = b'{"a": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    data = len(text).to_bytes(8, "little") + text
    with pytest.raises(TensorFileError, match="nested"):
        load_tensor(write(tmp_path, "n.safetensors", data))


# --------------------------------------------------------------------------- wide .csv


@pytest.mark.parametrize("cell", ["-5", "1e5", "-1.5e-3"])
def test_wide_csv_first_row_is_data_wherever_the_sniff_cut_falls(tmp_path, cell):
    # place `cell` so that the first 65,536 bytes of the line end inside it, at every offset
    for inside in range(1, len(cell)):
        target = 65536 - inside  # the sniffed 64 KiB end `inside` bytes into the cell
        prefix = "1," * (target // 2) if target % 2 == 0 else "10," + "1," * (target // 2 - 1)
        first = prefix + cell + "," + ",".join(["3"] * 69_000)
        n = first.count(",") + 1
        second = ",".join(["4"] * n)
        got = load_tensor(write(tmp_path, "w.csv", (first + "\n" + second + "\n").encode()))
        assert got.shape == (2, n), (cell, inside)
        assert got[1, 0] == 4 and got[0, -1] == 3


WIDE_CSV_MEMORY = """
import sys, numpy as np
import pandas  # imported before the measurement, as the app has it
import qcore.io as qio
n = int(sys.argv[1]); sep = sys.argv[2].replace("TAB", "\\t")
values = (np.arange(n) % 17 - 8).astype(np.float32)
data = sep.join(f"{v:.0f}" for v in values).encode()
def status(key):
    for line in open("/proc/self/status"):
        if line.startswith(key):
            return int(line.split()[1]) / 1024
open("/proc/self/clear_refs", "w").write("5")
base = status("VmRSS")
got = qio.load_tensor(data, filename="w.csv")
assert got.shape == (n,) and np.array_equal(got, values)
print(status("VmHWM") - base)
"""


@pytest.mark.skipif(not os.path.exists("/proc/self/clear_refs"), reason="needs Linux /proc")
@pytest.mark.parametrize("sep", [",", " ", "TAB"])
def test_wide_one_line_csv_is_parsed_in_bounded_memory(sep):
    import subprocess

    n = 3_000_000  # output 11.4 MiB
    out = subprocess.run([sys.executable, "-c", WIDE_CSV_MEMORY, str(n), sep],
                         capture_output=True, text=True, check=True, timeout=300)
    extra_mib = float(out.stdout.strip())
    assert extra_mib < 4 * n / 2**20 + 40, extra_mib  # the output plus a bounded piece
