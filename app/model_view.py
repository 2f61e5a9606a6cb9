"""Model Fidelity's computations: cached calls into :mod:`qcore.model`, and its tables.

The page draws; everything it shows is computed here. A model is loaded once per server
(:func:`load_case`, keyed by the file's identity: path, size and modification time, so an
upload, saved under its content's hash, is its content). The measured results — sensitivity
rows, uniform rows, plans — live in a server-wide store keyed by the model's identity and the
settings (:func:`stored`), so leaving the page and coming back, or opening the same link in
another tab, shows them without running the model again.
"""

from __future__ import annotations

import contextlib
import math
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator
from typing import Any

import numpy as np
import pandas as pd
import streamlit as st

from qcore import models, recipes
from qcore.model import cases, plan, sensitivity

#: Recipes the page starts with (those the chosen runtime cannot run are left out).
#: The recipes the page offers (:data:`qcore.recipes.CATALOGUE`).
RECIPE_CATALOGUE = recipes.CATALOGUE
PAGE_RECIPES = ("int8:per-axis", "int4:blocked32", "mxfp8", "mxfp4")
#: Runtimes a plan can be made for: what the installed onnxruntime runs, or any ONNX runtime.
#: Labels short enough to show whole in the sidebar's select (the help says the rest).
RUNTIMES = {"onnxruntime": "onnxruntime", "reference": "any ONNX runtime"}
#: A channel whose max|x| exceeds this many times the median channel's is an outlier channel.
CURVE_POINTS = 5  # plans drawn on the bits-vs-fidelity chart
_STORE_ENTRIES = 24  # results kept per server (sensitivity tables, plans, curves)


def identity(source: str, ref: str) -> str:
    """What makes a model this model: MiniLM by name, a file by path, size and mtime."""
    if source == "minilm":
        return "minilm"
    try:
        st_ = os.stat(ref)
    except OSError:
        return ref
    return f"{ref}:{st_.st_size}:{st_.st_mtime_ns}"


@st.cache_resource(show_spinner=False, max_entries=2)
def load_case(source: str, ref: str, inputs: str | None, sentences: int, seed: int,
              ident: str, feedback: str = "") -> cases.ModelCase:
    """A model with its inputs and float outputs (one onnxruntime session), once per server;
    ``ident`` (:func:`identity`) makes a changed file a new entry. ``feedback`` (``OUT=IN,…``):
    the model runs over the steps of its inputs, each step's OUT fed to the next step's IN
    (:func:`qcore.model.feedback.load_fed_back_case`)."""
    del ident  # part of the cache key only
    if feedback.strip():
        from qcore.model.feedback import load_fed_back_case

        return load_fed_back_case(ref, inputs, feedback)
    return cases.load_case("minilm" if source == "minilm" else ref, inputs,
                           sentences=sentences, seed=seed)


@st.cache_resource(show_spinner=False)
def minilm_installed() -> bool:
    """Whether the all-MiniLM-L6-v2 checkpoint is installed (:func:`qcore.models.installed_models`)."""
    return "minilm" in models.installed_models()


def sentence_count() -> int:
    """How many sentences ship with the app (the most MiniLM can run on)."""
    from qcore.model import minilm

    return len(minilm.load_sentences(None))


# ---------------------------------------------------------------------------------------------
# the runtime: which recipes it runs


@st.cache_data(show_spinner=False, max_entries=4)
def runtime_check(recipe_names: tuple[str, ...], runtime: str) -> dict[str, str]:
    """For each recipe, why the runtime cannot run its DequantizeLinear ("" when it can).

    ``reference`` runs every ONNX type. For ``onnxruntime``, each recipe is asked of the
    installed onnxruntime on a stand-in [64, 64] MatMul weight
    (:func:`qcore.model.runtime.runs_in_onnxruntime`, probed once per configuration); the
    plan then keeps only the (recipe, weight) configurations the runtime runs on the model's
    own shapes and roles (:func:`measure`)."""
    from qcore.model import runtime as rt
    from qcore.model.fidelity import qdq

    ok = rt.allowed(runtime)
    out = {}
    for name in recipe_names:
        if ok(name, (64, 64), 1, 0):
            out[name] = ""
            continue
        r = recipes.parse_recipe(name)
        try:
            opset = f"-{qdq(np.ones((64, 64), np.float32), name).opset}"
        except ValueError:
            opset = ""
        scale = "float8e8m0" if r.mx else "float32"
        out[name] = (f"{runtime_name()} has no DequantizeLinear{opset} kernel for {r.target} "
                     f"codes with {scale} scales")
    return out


