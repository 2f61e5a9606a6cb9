"""The export forms: how one planned weight (and its node's activation site) is written so that
onnxruntime turns it into an integer kernel (docs/model.md, "Export forms").

:data:`REGISTRY` lists every form, in the order :func:`form_of` tries them; the first whose
activation test takes the node's site spec and whose weight test takes the recipe is the
weight's form. Each form is one module here holding its :class:`~qcore.model.forms.base.Form`
(name, node ops, activation and weight tests, the kernels it fuses into, its writer):

- ``matmulnbits-node`` (:mod:`.nbits`) — weight-only int4/uint4 blocked along K → MatMulNBits;
- ``dq-matmul`` (:mod:`.weight_only`) — weight-only 4/8-bit integer codes → DequantizeLinear →
  MatMul, fused into MatMulNBits;
- ``dynamic`` (:mod:`.dynamic`) — DynamicQuantizeLinear → MatMulInteger;
- ``static`` (:mod:`.static`) — QDQ with an int32 bias → QGemm / QLinearMatMul / QLinearConv;
- ``qdq`` (:mod:`.qdq`) — any other activation spec: runs, nothing fuses;
- ``dq`` (:mod:`.weight_only`) — any other weight-only recipe: the plain export.

Adding a form: a module with its ``Form`` and one line in :data:`REGISTRY` (before the forms it
should win over). :func:`qcore.model.deployable.deployable_export` writes the forms.
"""

from __future__ import annotations

from ...errors import QuantizationError
from ...recipes import Recipe, parse_recipe
from ..sites import ActivationSpec
from . import dynamic, nbits, qdq, static, weight_only
from .base import Form
from .nbits import NBITS_FORMS

__all__ = ["BY_NAME", "FORMS", "FUSED_OPS", "NBITS_FORMS", "REGISTRY", "Form", "form_of"]

#: Every export form, in the order :func:`form_of` tries them.
REGISTRY: tuple[Form, ...] = (
    nbits.MATMULNBITS_NODE,
    weight_only.DQ_MATMUL,
    dynamic.DYNAMIC,
    static.STATIC,
    qdq.QDQ,
    weight_only.DQ,
)
BY_NAME: dict[str, Form] = {f.name: f for f in REGISTRY}
#: The export forms' names.
FORMS = tuple(BY_NAME)
#: The onnxruntime kernels each form fuses into (empty: nothing fuses).
FUSED_OPS: dict[str, frozenset[str]] = {f.name: f.fuses for f in REGISTRY}


def form_of(recipe: Recipe | str, spec: ActivationSpec | None,
            nbits_form: str = "matmulnbits-node") -> str:
    """The form (:data:`FORMS`) a weight of this recipe, read by a node whose activation site
    has ``spec``, is exported in; ``nbits_form`` (:data:`NBITS_FORMS`) for int4/uint4 blocked
    along K."""
    if nbits_form not in NBITS_FORMS:
        raise QuantizationError(f"nbits_form {nbits_form!r}: valid are {', '.join(NBITS_FORMS)}")
    r = parse_recipe(recipe) if isinstance(recipe, str) else recipe
    return next(f.name for f in REGISTRY if f.activation(spec) and f.weights(r, nbits_form))
