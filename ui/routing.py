"""The menu (one row per page in `pages/`), drawn by the app, and the guard that keeps every run on the router.

`app.py` routes with `st.navigation(pages(), position="hidden")` and draws `menu()`. Streamlit 1.67
also treats a `pages/` folder beside the entry file as its legacy multipage app until some session
has called `st.navigation`: such a run executes the requested page file directly, without app.py.
On a fresh server that is the first visitor's run when it is a deep link (/allocation), and it is
every `AppTest` run (AppTest resets the switch before each run). So each page calls `require()`
before anything else: outside the router it runs app.py itself, in this same run; app.py's
`st.navigation` turns the legacy mode off for good (in every session) and runs this page inside
the router and the frame; then the legacy run of the file stops. Same run, so a click that
triggered it is not lost (an `st.rerun()` here would drop button clicks).
"""

from __future__ import annotations

import contextlib
import runpy
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

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

APP = Path(__file__).resolve().parents[1] / "app.py"
_run = threading.local()  # a session's script runs in that session's own thread


def pages() -> list[st.Page]:
    """The menu as `st.Page`s (call inside a script run: streamlit resolves paths against app.py)."""
    return [st.Page(e.path, title=e.title, icon=e.icon, default=i == 0) for i, e in enumerate(MENU)]


def menu() -> None:
    """The sidebar menu, drawn here rather than by streamlit (whose own menu is switched off in
    .streamlit/config.toml, `client.showSidebarNavigation = false`): streamlit's legacy pages/ run
    sends a menu of raw file names before `require()` can act, and under load it was seen on
    screen for a moment; switched off, it never shows, whatever the timing."""
    with st.sidebar:
        for entry in MENU:
            st.page_link(entry.path, label=entry.title, icon=entry.icon, width="stretch")
        st.divider()


def next_step(*steps: tuple[str, str], lead: str = "Next step") -> None:
    """The "next step" links at the end of a page's main result: `steps` = (page file in pages/, what it does
    next), each an `st.page_link` with the menu's title and icon ("3 · Allocation: choose the sparsity")."""
    by_file = {e.file: e for e in MENU}
    st.markdown(f"**{lead}**")
    for file, what in steps:
        entry = by_file[file]
        st.page_link(entry.path, label=f"{entry.title}: {what}", icon=entry.icon)


@contextlib.contextmanager
def routed() -> Iterator[None]:
    """app.py runs the chosen page inside this block, so a page can tell it came through the router."""
    _run.routed = True
    try:
        yield
    finally:
        _run.routed = False


def require() -> None:
    """First statement of every page: if streamlit ran this file without app.py, run it inside app.py.

    Happens once per server process (and in every `AppTest` run).
    """
    if getattr(_run, "routed", False):
        return
    # Documented: "As soon as any session of your app executes st.navigation, your app will ignore
    # the pages/ directory (across all sessions)." app.py then runs the requested page (this file).
    runpy.run_path(str(APP), run_name="__main__")
    st.stop()  # the page has run, inside the router; the rest of this legacy run of the file must not