def runtime_name() -> str:
    """The installed onnxruntime, named with its version."""
    import onnxruntime as ort

    return f"onnxruntime {ort.__version__}"


# ---------------------------------------------------------------------------------------------
# results kept for the server


class _Store:
    """A bounded, thread-safe map of results (oldest dropped first)."""

    def __init__(self, entries: int) -> None:
        self.entries = entries
        self.items: OrderedDict[Hashable, Any] = OrderedDict()
        self.lock = threading.Lock()

    def get(self, key: Hashable) -> Any:
        with self.lock:
            if key in self.items:
                self.items.move_to_end(key)
                return self.items[key]
            return None

    def put(self, key: Hashable, value: Any) -> Any:
        with self.lock:
            self.items[key] = value
            self.items.move_to_end(key)
            while len(self.items) > self.entries:
                self.items.popitem(last=False)
        return value


@st.cache_resource(show_spinner=False)
def _store() -> _Store:
    return _Store(_STORE_ENTRIES)


def stored(key: Hashable) -> Any:
    """A result computed before (by any session) under ``key``, or None."""
    return _store().get(key)


def compute(key: Hashable, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)``, kept under ``key`` (returned from the store when there)."""
    found = _store().get(key)
    if found is not None:
        return found
    return _store().put(key, fn(*args, **kwargs))


Progress = Callable[[int, int, str], None]


@contextlib.contextmanager
def progress_bar(text: str) -> Iterator[Progress]:
    """A progress bar that shows ``text``, then each report's "done/total label"; it is removed
    when the block ends normally (an error stops the page with the bar as it was)."""
    bar = st.progress(0.0, text=text)

    def update(done: int, total: int, label: str) -> None:
        bar.progress(min(1.0, done / total if total else 1.0), text=f"{done}/{total} {label}")

    yield update
    bar.empty()


def measure(case: cases.ModelCase, chosen: list[str], tensors: list[str],
            progress: Progress | None = None, runtime: str = "reference"
            ) -> tuple[sensitivity.Sensitivity, list[dict]]:
    """Every tensor × recipe alone, then each recipe on every chosen tensor. For
    ``onnxruntime`` the rows whose (recipe, weight shape, role) the installed onnxruntime
    cannot run are left out of what the plan chooses from
    (:func:`qcore.model.runtime.filter_case_sensitivity`, as ``--runtime onnxruntime``)."""
    sens = sensitivity.measure(case, chosen, tensors, progress)
    if runtime != "reference":
        from qcore.model.runtime import filter_case_sensitivity

        sens = filter_case_sensitivity(case, sens, runtime)
    return sens, sensitivity.uniform(case, chosen, tensors)


def run_plan(case: cases.ModelCase, sens: sensitivity.Sensitivity, budget: float,
             allow_float: bool, study: Any = None, float_sites: int = 0) -> plan.Plan:
    """The optimal plan at ``budget``, run and measured; with an activation ``study``
    (:func:`activation_study`) its sites quantized too, the ``float_sites`` most sensitive
    left in float, and the quantized sites' noises (each measured alone) added to the
    prediction (:func:`qcore.model.activations.attach_activations`, the rule
    ``python -m qcore.model --activations`` follows)."""
    p = plan.make_plan(sens, budget, allow_float)
    if study is not None and study.specs:
        from qcore.model.activations import attach_activations

        attach_activations(p, study.specs, study.rows,
                           min(int(float_sites), len(study.specs)), study.config.name)
    plan.run_plan(case, p)
    return p


def curve(case: cases.ModelCase, sens: sensitivity.Sensitivity, allow_float: bool,
          study: Any = None, float_sites: int = 0) -> list[plan.Plan]:
    """Optimal plans at :data:`CURVE_POINTS` budgets across the possible range, each run
    (:func:`run_plan`; budgets below the cheapest plan left out)."""
    from qcore.model.graph import ModelError

    lo, hi = plan.budget_range(sens)
    out = []
    for b in np.linspace(lo, hi, CURVE_POINTS):
        try:
            out.append(run_plan(case, sens, float(b), allow_float, study, float_sites))
        except ModelError:
            continue
    return out


def refine(case: cases.ModelCase, sens: sensitivity.Sensitivity, additive: plan.Plan,
           runs: int, allow_float: bool, progress: Progress | None = None) -> Any:
    """The plan improved by local search on measured runs (:func:`qcore.model.refine.refine`),
    from a copy of the additive plan (the stored one stays as it was measured)."""
    import copy

    from qcore.model.refine import refine as local_search

    return local_search(case, sens, copy.deepcopy(additive), runs=runs, allow_float=allow_float,
                        progress=progress)


def budget_bounds(sens: sensitivity.Sensitivity) -> tuple[float, float]:
    """The budget slider's range: the cheapest and costliest plan, to 0.01 bit, never empty."""
    lo, hi = plan.budget_range(sens)
    lo_c = math.ceil(lo * 100) / 100
    return lo_c, max(lo_c + 0.01, math.floor(hi * 100) / 100)


