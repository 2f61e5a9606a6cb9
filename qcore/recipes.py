"""Named, ONNX-expressible quantization recipes and what one recipe does to one tensor.

A recipe is ``TARGET:GRANULARITY[@METHOD]`` — e.g. ``int8:per-axis``, ``uint8:per-tensor``,
``int4:blocked32``, ``float8e4m3fn:per-tensor@percentile`` — or one of the OCP Microscaling
names (``mxfp8``, ``mxfp8e5m2``, ``mxfp6``, ``mxfp6e3m2``, ``mxfp4``, ``mxint8``).

- TARGET: any type QuantizeLinear produces (``qcore.QUANTIZED_TYPES``).
- GRANULARITY: ``per-tensor``; ``per-axis`` (one scale per output channel); ``blockedN``
  (blocks of N along the reduction axis, the last block short when N does not divide it).
  The axes come from the weight's role in its graph (:mod:`qcore.io.onnx`: MatMul B [K, N]:
  output axis 1, blocks along K; Conv W: output axis 0, blocks along I ...); a tensor without
  a graph (a checkpoint in the report) is (out, in): per-axis on axis 0, blocks along the last
  axis. ``/AXIS`` names the axis explicitly: ``int8:per-axis/1`` (scales along axis 1),
  ``int4:blocked32/0`` (blocks along axis 0).
  Tensors of rank <= 1 take ``per-tensor`` for ``per-axis`` recipes (one scale per element
  measures nothing), and 0-d tensors take ``per-tensor`` for every recipe.
- METHOD: a calibration method of :mod:`qcore.calibration` (``minmax``, ``absmax``,
  ``percentile``, ``mse``, ``mx``), or ``fullrange`` for signed integers
  (:mod:`qcore.fullrange`: the largest magnitude maps to the most negative code, −8 for int4,
  as onnxruntime's 4-bit quantizers do; ``absmax`` maps it to +7 and leaves −8 unused), or
  ``fullrange-mse`` (the same codes, each group's clip searched for the least squared error).
  Default (:func:`default_method`): ``minmax`` (asymmetric) for unsigned integers,
  ``fullrange`` for int4 and int2, ``absmax`` (symmetric) otherwise; ``int4:blocked32@absmax``
  names the ±7 codes.
- MX recipes: blocks of 32 along the reduction axis (a tensor without a graph: the last axis),
  float8e8m0 scales by the OCP rule
  2^(floor(log2 amax) - emax) with emax the element format's largest exponent (e4m3: 8,
  e5m2: 15, e2m3: 2, e3m2: 4, e2m1: 2, int8: 6) — :func:`qcore.calibration.mx_scale`.

Every recipe runs through ``qcore.quantize_linear`` / ``qcore.dequantize_linear`` at the oldest
opset whose operator versions express it (derived from ``qcore.versions``; recorded in each row).
A zero point is stored when it is not all zero, or when the opset predates ``output_dtype``
(21) so that only a zero point can name the output type (:func:`qcore.metrics.stores_zero_point`,
the one rule every page shares); symmetric recipes at opset >= 21 store none. Bits per element
count the target's bits plus every scale and stored zero point amortised over the tensor; bytes
are the packed storage (sub-byte types packed as ONNX stores them) plus scales and zero points.
"""

from __future__ import annotations

import functools
import math
import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from . import metrics
from .calibration import METHODS
from .errors import QuantizationError
from .formats import INT, QUANTIZED_TYPES, get_format
from .fullrange import FULLRANGE, FULLRANGE_METHODS
from .layout import BLOCKED, PER_AXIS, PER_TENSOR
from .ops import plan_dequantize, plan_quantize
from .quant_params import QuantParams
from .versions import QUANTIZE, versions

__all__ = ["DEFAULT_RECIPES", "MX_RECIPES", "Recipe", "asks_zero_point", "describe",
           "granularity_for", "parse_recipe", "parse_recipes", "recipe_names", "required_opset",
           "stores_zero_point", "weight_layout"]

