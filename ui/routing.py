"""The menu (one row per page in `pages/`) and the guard that keeps every run on the router.

`app.py` routes with `st.navigation(pages())`. Streamlit 1.67 also treats a `pages/` folder
beside the entry file as its legacy multipage app until some session has called `st.navigation`:
such a run executes the requested page file directly, without app.py, under a menu of raw file
names. On a fresh server that is the first visitor's run when it is a deep link (/allocation),
and every run of `AppTest`, which resets the switch before each run. So each page calls
`require()` before anything else: outside the router it calls `st.navigation` (streamlit then
ignores `pages/` for good, in every session) and reruns the same page through app.py.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass

import streamlit as st


@dataclass(frozen=True)
class MenuEntry:
    file: str  # in pages/; its stem is the page's URL (pages/allocation.py -> /allocation)
    title: str
    icon: str

    @property
    def path(self) -> str:
        return f"pages/{self.file}"

    @property
    def url_path(self) -> str:
        return self.file.removesuffix(".py")


# In menu order; the first is the default page (the app's root URL).
MENU = (
    MenuEntry("home.py", "Overview", ":material/home:"),
    MenuEntry("model.py", "1 · Model", ":material/memory:"),
    MenuEntry("saliency.py", "2 · Saliency", ":material/local_fire_department:"),
    MenuEntry("allocation.py", "3 · Allocation", ":material/tune:"),
    MenuEntry("calibration.py", "4 · Calibration", ":material/target:"),
    MenuEntry("prune.py", "5 · Prune & compare", ":material/content_cut:"),
    MenuEntry("sweep.py", "6 · Sweep", ":material/monitoring:"),
    MenuEntry("evidence.py", "7 · Evidence", ":material/fact_check:"),
    MenuEntry("runs.py", "Past runs", ":material/history:"),
)

_run = threading.local()  # a session's script runs in that session's own thread


def pages() -> list[st.Page]:
    """The menu as `st.Page`s (call inside a script run: streamlit resolves paths against app.py)."""
    return [st.Page(e.path, title=e.title, icon=e.icon, default=i == 0) for i, e in enumerate(MENU)]


@contextlib.contextmanager
def routed() -> Iterator[None]:
    """app.py runs the chosen page inside this block, so a page can tell it came through the router."""
    _run.routed = True
    try:
        yield
    finally:
        _run.routed = False


def require() -> None:
    """First statement of every page: if streamlit ran this file without app.py, rerun it through app.py.

    Costs one empty run, once per server process (and once per `AppTest` run).
    """
    if getattr(_run, "routed", False):
        return
    # Documented: "As soon as any session of your app executes st.navigation, your app will ignore
    # the pages/ directory (across all sessions)." The menu it sends is already the right one.
    st.navigation(pages())
    st.rerun()  # the same page (its URL and query string are kept), this time through app.py
