"""The page registry: one entry per script in ``pages/``."""

from __future__ import annotations

from dataclasses import dataclass

import streamlit as st


@dataclass(frozen=True)
class PageInfo:
    script: str
    title: str
    icon: str
    blurb: str
    section: str


def _section(name: str, *rows: tuple[str, str, str, str]) -> tuple[PageInfo, ...]:
    """The pages of section ``name``, from (script name in pages/, title, Material icon, blurb)."""
    return tuple(PageInfo(f"pages/{script}.py", title, f":material/{icon}:", blurb, name)
                 for script, title, icon, blurb in rows)


#: The pages in the sidebar's order, by section.
PAGES: tuple[PageInfo, ...] = (
    *_section("Learn",
              ("learn", "Learn: guided path", "school",
               "Eleven steps from scale and zero point to a deployed model, each with a question.")),
    *_section("Explore",
              ("home", "Home", "home",
               "What linear quantization is, with a live example."),
              ("quantize_lab", "Quantize Lab", "science",
               "Quantize one tensor and see every error, histogram and step."),
              ("format_compare", "Format Compare", "compare",
               "int8, float8, int4, float4… side by side on the same tensor."),
              ("round_trip_sweeps", "Round Trip & Sweeps", "ssid_chart",
               "Error against clipping range and block size, repeated round trips, chains."),
              ("model_report", "Model Report", "table_chart",
               "Every tensor of a checkpoint × every recipe: SQNR map, Pareto, worst."),
              ("model_fidelity", "Model Fidelity", "model_training",
               "What each format does to a model's outputs; the best mix under a bits budget."),
              ("dynamic_quantization", "Dynamic Quantization", "bolt",
               "DynamicQuantizeLinear step by step.")),
    *_section("Reference",
              ("number_formats", "Number Formats", "pin",
               "Every code of every format, its bits, its value and its specials."),
              ("operator_versions", "Operator Versions", "history",
               "What each operator version accepts; where a configuration is valid."),
              ("conformance", "Conformance", "rule",
               "qcore vs the onnx reference vs onnxruntime, element by element."),
              ("glossary", "Glossary", "dictionary",
               "Every term the app uses, and why each rule is as it is.")),
)

#: The page a bare URL opens.
DEFAULT = "pages/home.py"


def url_path(info: PageInfo) -> str:
    """The page's URL path: its script's name (``/quantize_lab``), see :mod:`app.frame`."""
    return info.script.split("/")[-1].removesuffix(".py")


def navigation() -> st.navigation:
    """Build ``st.navigation`` from the registry, grouped by section."""
    sections: dict[str, list[st.Page]] = {}
    for p in PAGES:
        sections.setdefault(p.section, []).append(
            st.Page(p.script, title=p.title, icon=p.icon, url_path=url_path(p),
                    default=p.script == DEFAULT))
    return st.navigation(sections)


#: Runs in the browser once per tab: a query-only history entry that directly follows a page
#: change, with no click or key press between them, replaces that entry instead of adding one.
#: Streamlit pushes one entry for the new page's path and another when the page's script then
#: writes its settings to the URL (st.query_params), so each move took two presses of Back.
_ONE_ENTRY_JS = """<script>
(() => {
  if (window.__qxOneEntry) return;
  window.__qxOneEntry = true;
  const push = history.pushState.bind(history);
  let afterPageChange = false;
  const touched = () => { afterPageChange = false; };
  addEventListener("pointerdown", touched, true);
  addEventListener("keydown", touched, true);
  history.pushState = function (state, title, url) {
    const next = new URL(url, location.href);
    if (next.pathname !== location.pathname) {
      afterPageChange = true;
      return push(state, title, url);
    }
    if (afterPageChange) {
      afterPageChange = false;
      return history.replaceState(state, title, url);
    }
    return push(state, title, url);
  };
})();
</script>"""


def one_history_entry_per_move() -> None:
    """Make a page change and the settings its script writes one browser-history entry (see
    _ONE_ENTRY_JS); a settings change the user makes stays an entry of its own, so Back
    undoes it (:func:`app.state.begin_run` lets the URL win on Back and Forward)."""
    st.html(_ONE_ENTRY_JS, unsafe_allow_javascript=True)
