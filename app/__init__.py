"""Building blocks of the Quantization Explorer (the Streamlit app over qcore).

- :mod:`app.state`    settings in session state and the URL
- :mod:`app.widgets`  setting widgets bound to the URL
- :mod:`app.tensors`  the tensor picker and tensor loading
- :mod:`app.controls` the quantization settings shared by several pages
- :mod:`app.compute`  cached per-page computations returning small dataclasses (every number
  comes from qcore; numerics live in qcore.codes, qcore.tiles, qcore.export)
- :mod:`app.reference` the reference pages' tables (Number Formats, Operator Versions)
- :mod:`app.text`     numbers as text (one place: ∞ dB, NaN, shares)
- :mod:`app.warm`     kernel warm-up at server start
- :mod:`app.frame`    every page runs inside streamlit_app.py
- :mod:`app.charts`   plotly chart builders with one template
- :mod:`app.errors`   errors as messages, never tracebacks
- :mod:`app.explain`  the plain-words and exact-semantics texts
- :mod:`app.nav`      the page registry

The app is not an installed package: it runs from the repository (``streamlit run
streamlit_app.py``), with ``pip install -e ".[app]"`` for its dependencies.
"""
