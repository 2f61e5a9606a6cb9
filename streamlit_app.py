"""The Quantization Explorer: ``pip install -e ".[app]" && streamlit run streamlit_app.py``."""

import os
import time

import streamlit as st

st.set_page_config(page_title="Quantization Explorer", page_icon="🔢",
                   layout="wide", initial_sidebar_state="expanded")

from app import errors, frame, nav, state, style, warm  # noqa: E402 - after set_page_config

_t0 = time.perf_counter()
style.apply()
page = nav.navigation()
nav.one_history_entry_per_move()
state.begin_run(page.url_path)
frame.set_inside(True)
try:
    warm.warm()
    with warm.page_running(page.title):  # the background warm-up compiles nothing meanwhile
        page.run()
except frame.PageEnd:  # frame.stop_page(): the page ended early, the run ends normally
    pass
except Exception as exc:  # noqa: BLE001 - no traceback ever reaches the user
    errors.show(exc)
finally:
    frame.set_inside(False)
    state.show_url_notes()
    state.sync_url()
    if os.environ.get("QCORE_APP_TIMING"):
        print(f"[qcore.app] {page.title}: script ran {time.perf_counter() - _t0:.3f} s",
              flush=True)
