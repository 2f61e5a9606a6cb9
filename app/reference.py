"""The reference pages' tables: Number Formats (every code of a format, the spacing of its
values, its specials, the float8 tables of the Cast operator's documentation) and Operator
Versions (qcore's version table, type support by version, one configuration checked at every
version). Every number comes from qcore; the functions are pure, like :mod:`app.compute`'s.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import streamlit as st

import qcore
from qcore import versions as qversions
from qcore.codes import (
    bit_string,
    code_bits,
    code_classes,
    code_fields,
    positive_values,
    special_inputs,
)

from .compute import OPSETS, opset_span
from .text import fmt_value

# --------------------------------------------------------------------------- number formats


@st.cache_data(max_entries=32, show_spinner=False)
def format_codes(name: str) -> pd.DataFrame:
    """Every code of a <= 8-bit format: hex, bits (fields), sign/exponent/mantissa, value."""
    fmt = qcore.get_format(name)
    codes = fmt.all_codes()
    patterns = code_bits(fmt, codes)
    order = np.argsort(patterns, kind="stable")
    patterns, values = patterns[order], fmt.all_values()[order]
    classes = code_classes(fmt)[order]
    df = pd.DataFrame({
        "code": [f"0x{int(p):0{max(1, (fmt.bits + 3) // 4)}X}" for p in patterns],
        "bits": [bit_string(p, fmt) for p in patterns],
        "value": [fmt_value(v) for v in values],
        "class": classes,
        "numeric": values,
    })
    if fmt.is_float:
        sign, exponent, mantissa = code_fields(fmt, patterns)
        df.insert(2, "sign", sign)
        df.insert(3, "exponent", exponent)
        df.insert(4, "mantissa", mantissa)
    elif fmt.kind == "scale":
        df.insert(2, "exponent", patterns)
    return df


@st.cache_data(max_entries=32, show_spinner=False)
def format_spacing(name: str) -> pd.DataFrame:
    """Positive finite values of a format and the gap to the next one."""
    v = positive_values(qcore.get_format(name))
    if v.size == 0:
        return pd.DataFrame({"value": [], "gap": [], "relative gap": []})
    gap = np.diff(v)
    return pd.DataFrame({"value": v[:-1], "gap": gap, "relative gap": gap / v[:-1]})


@st.cache_data(max_entries=32, show_spinner=False)
def format_specials(name: str) -> pd.DataFrame:
    """What QuantizeLinear (scale 1, latest opset) gives for the special inputs, saturate 1/0."""
    fmt = qcore.get_format(name)
    labels, values = zip(*special_inputs(fmt))
    x = np.array(values, np.float32)
    rows: dict[str, Any] = {"input": list(labels), "x (float32)": [fmt_value(v) for v in x]}
    for sat in (True, False):
        y = qcore.quantize_linear(x, np.float32(1.0), output_dtype=name, saturate=sat)
        col = "saturate=1" if sat else "saturate=0"
        with np.errstate(all="ignore"):
            decoded = y.astype(np.float64)
        rows[f"{col} value"] = [fmt_value(v) for v in decoded]
        rows[f"{col} bits"] = [bit_string(b, fmt) for b in code_bits(fmt, y)]
    return pd.DataFrame(rows)


def onnx_doc(op: str, version: int) -> str | None:
    """The operator's documentation text from the onnx package (None without onnx)."""
    try:
        import onnx.defs
    except ImportError:
        return None
    try:
        return onnx.defs.get_schema(op, version).doc
    except Exception:  # noqa: BLE001 - an old onnx without that version
        return None


def cast_tables(doc: str) -> str:
    """The float8 saturation tables out of the Cast operator's documentation."""
    first = doc.find("| x")
    if first < 0:
        return doc
    start = doc.rfind("\n\n", 0, doc.rfind("\n\n", 0, first))
    end = doc.find("FLOAT8E8M0 type was introduced")
    return doc[max(start, 0):end if end > 0 else len(doc)].strip()


# --------------------------------------------------------------------------- operator versions


def version_table(op: str) -> pd.DataFrame:
    """One row per version of `op`, from qcore's version table."""
    rows = []
    for v in qversions.versions(op):
        ov = qcore.OPERATORS[op][v]
        rows.append({
            "version": str(ov.version),
            "x types": ", ".join(ov.x_types),
            "scale types": ", ".join(ov.scale_types),
            "quantized types": ", ".join(ov.quantized_types),
            "output types": ", ".join(ov.output_types) or "—",
            "attributes": ", ".join(ov.attributes) or "—",
            "per-axis": ov.per_axis,
            "blocked": ov.blocked,
        })
    return pd.DataFrame(rows)


def support_matrix(op: str, field: str, types: tuple[str, ...]) -> pd.DataFrame:
    """1/0 table: type (rows) × version (columns) for one field of the version table."""
    vs = qversions.versions(op)
    data = {f"{v}": [int(t in getattr(qcore.OPERATORS[op][v], field)) for t in types]
            for v in vs}
    return pd.DataFrame(data, index=list(types))


def check_everywhere(op: str, config: dict[str, Any]) -> pd.DataFrame:
    """Validate one configuration with qcore.plan_* at every version; the exact message where
    it is invalid, what was decided where it is valid."""
    rows = []
    for v in qversions.versions(op):
        opsets = [o for o in OPSETS if qcore.resolve(op, o).version == v]
        label = f"{op}-{v}"
        try:
            if op == qcore.QUANTIZE:
                plan = qcore.plan_quantize(opset=v, **config)
                detail = (f"{plan.layout.granularity}; y = {plan.target.name}; division in "
                          f"{plan.precision.name}; saturate={int(plan.saturate)}")
            else:
                plan = qcore.plan_dequantize(opset=v, **config)
                detail = f"{plan.layout.granularity}; output {plan.output.name}"
            rows.append({"version": label, "opsets": opset_span(opsets),
                         "first_opset": opsets[0], "valid": True, "what qcore says": detail})
        except qcore.QuantizationError as exc:
            rows.append({"version": label, "opsets": opset_span(opsets),
                         "first_opset": opsets[0], "valid": False, "what qcore says": str(exc)})
    return pd.DataFrame(rows)
