"""Sub-byte packing against the ONNX storage layout as onnx itself writes it (raw_data of
``numpy_helper.from_array``) and against a bit-by-bit NumPy statement of the rule."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import qcore
from qcore import packing

TYPES = [ml_dtypes.int4, ml_dtypes.uint4, ml_dtypes.float4_e2m1fn, ml_dtypes.int2,
         ml_dtypes.uint2]


def random_codes(dtype, n, seed=0):
    bits = qcore.get_format(dtype).bits
    raw = np.random.default_rng(seed).integers(0, 1 << bits, n).astype(np.uint8)
    if dtype in (ml_dtypes.int4, ml_dtypes.int2):  # sign-extend into the byte
        half = 1 << (bits - 1)
        raw = ((raw.astype(np.int16) ^ half) - half).astype(np.int8).view(np.uint8)
    return raw.view(dtype)


def spec_pack(a) -> bytes:
    """ONNX: element i goes to byte i // per, bits (i % per) * bits upwards; pad with zeros."""
    bits = qcore.get_format(a.dtype).bits
    per = 8 // bits
    codes = a.reshape(-1).view(np.uint8) & ((1 << bits) - 1)
    out = bytearray(-(-codes.size // per))
    for i, c in enumerate(codes.tolist()):
        out[i // per] |= c << ((i % per) * bits)
    return bytes(out)


@pytest.mark.parametrize("dtype", TYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("n", [0, 1, 2, 3, 4, 5, 7, 8, 33, 1000, packing.NUMPY_BELOW + 3])  # NumPy, numba
def test_pack_is_the_spec_layout_and_unpack_inverts_it(dtype, n):
    a = random_codes(dtype, n, seed=n)
    packed = packing.pack(a)
    assert packed.dtype == np.uint8 and packed.size == packing.packed_size(n, dtype)
    assert packed.tobytes() == spec_pack(a)
    back = packing.unpack(packed, dtype, (n,))
    assert back.dtype == np.dtype(dtype)
    mask = (1 << qcore.get_format(dtype).bits) - 1  # the byte's unused high bits carry nothing
    assert np.array_equal(back.view(np.uint8) & mask, a.view(np.uint8) & mask)
    assert np.array_equal(back.astype(np.float64), a.astype(np.float64))


@pytest.mark.parametrize("dtype", TYPES, ids=lambda d: np.dtype(d).name)
def test_pack_matches_onnx(dtype):
    numpy_helper = pytest.importorskip("onnx.numpy_helper")
    for n in (1, 6, 7, 64):
        a = random_codes(dtype, n, seed=n + 1)
        assert packing.pack(a).tobytes() == numpy_helper.from_array(a).raw_data


def test_hand_examples():
    assert packing.pack(np.array([1, -1, 7], ml_dtypes.int4)).tolist() == [0xF1, 0x07]
    assert packing.pack(np.array([1, 2, 3, 0, 3], ml_dtypes.uint2)).tolist() == [0b00111001, 3]
    two_d = np.array([[1, 2], [3, 4]], ml_dtypes.uint4)
    assert packing.pack(two_d).tolist() == [0x21, 0x43]  # row-major
    assert packing.unpack(np.array([0x21, 0x43], np.uint8), ml_dtypes.uint4, (2, 2)).tolist() \
        == two_d.tolist()
    assert packing.unpack(bytes([0x21]), "uint4", 2).tolist() == [1, 2]


def test_errors():
    with pytest.raises(qcore.QuantizationError, match="int8 is 8-bit"):
        packing.pack(np.zeros(4, np.int8))
    with pytest.raises(qcore.QuantizationError, match="expected 2 bytes"):
        packing.unpack(np.zeros(3, np.uint8), ml_dtypes.int4, (4,))
    with pytest.raises(qcore.QuantizationError):
        packing.packed_size(3, "float8e4m3fn")