def export(case: cases.ModelCase, p: plan.Plan, runtime: str = "reference",
           repeats: int = 5) -> dict[str, Any]:
    """The plan as a model for ``runtime`` (serialized, ``data``), as
    ``python -m qcore.model --export`` writes it: for onnxruntime, the forms it fuses into
    integer kernels (:func:`qcore.model.deployable.deployable_export`; ``forms`` counts them) and
    its latency beside the float model's, timed in this process (``latency_ms``,
    ``float_latency_ms`` by thread count, :func:`qcore.model.latency.model_latency`); else
    the plain QDQ model with its activation pairs. ``unsupported``: the weight nodes
    onnxruntime cannot run; ``load_error``: why it cannot load the model ("" when it can)."""
    from qcore.model.export import export_plan, unsupported_nodes

    out: dict[str, Any] = {"forms": {}, "latency_ms": {}, "float_latency_ms": {}}
    if runtime == "onnxruntime":
        from qcore.model.deployable import deployable_export

        d = deployable_export(case.model, p.recipes, case.arrays,
                              {a.site: a for a in p.activations})
        model = d.model
        for f in d.forms.values():
            out["forms"][f] = out["forms"].get(f, 0) + 1
    else:
        model = export_plan(case.model, p, case.arrays)
    out["unsupported"] = unsupported_nodes(model)
    if p.activations and runtime != "onnxruntime":
        from qcore.model.qdq import insert_qdq

        model = insert_qdq(model, p.activations)
    if p.activations:
        from qcore.model.deployed import guard_float8_relu

        guard_float8_relu(model)  # as the command line: a Relu before a float8 quantizer
    out["data"] = model.SerializeToString()
    out["load_error"] = loads_in_onnxruntime(out["data"])
    if runtime == "onnxruntime" and not out["load_error"] and not out["unsupported"]:
        from qcore.model.latency import model_latency

        out.update(model_latency(model, case.model, case.batches, repeats=repeats))
    return out