#: OCP Microscaling names -> element type (blocks of 32, float8e8m0 scales).
MX_RECIPES = {
    "mxfp8": "float8e4m3fn",
    "mxfp8e5m2": "float8e5m2",
    "mxfp6": "float6e2m3",
    "mxfp6e3m2": "float6e3m2",
    "mxfp4": "float4e2m1",
    "mxint8": "int8",
}
MX_BLOCK = 32

#: The eight recipes a report runs when none are named.
DEFAULT_RECIPES = (
    "int8:per-axis",
    "uint8:per-tensor",
    "int4:blocked32",
    "int4:blocked128",
    "float8e4m3fn:per-tensor",
    "float8e4m3fn:per-axis",
    "mxfp8",
    "mxfp4",
)

#: Recipes the page and ``--list-recipes`` offer (any TARGET:GRANULARITY also works).
CATALOGUE = DEFAULT_RECIPES + (
    "int8:per-tensor", "int4:per-axis", "uint4:blocked32", "float8e5m2:per-tensor",
    "float4e2m1:blocked32", "mxfp8e5m2", "mxfp6", "mxfp6e3m2", "mxint8",
)

CALIBRATION_METHODS = tuple(m for m in METHODS if m != "manual")
#: Methods a recipe may name: the calibration methods and ``fullrange`` (:mod:`qcore.fullrange`:
#: symmetric integer codes whose largest magnitude maps to the most negative code).
RECIPE_METHODS = CALIBRATION_METHODS + FULLRANGE_METHODS
_GRAN = re.compile(r"^(per-tensor|per-axis|blocked(\d+))(?:/(\d+))?$")


@dataclass(frozen=True)
class Recipe:
    """One quantization configuration, applied to every tensor of a model."""

    name: str  # canonical spelling, e.g. "int4:blocked32" or "mxfp4@mx"
    target: str
    granularity: str  # per-tensor / per-axis / blocked
    block_size: int  # 0 unless blocked
    method: str
    scale_dtype: str  # "float" (float32) or "float8e8m0"
    axis: int | None = None  # an explicit axis (``/AXIS``); None: the weight's role decides

    @property
    def mx(self) -> bool:
        return self.scale_dtype == "float8e8m0"


def default_method(fmt: Any) -> str:
    """The method a recipe without ``@METHOD`` uses: ``minmax`` (asymmetric) for unsigned
    integers, ``fullrange`` for signed integers of at most 4 bits (their 16 or 4 codes are
    few: the most negative one earns about 1 dB on MiniLM's int4 projections, docs/report.md),
    ``absmax`` otherwise."""
    if fmt.kind == INT and not fmt.signed:
        return "minmax"
    if fmt.kind == INT and fmt.bits <= 4:
        return FULLRANGE
    return "absmax"


