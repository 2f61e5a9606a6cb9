"""Format Compare's recipe mode: the recipe editor and its cached computations.

A recipe is the report's ``TARGET:GRANULARITY[@METHOD]`` (or an OCP MX name,
:mod:`qcore.recipes`): each carries its own element type, granularity, block size,
calibration and scale type, so ``int4:blocked32`` (float32 scales, abs-max) and ``mxfp4``
(float8e8m0 scales) stand in one table and one Pareto chart
(:func:`qcore.analysis.compare_recipes`).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import streamlit as st

import qcore
from qcore import recipes

from . import state

#: The recipes the mode starts with: the same element bits with different scales side by side.
DEFAULT_RECIPES = ("int8:per-axis", "float8e4m3fn:per-tensor", "mxfp8", "int4:blocked32",
                   "int4:blocked128", "mxfp4", "float4e2m1:blocked32")
#: The builder's calibration choices: (label, the recipe's @METHOD; "mx" means float8e8m0 scales).
CALIBRATIONS = {"abs-max · float32 scales": "absmax",
                "full range (−8…7 for int4) · float32 scales": "fullrange",
                "min–max · float32 scales": "minmax",
                "percentile · float32 scales": "percentile", "MSE search · float32 scales": "mse",
                "MX power of two · float8e8m0 scales": "mx"}
GRANULARITIES = ("blocked", "per-axis", "per-tensor")
GRAMMAR = ("TARGET:GRANULARITY[/AXIS][@METHOD], e.g. int4:blocked32, int8:per-axis, "
           "uint8:per-tensor@percentile, float8e4m3fn:blocked64@mse, int4:blocked32/0, "
           "int4:blocked32@mx; or an OCP MX name (mxfp8, mxfp4, …)")


def canonical(spec: str) -> str:
    """A recipe's canonical name (QuantizationError naming the grammar when it is none)."""
    return recipes.parse_recipe(spec).name


def recipe_of(target: str, granularity: str, block: int, calibration: str) -> str:
    """The recipe the builder's fields describe, in the report's grammar."""
    gran = f"blocked{int(block)}" if granularity == "blocked" else granularity
    method = CALIBRATIONS.get(calibration, calibration)
    return canonical(f"{target}:{gran}@{method}")


def _fix(value: Any) -> list[str]:
    """The valid recipes of a list, canonical, in order, without repeats (invalid dropped, so a
    link naming one is noted as replaced)."""
    out: list[str] = []
    for v in value if isinstance(value, (list, tuple)) else [value]:
        try:
            name = canonical(str(v))
        except qcore.QuantizationError:
            continue
        if name not in out:
            out.append(name)
    return out


def editor(name: str = "c_recipes") -> list[str]:
    """The recipe list: a multiselect of recipe names (type a new one in the grammar) and a
    builder row whose fields make one recipe; the list lives in the URL like every setting."""
    refused = {}  # names typed since the last run that are no recipe (the fix drops them)
    for typed in st.session_state.get(name) or []:
        try:
            canonical(str(typed))
        except qcore.QuantizationError as exc:
            refused[str(typed)] = str(exc)
    key = state.setting(name, list(DEFAULT_RECIPES), _fix)
    current = list(st.session_state.get(key) or [])
    options = list(dict.fromkeys(current + list(recipes.CATALOGUE)))
    chosen = st.multiselect(
        "Recipes", options, key=key, accept_new_options=True,
        help="Pick recipes or type one: " + GRAMMAR + ". Each row of the table is one recipe "
             "with its own element type, granularity, block size, calibration and scale type.")
    for typed, why in refused.items():
        st.error(f"**{typed}** is not a recipe, so it is left out: {why}", icon=":material/block:")
    valid = _fix(chosen)
    state.remember(name, valid)
    _builder(name, key)
    return valid


def _builder(name: str, key: str) -> None:
    """One recipe from its fields, added to the list by a button."""
    with st.expander("Build a recipe from its parts"):
        c = st.columns([1.2, 1.0, 0.7, 1.6, 0.6], vertical_alignment="bottom")
        target = c[0].selectbox("Element type", qcore.QUANTIZED_TYPES,
                                index=list(qcore.QUANTIZED_TYPES).index("int4"), key="_rb_t")
        gran = c[1].selectbox("Granularity", GRANULARITIES, key="_rb_g")
        block = c[2].number_input("Block", min_value=1, max_value=1 << 16, value=32,
                                  key="_rb_b", disabled=gran != "blocked")
        calib = c[3].selectbox("Calibration · scale type", list(CALIBRATIONS), key="_rb_c")
        try:
            spec = recipe_of(target, gran, int(block), calib)
        except qcore.QuantizationError as exc:
            st.caption(f"Not a recipe: {exc}")
            return
        c[4].button("Add", key="_rb_add", on_click=_add, args=(name, key, spec),
                    disabled=spec in (st.session_state.get(key) or []))
        st.caption(f"`{spec}` — {recipes.describe(spec)}")


def _add(name: str, key: str, spec: str) -> None:
    state.set_values(**{name: _fix(list(st.session_state.get(key) or []) + [spec])})


@st.cache_data(max_entries=8, show_spinner="Comparing recipes…")
def compare(spec: Any, chosen: tuple[str, ...], saturate: bool) -> pd.DataFrame:
    """:func:`qcore.analysis.compare_recipes` on the spec's tensor."""
    from qcore import analysis

    from . import tensors

    return analysis.compare_recipes(tensors.load(spec), list(chosen), saturate=saturate)


@st.cache_data(max_entries=8, show_spinner=False)
def error_hists(spec: Any, chosen: tuple[str, ...], saturate: bool,
                bins: int = 81) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Error histogram (x̂ − x) of each recipe that can be used on the tensor."""
    from qcore import analysis, metrics

    from . import tensors

    x = tensors.load(spec)
    return metrics.error_histograms(
        x, chosen, lambda r: analysis.recipe_round_trip(x, r, saturate=saturate)[2], bins)


@st.cache_data(max_entries=8, show_spinner="Recipes on real weights, activations and "
                                             "gradients…")
def headline(chosen: tuple[str, ...], saturate: bool) -> pd.DataFrame:
    """SQNR of each recipe on one real tensor of each kind (rows: recipes)."""
    from qcore import analysis

    from .compute import headline_table

    return headline_table(lambda x: analysis.compare_recipes(
        x, list(chosen), saturate=saturate).set_index("recipe")["sqnr_db"])
