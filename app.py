"""NIRVANA Explorer: the entry file is a router (`st.navigation` over `pages/`) and a shared frame.

Why a router over `pages/`, not streamlit's native `pages/` convention: the native (legacy) mode
takes titles, order and URLs from file names, so "3 · Allocation" at /allocation cannot be had
(the title would be "allocation", or the URL /Allocation), the entry page is listed as "app",
icons must be emoji in file names, and every page repeats the frame. The router keeps titles,
icons, order, URLs and one frame. What makes it correct on a fresh server (ui/routing.py):
- streamlit 1.67 runs a requested `pages/` file directly, without this file, until some session
  has called `st.navigation`; so every page starts with `routing.require()`, which then runs
  this file in the same run: its `st.navigation` turns the legacy mode off for the whole server
  and runs the page inside the router and frame (an `st.rerun()` instead would drop a click);
- that legacy run sends its own menu of raw file names first, seen on screen for a moment under
  load; so streamlit's menu is off (`client.showSidebarNavigation = false`, .streamlit/config.toml,
  and `position="hidden"`) and `routing.menu()` draws the menu with `st.page_link`.
tests/test_browser.py opens /allocation as a fresh server's very first request and checks the
page, the menu, the frame, and that no raw file name ever showed; then every page by its URL.

Run with `make run` (or `streamlit run app.py`). Each page is thin: widgets, calls into
`nirvana` (the library), and plotly figures from `nirvana.charts`. The app starts on the
embedded SmolLM2-135M; set NIRVANA_APP_MODEL to start on another model (tests use a tiny one).
"""

from __future__ import annotations

import faulthandler
import signal
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent
if str(ROOT) not in sys.path:  # AppTest runs this file without adding its folder to sys.path
    sys.path.insert(0, str(ROOT))

import streamlit as st  # noqa: E402

if hasattr(signal, "SIGUSR1"):  # `kill -USR1 <server pid>` writes every thread's stack to the server's stderr
    faulthandler.register(signal.SIGUSR1, all_threads=True)

from nirvana.guard.heap import pin_mmap_threshold  # noqa: E402  (light: ctypes only)

pin_mmap_threshold()  # CPU scoring's RSS stays near the memory plan (nirvana/guard/heap.py)

from ui import routing  # noqa: E402  (streamlit only)

st.set_page_config(page_title="NIRVANA Explorer", page_icon=":material/content_cut:", layout="wide")

navigation = st.navigation(routing.pages(), position="hidden")  # the menu is routing.menu()
routing.menu()  # before `ui.frame` (torch, transformers): the menu shows at once

from ui import frame, state  # noqa: E402

state.keep_widget_state()
with routing.routed():
    navigation.run()
frame.sidebar()  # after the page, so it shows what the page just computed