def latency_figures(built: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(label, value, note) of each thread count's latency: the export's and the float
    model's, timed together (none when the export was not timed)."""
    out = []
    for k, ms in built.get("latency_ms", {}).items():
        f = built["float_latency_ms"][k]
        label = "Latency, 1 thread" if k == "1" else f"Latency, {k} threads"
        note = f"float {f:.1f} ms · {ms / f:.2f}× float"
        spread_q = built.get("latency_spread_ms", {}).get(k)
        spread_f = built.get("float_latency_spread_ms", {}).get(k)
        if spread_q and spread_f:
            note += (f" · {spread_q[0]:.1f}–{spread_q[1]:.1f}–{spread_q[2]:.1f} ms vs "
                     f"{spread_f[0]:.1f}–{spread_f[1]:.1f}–{spread_f[2]:.1f}"
                     + (" · within noise" if within_noise(spread_q, spread_f) else ""))
        out.append((label, f"{ms:.1f} ms", note))
    return out


def within_noise(a: list[float], b: list[float]) -> bool:
    """Whether two timings' medians differ by less than their spreads: each median lies inside
    the other's min–max range, so repeats of the same run could swap them."""
    return b[0] <= a[1] <= b[2] or a[0] <= b[1] <= a[2]


def loads_in_onnxruntime(data: bytes) -> str:
    """"" when the installed onnxruntime makes a session of the model, else its message."""
    import onnxruntime as ort

    try:
        so = ort.SessionOptions()
        so.log_severity_level = 4
        ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])
    except Exception as exc:  # noqa: BLE001 - any failure is the runtime's answer
        return str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return ""


def per_step_chart(measured: dict[str, Any]) -> Any:
    """The output SQNR of each step of a fed-back run (None when the run had no steps)."""
    import plotly.graph_objects as go

    from qcore.model.feedback import per_step_rows

    from . import charts, theme

    rows = per_step_rows(measured)
    if not rows:
        return None
    fig = charts.figure("Output SQNR per step, each model feeding its own state", "step",
                        "output SQNR (dB)", height=320)
    fig.add_trace(go.Scatter(x=[r["step"] for r in rows],
                             y=[r["sqnr_db"] if math.isfinite(r["sqnr_db"]) else None
                                for r in rows],
                             mode="lines+markers", line=dict(color=theme.OUTPUT),
                             customdata=[r["max_abs"] for r in rows],
                             hovertemplate="step %{x}<br>%{y:.2f} dB<br>max |Δ| "
                                           "%{customdata:.3g}<extra></extra>"))
    return fig


# ---------------------------------------------------------------------------------------------
# tables


#: Measures that exist only for some models (embeddings, logits): dropped when absent.
_OPTIONAL = ("cosine_mean", "spearman", "kl", "top1")


def rows_table(rows: list[dict]) -> pd.DataFrame:
    """Sensitivity and uniform rows as one typed table: "all weights" for the uniform rows'
    tensor; integer columns (opset, axis) typed as integers, empty where a uniform row has no
    one value (its tensors may need several); a measure no row has (kl and top1 of a model
    without logits) left out, as are per-output columns when the model has one output."""
    df = pd.DataFrame(rows)
    if df.empty:
        return df
    df["tensor"] = df["tensor"].replace({"*": "all weights"})
    if "kind" in df:
        df["kind"] = df["kind"].fillna("weight").astype(str)
    for col in ("opset", "axis"):
        if col in df:
            df[col] = pd.to_numeric(df[col].replace({"": None}),
                                    errors="coerce").astype("Int64")
    if "view" in df:
        df["view"] = df["view"].fillna("").astype(str)
        if not df["view"].str.len().any():
            df = df.drop(columns="view")
    for col in _OPTIONAL:
        if col in df and pd.to_numeric(df[col], errors="coerce").isna().all():
            df = df.drop(columns=col)
    per_output = [c for c in df.columns if c.startswith(("sqnr_db[", "max_abs["))]
    if len(per_output) <= 2:  # one output: its columns repeat output_sqnr_db and max_abs
        df = df.drop(columns=per_output)
    return df


def outputs_table(measured: dict[str, Any]) -> pd.DataFrame | None:
    """Each output's SQNR and max |Δ| (None for a model with one output)."""
    per = measured.get("outputs") or {}
    if len(per) < 2:
        return None
    return pd.DataFrame([{"output": k, "SQNR (dB)": v.get("sqnr_db", math.nan),
                          "max |Δ|": v.get("max_abs", math.nan),
                          "agreement": v.get("agreement", math.nan)} for k, v in per.items()])


