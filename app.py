"""NIRVANA Explorer: the entry file is a router (`st.navigation` over `app_pages/`) and a shared frame.

The folder is not called `pages/` on purpose: a `pages/` folder next to the entry file turns on
streamlit's legacy auto-discovery until some session has called `st.navigation`, so the first
visitor of a fresh server who opens a deep link (e.g. /allocation) gets that file run without
this router and a sidebar of raw file names.

Run with `make run` (or `streamlit run app.py`). Each page is thin: widgets, calls into
`nirvana` (the library), and plotly figures from `nirvana.charts`. The app starts on the
embedded SmolLM2-135M; set NIRVANA_APP_MODEL to start on another model (tests use a tiny one).
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent
if str(ROOT) not in sys.path:  # AppTest runs this file without adding its folder to sys.path
    sys.path.insert(0, str(ROOT))

import streamlit as st  # noqa: E402

st.set_page_config(page_title="NIRVANA Explorer", page_icon=":material/content_cut:", layout="wide")

PAGES = [
    st.Page("app_pages/home.py", title="Overview", icon=":material/home:", default=True),
    st.Page("app_pages/model.py", title="1 · Model", icon=":material/memory:"),
    st.Page("app_pages/saliency.py", title="2 · Saliency", icon=":material/local_fire_department:"),
    st.Page("app_pages/allocation.py", title="3 · Allocation", icon=":material/tune:"),
    st.Page("app_pages/calibration.py", title="4 · Calibration", icon=":material/target:"),
    st.Page("app_pages/prune.py", title="5 · Prune & compare", icon=":material/content_cut:"),
    st.Page("app_pages/sweep.py", title="6 · Sweep", icon=":material/monitoring:"),
    st.Page("app_pages/evidence.py", title="7 · Evidence", icon=":material/fact_check:"),
    st.Page("app_pages/runs.py", title="Past runs", icon=":material/history:"),
]
navigation = st.navigation(PAGES)  # before `ui` (torch, transformers): the menu shows at once

from ui import frame, state  # noqa: E402

state.keep_widget_state()
navigation.run()
frame.sidebar()  # after the page, so it shows what the page just computed
