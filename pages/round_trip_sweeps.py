"""Round Trip & Sweeps: clipping range, block size, repeated round trips, chains."""

import streamlit as st

from app import charts, compute, controls, errors, explain, metrics_view, tensors, text, widgets

spec, x = tensors.open_page("Round Trip & Sweeps", explain.SWEEPS_INTRO, explain.SWEEPS_EXACT)
cfg = controls.panel(controls.shape_of(x), show_precision=False, prefix="s_")

clip_tab, block_tab, trip_tab, chain_tab = widgets.tabs(
    ["Clipping range", "Block size", "Repeated round trips", "Chains of formats"], "s_tab")

#: The columns the block-size and chain tables share.
ERROR_COLUMNS = {"rmse": st.column_config.NumberColumn("RMSE", format="%.4g"),
                 "clipped_fraction": st.column_config.NumberColumn("clipped", format="%.3g")}


def partial(df) -> None:
    """Say so where NaN/Inf (the input's own, or produced with saturate off) leave elements
    out of the SQNR, and down to which share."""
    cover = df["sqnr_coverage"] if "sqnr_coverage" in df else None
    if cover is not None and bool((cover < 1).any()):
        st.caption(metrics_view.partial_note(x, produced=True, saturate=cfg.saturate)
                   + f" (down to {metrics_view.share_text(cover.min())} of them).")


def sweep_basis(method: str) -> str:
    """What the clipping sweep scales for a calibration method (it says so on screen)."""
    label = controls.METHOD_LABELS.get(method, method)
    if method in ("minmax", "absmax", "mx"):
        return (f"Swept: the {label} range times the ratio on the x axis (ratio 1 is the "
                f"{label} calibration the Lab shows).")
    return (f"Swept: the observed min–max range times the ratio. The {label} method picks its "
            f"own range, so ratio 1 here is min–max, not {label}; the Lab shows that method's "
            "own choice.")


def clipping_tab() -> None:
    df = errors.attempt(compute.clipping, spec, cfg, what="Clipping sweep")
    if df is None:
        return
    if not df["mse"].notna().any():
        st.info("No clipping range leaves an element with a finite x and x̂, so there is no "
                "error to sweep (see the note about this tensor above).", icon=":material/info:")
        return
    st.caption(sweep_basis(cfg.method))
    best = df.iloc[int(df.attrs.get("optimum", df["mse"].idxmin()))]
    full = df.iloc[-1]
    partial(df)
    exact = bool((df["mse"] == 0).all())
    gain = text.db_gain(best["sqnr_db"], full["sqnr_db"])
    row = metrics_view.cards()
    card = metrics_view.card
    card(row, "Best clipping range", f"{best['clip_ratio']:.2f} × max|x|")
    card(row, "Threshold", text.short_num(best["threshold"], 4))
    card(row, "Best SQNR", text.db(best["sqnr_db"]),
         help="∞ dB: the round trip reproduces x exactly." if exact else None)
    card(row, "SQNR without clipping", text.db(full["sqnr_db"]),
         gain if gain.startswith("exact") else gain + " by clipping",
         delta_color="off" if gain.startswith("exact") else "normal",
         delta_arrow="off" if gain.startswith("exact") else "auto")
    if cfg.method not in ("minmax", "absmax", "mx"):  # the sweep is min–max based: say what
        own = errors.attempt(compute.method_sqnr, spec, cfg, what="The method's own range")
        if own is not None:  # the method itself gives, as the Lab shows it
            card(row, f"{controls.METHOD_LABELS[cfg.method]} (the Lab)", text.db(own),
                 help="The SQNR with the range this method picks itself: what the Quantize "
                      "Lab shows for these settings. The curve scales the min–max range.")
    if exact:
        st.info("Every clipping range reproduces this tensor exactly (the error is 0 "
                "everywhere, SQNR ∞): each value already sits on a code, as for a constant, "
                "all-zero or 1-element tensor. There is no error curve to draw.",
                icon=":material/check_circle:")
        return
    log_y = widgets.toggle("Logarithmic error axis", "s_logy", True)
    charts.show(charts.clipping(df, log_y=log_y))
    st.caption("Left: a narrow range clips many elements (red). Right: a wide range rounds "
               "coarsely (blue). The black total has its minimum in between"
               + (" (points with zero error are not drawn on the log axis)."
                  if log_y and bool((df["mse"] == 0).any()) else "."))


def block_tab_body() -> None:
    if x.ndim == 0:
        st.info("A scalar has no blocks.")
        return
    df = errors.attempt(compute.block_sweep, spec, cfg, what="Block-size sweep")
    if df is None or not len(df):
        return
    charts.show(charts.block_sizes(df))
    partial(df)
    st.caption(f"Blocks along axis {cfg.axis % x.ndim} (length {x.shape[cfg.axis % x.ndim]}), "
               f"calibrated with {controls.METHOD_LABELS[cfg.method]}. Smaller blocks follow "
               "the data more closely but store more scales.")
    st.dataframe(df, hide_index=True, height="content", column_config=ERROR_COLUMNS | {
        "sqnr_db": st.column_config.NumberColumn("SQNR (dB)", format="%.2f"),
        "bits_per_element": st.column_config.NumberColumn("bits / element", format="%.3f"),
        "sqnr_coverage": st.column_config.NumberColumn("SQNR covers", format="%.4g")})


def round_trip_tab() -> None:
    df = errors.attempt(compute.round_trips, spec, cfg, what="Repeated round trips")
    if df is None:
        return
    changed_later = int(df["changed"].iloc[1:].sum()) if len(df) > 1 else 0
    row = metrics_view.cards()
    metrics_view.card(row, "Changed by the first round trip", f"{int(df['changed'].iloc[0]):,}")
    metrics_view.card(row, "Changed by the later ones", f"{changed_later:,}",
                      "idempotent" if changed_later == 0 else "not idempotent",
                      delta_color="normal" if changed_later == 0 else "inverse")
    charts.show(charts.round_trips(df))
    st.caption("After one round trip every value already sits on a representable value, so "
               "quantizing it again with the same scale changes nothing.")


def chain_tab_body() -> None:
    preset = widgets.select(
        "Chain", ["float8e4m3fn,int8", "int8,int4", "float8e5m2,float8e4m3fn,int8",
                  "float8e4m3fn,float4e2m1", "custom"],
        "s_chain", "float8e4m3fn,int8", kind="segmented",
        format_func=lambda s: s.replace(",", " → "))
    text = preset
    if preset == "custom":
        text = widgets.text("Formats, in order, separated by commas", "s_chain_custom",
                            "float8e4m3fn, int8, int4")
    steps = tuple(s.strip() for s in text.split(",") if s.strip())
    st.caption("float32 → " + " → ".join(f"{s} → float32" for s in steps))
    df = errors.attempt(compute.chain, spec, steps, cfg, what="Chain") if steps else None
    if df is None or not len(df):
        return
    charts.show(charts.chain(df))
    st.dataframe(df, hide_index=True, height="content", column_config=ERROR_COLUMNS | {
        "sqnr_db": st.column_config.NumberColumn("SQNR vs x (dB)", format="%.2f"),
        "step_sqnr_db": st.column_config.NumberColumn("SQNR vs step input (dB)", format="%.2f"),
        "max_abs_error": st.column_config.NumberColumn("max |error|", format="%.4g")})


for tab, body in ((clip_tab, clipping_tab), (block_tab, block_tab_body),
                  (trip_tab, round_trip_tab), (chain_tab, chain_tab_body)):
    with tab:
        if tab.open:  # only the open tab computes
            body()
