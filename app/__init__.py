"""Building blocks of the Quantization Explorer (the Streamlit app over qcore).

- :mod:`app.state`    settings in session state and the URL
- :mod:`app.widgets`  setting widgets bound to the URL
- :mod:`app.tensors`  the tensor picker and tensor loading
- :mod:`app.controls` the quantization settings shared by several pages
- :mod:`app.compute`  cached computations (every number comes from qcore)
- :mod:`app.charts`   plotly chart builders with one template
- :mod:`app.errors`   errors as messages, never tracebacks
- :mod:`app.explain`  the plain-words and exact-semantics texts
- :mod:`app.nav`      the page registry
"""