def parse_recipe(spec: str) -> Recipe:
    """A :class:`Recipe` from its name (raises QuantizationError saying what is valid)."""
    text = str(spec).strip()
    base, _, method = text.partition("@")
    base, method = base.strip().lower(), method.strip().lower()
    valid = ("valid: TARGET:per-tensor, TARGET:per-axis[/AXIS], TARGET:blockedN[/AXIS] with "
             "TARGET one of "
             + ", ".join(QUANTIZED_TYPES) + "; or " + ", ".join(MX_RECIPES)
             + "; optionally @METHOD with METHOD one of " + ", ".join(CALIBRATION_METHODS))
    if base in MX_RECIPES:
        if method and method != "mx":
            raise QuantizationError(f"recipe {spec!r}: MX recipes use the OCP scale rule "
                                    f"(@mx); {valid}")
        return Recipe(base, MX_RECIPES[base], BLOCKED, MX_BLOCK, "mx", "float8e8m0")
    target, sep, gran = base.partition(":")
    if not sep or target not in QUANTIZED_TYPES:
        raise QuantizationError(f"recipe {spec!r} is not a recipe; {valid}")
    m = _GRAN.match(gran)
    if not m:
        raise QuantizationError(f"recipe {spec!r}: granularity {gran!r} is not valid; {valid}")
    fmt = get_format(target)
    default = default_method(fmt)
    method = method or default
    if method not in RECIPE_METHODS:
        raise QuantizationError(f"recipe {spec!r}: calibration {method!r} is not valid; valid: "
                                + ", ".join(RECIPE_METHODS))
    if method in FULLRANGE_METHODS and not (fmt.kind == INT and fmt.signed):
        raise QuantizationError(f"recipe {spec!r}: @{method} is for signed integer "
                                f"targets (int2, int4, int8, ...); {target} is not one")
    axis = int(m.group(3)) if m.group(3) is not None else None
    if axis is not None and m.group(1) == "per-tensor":
        raise QuantizationError(f"recipe {spec!r}: per-tensor has no axis; {valid}")
    block = int(m.group(2)) if m.group(2) else 0
    if m.group(2) is not None and block < 1:
        raise QuantizationError(f"recipe {spec!r}: the block size must be >= 1")
    granularity = BLOCKED if block else (PER_AXIS if m.group(1) == "per-axis" else PER_TENSOR)
    name = f"{target}:{gran}" + ("" if method == default else f"@{method}")
    scale = "float8e8m0" if method == "mx" else "float"
    return Recipe(name, target, granularity, block, method, scale, axis)


def parse_recipes(specs: Any) -> list[Recipe]:
    """Recipes from names (a list, or one comma-separated string); duplicates dropped."""
    if isinstance(specs, str):
        specs = [s for s in specs.split(",") if s.strip()]
    out: dict[str, Recipe] = {}
    for s in specs:
        r = parse_recipe(s)
        out.setdefault(r.name, r)
    if not out:
        raise QuantizationError("no recipes given; e.g. " + ", ".join(DEFAULT_RECIPES))
    return list(out.values())


def recipe_names() -> tuple[str, ...]:
    """The catalogue of named recipes."""
    return CATALOGUE


def describe(recipe: Recipe | str) -> str:
    """One sentence saying what a recipe does."""
    r = parse_recipe(recipe) if isinstance(recipe, str) else recipe
    if r.mx:
        return (f"OCP Microscaling: {r.target} elements in blocks of {r.block_size} along the "
                f"reduction axis, each block with a float8e8m0 power-of-two scale.")
    where = "" if r.axis is None else f" (axis {r.axis})"
    gran = {PER_TENSOR: "one scale for the tensor",
            PER_AXIS: "one scale per output channel" + (where or " (the weight's output axis)"),
            BLOCKED: f"one scale per {r.block_size} elements along "
                     + (f"axis {r.axis}" if r.axis is not None else "the reduction axis")}
    return f"{r.target}, {gran[r.granularity]}, calibrated by {r.method}."


# ---------------------------------------------------------------------------------------------
# what a recipe is on a tensor of a given shape


def granularity_for(recipe: Any, shape: tuple[int, ...], role: Any = None
                    ) -> tuple[str, int, int]:
    """(granularity, axis, block_size) the recipe uses on a tensor of this shape.

    The axis: the recipe's explicit one (``int8:per-axis/1``) if it names one; else, given the
    weight's ``role`` (:class:`qcore.io.onnx.Role`), its output axis for per-axis and its
    reduction axis for blocks; else the (out, in) convention of a checkpoint without a graph:
    per-axis along axis 0, blocks along the last axis."""
    ndim = len(shape)
    if ndim == 0 or recipe.granularity == PER_TENSOR:
        return PER_TENSOR, 0, 0
    if recipe.granularity == PER_AXIS and ndim == 1:
        return PER_TENSOR, 0, 0
    explicit = getattr(recipe, "axis", None)
    if explicit is not None:
        if explicit >= ndim:
            raise QuantizationError(f"recipe {recipe.name!r} names axis {explicit}, but the "
                                    f"tensor has shape {tuple(shape)} ({ndim} axes)")
        axis = explicit
    elif role is not None:
        out_axis, red_axis = role.axes(ndim)
        axis = out_axis if recipe.granularity == PER_AXIS else red_axis
    else:
        axis = 0 if recipe.granularity == PER_AXIS else ndim - 1
    if recipe.granularity == PER_AXIS:
        return PER_AXIS, axis, 0
    return BLOCKED, axis, recipe.block_size