def output_names(case: cases.ModelCase) -> list[str]:
    """The model's outputs, in graph order."""
    return list(case.runner.output_names)


def with_outputs(case: cases.ModelCase, outputs: list[str] | None) -> cases.ModelCase:
    """The case whose model figure averages over ``outputs`` (None or all: every output): a
    shallow copy sharing the loaded model, its session and its float outputs."""
    import copy

    if not outputs or list(outputs) == output_names(case):
        return case
    view = copy.copy(case)
    view.outputs = list(outputs)
    return view


def plan_table(p: plan.Plan, sens: sensitivity.Sensitivity) -> pd.DataFrame:
    """One row per tensor of the plan: its recipe, bits per element and alone-SQNR."""
    out = []
    for t, r in p.recipes.items():
        row = sens.row(t, r)
        out.append({"tensor": t, "recipe": r,
                    "bits / element": (row["bits_per_element"] if row else 32.0),
                    "output SQNR alone (dB)": (row["output_sqnr_db"] if row else math.inf)})
    return pd.DataFrame(out)


def plan_in_words(p: plan.Plan, most: int = 4) -> str:
    """The plan in one line: the recipe most tensors get is "the rest", every other recipe
    lists its tensors ("int8:per-axis for: a, b; int4:blocked32 for the rest (37)")."""
    by: dict[str, list[str]] = {}
    for t, r in p.recipes.items():
        by.setdefault(r if r else "float32", []).append(t)
    if not by:
        return ""
    rest = max(by, key=lambda r: len(by[r]))
    parts = []
    for r, ts in sorted(by.items(), key=lambda kv: len(kv[1])):
        if r == rest:
            continue
        shown = ", ".join(f"`{t}`" for t in ts[:most]) + (f" and {len(ts) - most} more"
                                                          if len(ts) > most else "")
        parts.append(f"**{r}** for: {shown}")
    parts.append(f"**{rest}** for {'the rest' if parts else 'every tensor'} ({len(by[rest])})")
    return "; ".join(parts) + "."


def measured_figures(measured: dict[str, Any], kind: str) -> list[tuple[str, str, str, str]]:
    """(label, value, note, help) of the measures this model has beyond SQNR; a measure the
    model lacks (kl and top-1 without logits) is left out, never shown as "None"."""
    out = []

    def ok(name: str) -> bool:
        v = measured.get(name)
        return isinstance(v, (int, float)) and math.isfinite(v)

    if kind == "embedding" and ok("spearman"):
        out.append(("Similarity ranks kept", f"{measured['spearman']:.5f}",
                    f"mean cosine {measured['cosine_mean']:.5f}" if ok("cosine_mean") else "",
                    "Spearman's rank correlation of every pairwise cosine similarity between "
                    "the sentences' embeddings, quantized against float: 1 when the model "
                    "still orders its inputs' similarities the same."))
    if ok("top1"):
        out.append(("Top-1 unchanged", f"{100 * measured['top1']:.2f} %",
                    f"KL {measured['kl']:.3g} nats" if ok("kl") else "",
                    "The share of rows whose largest output (the argmax of the last axis) "
                    "is the float model's; KL: the mean divergence of the softmax "
                    "distributions."))
    return out


# ---------------------------------------------------------------------------------------------
# figures


