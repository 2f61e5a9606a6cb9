"""The numba options every ``@njit`` function of :mod:`qcore.kernels` compiles with.

``error_model="numpy"``: a float division by zero gives inf or NaN as IEEE (and ONNX) do, with
no Python-style zero check in the loops. ``INLINE``: a helper inlined into its caller at
numba's IR level.
"""

from __future__ import annotations

JIT = {"cache": True, "nogil": True, "error_model": "numpy"}
INLINE = {"inline": "always", **JIT}