def weight_layout(recipe: Any, shape: tuple[int, ...], role: Any = None
                  ) -> tuple[str, int, int, tuple[int, ...] | None]:
    """(granularity, axis, block size, view) of a recipe on a weight of this shape and role.

    Per-axis follows the role's output axis, blocks its reduction axis
    (:func:`granularity_for`). A Conv kernel (O, I/g, k...) under a
    blocked recipe without an explicit axis takes, of three layouts, the one with the fewest
    scales (the fewest bits; ties in this order):

    1. blocks along I (what runtime kernels expect; exact when N divides I);
    2. one scale per output channel, when a row of I·k elements is shorter than two blocks
       (depthwise and few-channel kernels: one scale covers at most 2N - 1 elements);
    3. blocks over I·k together: the [O, I·k] view, DequantizeLinear on the 2-D codes then a
       Reshape (kernels larger than 1 whose I is not a multiple of N).

    ``view`` is the 2-D shape quantized in case 3, else None. The one rule the report and the
    model tool (:func:`qcore.model.fidelity.qdq`) share."""
    gran, axis, block = granularity_for(recipe, shape, role)
    if (gran == BLOCKED and role is not None and role.kernel and recipe.axis is None
            and len(shape) >= 3 and axis == 1):
        o, i, k = shape[0], shape[1], math.prod(shape[2:])
        along_i = o * -(-i // block) * k
        per_row = o if i * k < 2 * block else None
        flat = o * -(-(i * k) // block)
        best = min(x for x in (along_i, per_row, flat) if x is not None)
        if best == along_i:
            return gran, 1, block, None
        if best == per_row:
            return PER_AXIS, 0, 0, None
        return gran, 1, block, (o, i * k)
    return gran, axis, block, None


def stores_zero_point(params: QuantParams, opset: int) -> bool:
    """Whether the ONNX graph for these parameters carries a zero point: the one rule,
    :func:`qcore.metrics.stores_zero_point`."""
    return metrics.stores_zero_point(params, opset)


def asks_zero_point(params: QuantParams) -> bool:
    """Whether the operators must be given these parameters' zero point to express them (the
    ``zero_point`` of :func:`required_opset`): any but a signed target's all-zero one, which
    the absent zero point of opset >= 21 already means."""
    zp = params.zero_point
    return zp is not None and not (params.format.signed
                                   and not np.any(np.asarray(zp).astype(np.int64)))


@functools.lru_cache(maxsize=512)
def required_opset(target: str, scale_dtype: str, x_shape: tuple[int, ...],
                   scale_shape: tuple[int, ...], zero_point: bool, axis: int,
                   block_size: int) -> int:
    """The oldest opset at which QuantizeLinear and DequantizeLinear both accept this
    configuration (float32 x, float32 output); ``zero_point``: an asymmetric zero point."""
    for opset in versions(QUANTIZE):
        zp = target if (zero_point or opset < 21) else None
        out = None if opset < 21 else target
        try:
            plan_quantize("float", x_shape, scale_dtype, scale_shape, zp,
                          scale_shape if zp else None, axis=axis, block_size=block_size,
                          output_dtype=out, opset=opset)
            plan_dequantize(target, x_shape, scale_dtype, scale_shape, zp,
                            scale_shape if zp else None, axis=axis, block_size=block_size,
                            opset=opset)
        except QuantizationError:
            continue
        return opset
    raise QuantizationError(f"no opset expresses {target} with {scale_dtype} scales of shape "
                            f"{scale_shape} for x of shape {x_shape}")
