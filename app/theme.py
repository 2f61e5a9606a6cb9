"""One plotly look for every chart of the app (registered as the template ``"qcore"``)."""

from __future__ import annotations

import plotly.graph_objects as go
import plotly.io as pio

#: Colour for each role, used the same way on every page.
INPUT = "#4263EB"  # the original tensor x
OUTPUT = "#F76707"  # the dequantized tensor x̂ / quantized codes
ERROR = "#E03131"  # errors, clipping, disagreement
GOOD = "#2F9E44"  # agreement, the optimum, the Pareto front
LEVEL = "#868E96"  # representable values, reference lines
ACCENT = "#7048E8"
PALETTE = [INPUT, OUTPUT, GOOD, ACCENT, "#1098AD", "#D6336C", "#FAB005", "#5C940D",
           "#495057", "#E8590C", "#3B5BDB", "#0CA678", "#AE3EC9", "#F59F00", "#74B816"]
#: Sequential scale for heat maps of error (light = small).
HEAT = [[0.0, "#F8F9FA"], [0.25, "#FFE8CC"], [0.5, "#FFA94D"], [0.75, "#F76707"],
        [1.0, "#A61E4D"]]
FONT = "Inter, 'Source Sans Pro', system-ui, -apple-system, 'Segoe UI', sans-serif"

TEMPLATE = "qcore"


def _template() -> go.layout.Template:
    axis = dict(showgrid=True, gridcolor="#ECEFF4", zeroline=False, linecolor="#CED4DA",
                ticks="outside", tickcolor="#CED4DA", title_font=dict(size=13),
                automargin=True)
    return go.layout.Template(
        layout=go.Layout(
            font=dict(family=FONT, size=12.5, color="#1F2433"),
            title=dict(font=dict(size=15, color="#1F2433"), x=0.0, xanchor="left",
                       y=0.97, yanchor="top", pad=dict(l=4)),
            colorway=PALETTE,
            paper_bgcolor="rgba(0,0,0,0)",
            plot_bgcolor="#FFFFFF",
            margin=dict(l=10, r=16, t=48, b=10),
            xaxis=axis,
            yaxis=axis,
            legend=dict(orientation="h", yanchor="bottom", y=1.0, xanchor="right", x=1.0,
                        bgcolor="rgba(0,0,0,0)", font=dict(size=11.5)),
            hoverlabel=dict(font=dict(family=FONT, size=12)),
            bargap=0.02,
            coloraxis=dict(colorscale=HEAT),
        )
    )


pio.templates[TEMPLATE] = _template()
