"""The speed tab's controls, one set for both families (decoder-only and T5): batch sizes, decode steps
and repeats, with defaults by device (a GPU gets larger batches and more steps)."""

from __future__ import annotations

import streamlit as st

from ui import state
from ui.evals import SPEED_BATCH_SIZES_CPU, SPEED_BATCH_SIZES_GPU

BATCH_CHOICES = [1, 2, 4, 8, 16, 32, 64]


def controls(button: str) -> dict | None:
    """Draw the controls and the `button`; its settings (`batch_sizes`, `new_tokens`, `repeats`) on a
    click with at least one batch size, else None."""
    gpu = not state.on_cpu()
    st.session_state.setdefault("speed_batches", list(SPEED_BATCH_SIZES_GPU if gpu else SPEED_BATCH_SIZES_CPU))
    st.session_state.setdefault("speed_new_tokens", 64 if gpu else 16)
    st.session_state.setdefault("speed_repeats", 3 if gpu else 2)
    c = st.columns([3, 2, 2, 2])
    batches = c[0].multiselect("Batch sizes", BATCH_CHOICES, key="speed_batches")
    new_tokens = c[1].number_input("Decode steps", 2, 512, step=1, key="speed_new_tokens")
    repeats = c[2].number_input("Repeats (median)", 1, 10, step=1, key="speed_repeats")
    if not (c[3].button(button, type="primary", key="measure_speed") and batches):
        return None
    return {"batch_sizes": tuple(sorted(batches)), "new_tokens": int(new_tokens), "repeats": int(repeats)}
