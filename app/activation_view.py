"""Model Fidelity's activations: the choices the page offers, the study of every activation
site, the recipes with the sites quantized, and each site's range statistics with the sentence
that reads them."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pandas as pd

from qcore.model import cases
from qcore.model import site_stats as _site_stats
from qcore.model import sites as _sites
from qcore.model.staged import runner_for
from qcore.names import site_name

from .model_view import Progress

#: What makes a channel an outlier (``qcore.model.site_stats.OUTLIER_RATIO``).
OUTLIER_RATIO = _site_stats.OUTLIER_RATIO

#: The static activations' calibration methods (``qcore.model.sites.METHODS``).
ACTIVATION_METHODS = _sites.METHODS
#: The activation choices the page offers (``--activations`` of ``python -m qcore.model``).
ACTIVATIONS = {"none": "none (weights only)",
               "dynamic": "dynamic uint8",
               "static:int8": "static int8",
               "static:uint8": "static uint8",
               "static:float8e4m3fn": "static float8e4m3fn",
               "static:float8e5m2": "static float8e5m2"}


def activation_config(choice: str, method: str) -> Any:
    """The :class:`qcore.model.activations.ActivationConfig` of a choice (static ones with
    their calibration ``method``)."""
    from qcore.model.sites import parse_activations

    return parse_activations(choice + (f"@{method}" if choice.startswith("static") else ""))


def activation_study(case: cases.ModelCase, name: str, progress: Progress | None = None
                     ) -> Any:
    """Every activation site of the case alone quantized (``name``: an activation mode,
    ``static:int8@minmax``) and all of them at once, weights float
    (:func:`qcore.model.activations.study`)."""
    from qcore.model.activations import study

    return study(case, name, progress=progress)


def with_activations(case: cases.ModelCase, study: Any, recipe_names: list[str],
                     tensors: list[str]) -> list[dict]:
    """Each recipe on every chosen weight with every activation site quantized too: the
    W8A8-style figure of a recipe and the study's activation mode."""
    from qcore.model.fidelity import recipe_weights
    from qcore.model.staged import evaluate

    out = []
    for r in recipe_names:
        fid = evaluate(case, study.specs, recipe_weights(case, r, tensors))
        out.append({"weights": r, "activations": study.config.name,
                    "output SQNR (dB)": fid["output_sqnr_db"], "max |Δ|": fid["max_abs"]})
    return out


def uniform_with_activations(uniform: list[dict], both: list[dict]) -> list[dict]:
    """The uniform rows (bits per weight) with the output SQNR of the same recipe with the
    activations quantized too."""
    by = {r["weights"]: r["output SQNR (dB)"] for r in both}
    return [{**u, "output_sqnr_db": by.get(u["recipe"], u["output_sqnr_db"])} for u in uniform]


def site_chart(study: Any, most: int = 24) -> Any:
    """The most sensitive activation sites: output SQNR with each alone quantized."""
    import plotly.graph_objects as go

    from . import charts, theme

    t = site_table(study).head(most)
    fig = charts.figure(f"Activation sites alone ({study.config.name}): the lowest output SQNR "
                        "first", "output SQNR (dB), that site alone quantized", "",
                        height=max(260, 22 * len(t) + 120))
    fig.add_trace(go.Bar(x=t["output SQNR alone (dB)"], y=t["site"], orientation="h",
                         marker=dict(color=theme.OUTPUT), customdata=t["weights"],
                         hovertemplate="%{y}<br>%{x:.2f} dB<br>input of %{customdata}"
                                       "<extra></extra>"))
    fig.update_yaxes(autorange="reversed", tickfont=dict(size=10))
    return fig


def site_table(study: Any) -> pd.DataFrame:
    """One row per activation site, most sensitive first: the site by the name Model Report
    gives it (:func:`site_names`), the output SQNR with that site alone quantized, its own SQNR,
    its range statistics, the nodes it feeds and the weights they read, and the graph's tensor
    name."""
    rows = sorted(study.rows, key=lambda r: r["output_sqnr_db"])
    names = site_names(study)
    stats = site_stats(study)
    run = runner_for(study.case)
    out = []
    for r in rows:
        st_ = stats[r["tensor"]]
        consumers = run.site(r["tensor"]).consumers
        out.append({"site": names[r["tensor"]],
                    "output SQNR alone (dB)": r["output_sqnr_db"],
                    "site SQNR (dB)": r["tensor_sqnr_db"],
                    "max |x|": st_["max_abs"], "std": st_["std"],
                    "max / std": st_["max_over_std"],
                    "excess kurtosis": st_["excess_kurtosis"],
                    "outlier channels": len(st_["outlier_channels"]),
                    "their share of the range %": 100 * st_["outlier_share"],
                    "feeds": ", ".join(dict.fromkeys(f"{c[2]} {c[0]}" for c in consumers)),
                    "weights": r["label"].removeprefix("input of "),
                    "tensor": r["tensor"]})
    return pd.DataFrame(out)


def site_names(study: Any) -> dict[str, str]:
    """Each site's name on every model page (:func:`qcore.names.site_name`: a BERT layer's
    ``layer0.ffn.act``, else the graph's tensor name), by tensor; two sites that would share a
    name keep their tensor names."""
    run = runner_for(study.case)
    names = {r["tensor"]: site_name(r["tensor"], [c[3] for c in run.site(r["tensor"]).consumers])
             for r in study.rows}
    seen = Counter(names.values())
    return {t: (n if seen[n] == 1 else t) for t, n in names.items()}


def site_reading(study: Any, tensor: str) -> str:
    """The sentence that reads one site's range statistics."""
    return _site_stats.reading(site_stats(study)[tensor])


def site_values(case: cases.ModelCase, tensor: str) -> Any:
    """A site's float values as (tokens, channels), padding left out, in input order
    (:func:`qcore.model.site_stats.token_rows`): what Model Report reads of the same site."""
    return _site_stats.token_rows(runner_for(case).site_values(tensor), case.batches,
                                  case.order)


def site_stats(study: Any) -> dict[str, dict[str, Any]]:
    """Each site's range statistics (:func:`qcore.model.site_stats.range_stats`) on its real
    tokens' float values (:func:`site_values`), by tensor name."""
    kept = getattr(study, "_qx_site_stats", None)  # the study is kept per server: so are these
    if kept is None:
        kept = {r["tensor"]: _site_stats.range_stats(site_values(study.case, r["tensor"]))
                for r in study.rows}
        try:
            study._qx_site_stats = kept
        except AttributeError:  # a frozen study: computed again next time
            pass
    return kept


#: How the site table's numbers are written.
_SITE_FORMATS = {"output SQNR alone (dB)": "{:.2f}", "site SQNR (dB)": "{:.2f}",
                 "max |x|": "{:.3g}", "std": "{:.3g}", "max / std": "{:.1f}",
                 "excess kurtosis": "{:.1f}", "their share of the range %": "{:.0f}"}


def shown_sites(df: pd.DataFrame) -> Any:
    """The site table (or some of its columns) styled for ``st.table``: no index, the numbers
    with the digits they carry."""
    return df.style.format({c: f for c, f in _SITE_FORMATS.items() if c in df.columns},
                           na_rep="—").hide(axis="index")