def heatmap(sens: sensitivity.Sensitivity, output: str | None = None) -> Any:
    """Output SQNR with one tensor quantized, tensor × recipe (dark: the model feels it):
    the model figure, or one output's own SQNR (``output``)."""
    import plotly.graph_objects as go

    from . import charts, theme

    rows = pd.DataFrame(sens.rows)
    value = f"sqnr_db[{output}]" if output else "output_sqnr_db"
    m = rows.pivot(index="tensor", columns="recipe", values=value)
    m = m.reindex(index=[t for t in sens.tensors if t in m.index],
                  columns=[r for r in sens.recipes if r in m.columns])
    z = m.to_numpy(np.float64)
    z = np.where(np.isfinite(z), z, np.nan)
    what = f"SQNR of output {output}" if output else "Output SQNR"
    fig = charts.figure(f"{what} (dB) with one tensor quantized (dark = the model feels it)",
                        "", "", height=max(380, min(1400, 18 * len(m) + 190)))
    fig.add_trace(go.Heatmap(z=z, x=list(m.columns), y=list(m.index), colorscale=theme.HEAT,
                             reversescale=True, colorbar=dict(thickness=12),
                             text=[[("" if np.isnan(v) else f"{v:.1f}") for v in r] for r in z],
                             texttemplate="%{text}" if z.size <= 600 else None,
                             hovertemplate="%{y}<br>%{x}<br>%{z:.2f} dB<extra></extra>"))
    fig.update_yaxes(autorange="reversed", tickfont=dict(size=10), showgrid=False)
    fig.update_xaxes(tickangle=-35, showgrid=False)
    return fig


def scatter(sens: sensitivity.Sensitivity) -> Any:
    """Each tensor's own SQNR against the output SQNR with it alone quantized."""
    import plotly.graph_objects as go

    from . import charts, theme

    rows = pd.DataFrame(sens.rows)
    c = sensitivity.correlation(sens.rows)
    fig = charts.figure(f"Tensor SQNR vs output SQNR<br><sup>Pearson {c['pearson']:.3f}, "
                        f"Spearman {c['spearman']:.3f} over {c['n']} points</sup>",
                        "tensor SQNR (dB)", "output SQNR (dB), that tensor alone", height=420)
    for i, (r, part) in enumerate(rows.groupby("recipe", sort=False)):
        fig.add_trace(go.Scatter(x=part["tensor_sqnr_db"], y=part["output_sqnr_db"],
                                 mode="markers", name=r, text=part["tensor"],
                                 marker=dict(size=8, color=theme.PALETTE[i % len(theme.PALETTE)]),
                                 hovertemplate="%{text}<br>tensor %{x:.2f} dB<br>output "
                                               "%{y:.2f} dB<extra>" + r + "</extra>"))
    fig.update_layout(margin=dict(t=80, b=40),  # the legend below: the subtitle stays clear
                      legend=dict(orientation="h", yanchor="top", y=-0.22, x=0))
    return fig


def bits_vs_fidelity(uniform: list[dict], plans: list[plan.Plan], p: plan.Plan) -> Any:
    """Uniform recipes, the optimal plans (measured and predicted) and this budget's plan."""
    import plotly.graph_objects as go

    from . import charts, theme

    fig = charts.figure("Bits vs fidelity: uniform recipes and optimal plans", "bits per weight",
                        "output SQNR (dB)", height=420)
    u = pd.DataFrame(uniform)
    fig.add_trace(go.Scatter(x=u["bits_per_element"], y=u["output_sqnr_db"], mode="markers+text",
                             text=u["recipe"], textposition="top center", name="uniform recipe",
                             marker=dict(size=11, color=theme.INPUT), cliponaxis=False))
    fig.add_trace(go.Scatter(x=[q.bits_per_element for q in plans],
                             y=[q.measured["output_sqnr_db"] for q in plans],
                             mode="lines+markers", name="plan, measured",
                             line=dict(color=theme.GOOD, width=2)))
    fig.add_trace(go.Scatter(x=[q.bits_per_element for q in plans],
                             y=[q.output_sqnr_db_predicted for q in plans], mode="markers",
                             name="plan, predicted",
                             marker=dict(symbol="circle-open", size=10, color=theme.GOOD)))
    fig.add_trace(go.Scatter(x=[p.bits_per_element], y=[p.measured["output_sqnr_db"]],
                             mode="markers", name="this budget",
                             marker=dict(symbol="star", size=16, color=theme.OUTPUT)))
    return fig
