"""NIRVANA Explorer: the entry file is a router (`st.navigation` over `pages/`) and a shared frame.

Why a router over `pages/`, and not streamlit's native `pages/` convention: the native (legacy)
mode takes titles, order and URLs from file names, so a page called "3 · Allocation" at
/allocation cannot be had, the entry page is listed as "app", icons must be emoji in file names,
and every page repeats the frame. The router keeps titles, icons, order, URLs and one frame.
The catch: while no session has called `st.navigation` yet (a fresh server), streamlit 1.67
runs a requested `pages/` file directly, without this file. Every page therefore starts with
`routing.require()`, which turns the legacy mode off for the whole server and reruns the page
through this file (ui/routing.py); tests/test_browser.py opens /allocation as a fresh server's
very first request and checks the menu, the frame and that no raw file name ever showed.

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

from ui import routing  # noqa: E402  (streamlit only)

st.set_page_config(page_title="NIRVANA Explorer", page_icon=":material/content_cut:", layout="wide")

navigation = st.navigation(routing.pages())  # before `ui.frame` (torch, transformers): the menu shows at once

from ui import frame, state  # noqa: E402

state.keep_widget_state()
with routing.routed():
    navigation.run()
frame.sidebar()  # after the page, so it shows what the page just computed
