"""qcore: bit-exact, fast ONNX QuantizeLinear / DequantizeLinear / DynamicQuantizeLinear."""

from .errors import QuantizationError
from .formats import FORMATS, HIGH_PRECISION_TYPES, QUANTIZED_TYPES, Format, get_format
from .layout import BLOCKED, GRANULARITIES, PER_AXIS, PER_TENSOR, Layout, block_size_range
from .ops import (
    dequantize_linear,
    dynamic_quantize_linear,
    plan_dequantize,
    plan_quantize,
    quantize_linear,
)
from .versions import DEQUANTIZE, DYNAMIC, LATEST_OPSET, OPERATORS, QUANTIZE, resolve
from .warmup import warmup

__version__ = "0.1.0"


#: Submodules reachable as ``qcore.<name>`` after a bare ``import qcore``, imported on first use
#: (so ``import qcore`` stays fast and pulls in no optional dependency).
_LAZY_SUBMODULES = frozenset({"analysis", "bench", "calibration", "datasets", "io", "metrics",
                              "packing", "synthetic"})


def __getattr__(name: str):
    if name in _LAZY_SUBMODULES:
        import importlib

        module = importlib.import_module(f".{name}", __name__)
        globals()[name] = module
        return module
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | _LAZY_SUBMODULES)


def cuda_available() -> bool:
    """Whether ``backend="cuda"`` can run here (a usable GPU, or numba's CUDA simulator)."""
    from .kernels.cuda import cuda_available as available  # numba.cuda only when asked

    return available()


__all__ = [
    "BLOCKED", "DEQUANTIZE", "DYNAMIC", "FORMATS", "GRANULARITIES", "HIGH_PRECISION_TYPES",
    "LATEST_OPSET", "OPERATORS", "PER_AXIS", "PER_TENSOR", "QUANTIZE", "QUANTIZED_TYPES",
    "Format", "Layout", "QuantizationError", "block_size_range", "cuda_available",
    "dequantize_linear",
    "dynamic_quantize_linear", "get_format", "plan_dequantize", "plan_quantize",
    "quantize_linear", "resolve", "warmup",
]
