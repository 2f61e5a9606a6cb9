"""The app's one style sheet: every value whole (issue 46).

Streamlit ends a label, a button's text, a metric value or a multiselect chip that does not
fit its box with "…"; the full text only on hover is not enough for a number or a recipe name.
These rules let such text wrap onto another line instead. (A selectbox shows its choice in an
``<input>``, which cannot wrap: its labels are kept short where they are made.)
"""

from __future__ import annotations

import streamlit as st

#: Elements whose text wraps instead of being cut.
WRAPPED = (
    '[data-testid="stButtonGroup"] button',  # segmented controls and pills
    '[data-testid="stMetricValue"]', '[data-testid="stMetricLabel"]',
    '[data-testid="stMetricDelta"]',
    '[data-testid="stWidgetLabel"]',  # widget labels (a toggle in a narrow column)
    '[data-testid="stDownloadButton"] button', '[data-testid="stButton"] button',
    '[data-testid="stPageLink"]',
    '[data-testid="stMultiSelectTagsContainer"] span',  # multiselect chips
)

CSS = ("<style>\n"
       + ",\n".join(f"{s}, {s} *" for s in WRAPPED)
       + " {\n  white-space: normal !important; text-overflow: clip !important;\n"
         "  overflow: visible !important; max-width: none !important;\n"
         "  overflow-wrap: break-word;\n}\n"
         '[data-testid="stButtonGroup"] div { flex-wrap: wrap; overflow: visible !important; }\n'
         '[data-testid="stMultiSelectTagsContainer"] span { height: auto !important; }\n'
         "</style>")


def apply() -> None:
    """Send the style sheet (once per run; st.html with only a <style> takes no space)."""
    st.html(CSS)
