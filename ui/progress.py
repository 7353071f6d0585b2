"""Adapters from the library's `progress(fraction, message)` callback to `st.status` + `st.progress`."""

from __future__ import annotations

import contextlib
import time

import streamlit as st


@contextlib.contextmanager
def progress_status(label: str, *, cancellable: bool = True):
    """Yield a `progress(fraction, message)` callback drawn as a status box with a bar.

    Cancelling: any click (the Cancel button here, or another widget) reruns the script, and
    streamlit stops the running work at its next progress update, so nothing half-done is kept
    (results are stored only after a step returns).
    """
    start = time.perf_counter()
    with st.status(label, expanded=True) as status:
        bar = st.progress(0.0, text="starting")
        if cancellable:
            st.button("Cancel", key=f"cancel::{label}", help="stops this computation; nothing partial is kept")

        def progress(fraction: float, message: str) -> None:
            bar.progress(min(1.0, max(0.0, float(fraction))), text=str(message)[:200])

        try:
            yield progress
        except Exception:
            status.update(label=f"{label}: failed", state="error", expanded=False)
            raise
        status.update(label=f"{label}: done in {time.perf_counter() - start:.1f} s", state="complete", expanded=False)
