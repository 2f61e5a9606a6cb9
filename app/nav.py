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


PAGES: tuple[PageInfo, ...] = (
    PageInfo("pages/learn.py", "Learn: guided path", ":material/school:",
             "Eleven steps from scale and zero point to a deployed model, each with a question.",
             "Learn"),
    PageInfo("pages/home.py", "Home", ":material/home:",
             "What linear quantization is, with a live example.", "Explore"),
    PageInfo("pages/quantize_lab.py", "Quantize Lab", ":material/science:",
             "Quantize one tensor and see every error, histogram and step.", "Explore"),
    PageInfo("pages/format_compare.py", "Format Compare", ":material/compare:",
             "int8, float8, int4, float4… side by side on the same tensor.", "Explore"),
    PageInfo("pages/round_trip_sweeps.py", "Round Trip & Sweeps", ":material/ssid_chart:",
             "Error against clipping range and block size, repeated round trips, chains.",
             "Explore"),
    PageInfo("pages/model_report.py", "Model Report", ":material/table_chart:",
             "Every tensor of a checkpoint × every recipe: SQNR map, Pareto, worst.", "Explore"),
    PageInfo("pages/model_fidelity.py", "Model Fidelity", ":material/model_training:",
             "What each format does to a model's outputs; the best mix under a bits budget.",
             "Explore"),
    PageInfo("pages/dynamic_quantization.py", "Dynamic Quantization", ":material/bolt:",
             "DynamicQuantizeLinear step by step.", "Explore"),
    PageInfo("pages/number_formats.py", "Number Formats", ":material/pin:",
             "Every code of every format, its bits, its value and its specials.", "Reference"),
    PageInfo("pages/operator_versions.py", "Operator Versions", ":material/history:",
             "What each operator version accepts; where a configuration is valid.", "Reference"),
    PageInfo("pages/conformance.py", "Conformance", ":material/rule:",
             "qcore vs the onnx reference vs onnxruntime, element by element.", "Reference"),
    PageInfo("pages/glossary.py", "Glossary", ":material/dictionary:",
             "Every term the app uses, and why each rule is as it is.", "Reference"),
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
