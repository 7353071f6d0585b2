"""The shared frame: sidebar status (model, scores, plan, pruned copy) and the explanation box."""

from __future__ import annotations

import streamlit as st

from nirvana.models.shapes import ModelShape
from nirvana.models.t5 import is_t5
from ui import resources, state


def explain(markdown: str, *, expanded: bool = False, title: str = "What is shown here, and how to read it") -> None:
    """A short, student-level explanation at the top of a page."""
    with st.expander(title, expanded=expanded):
        st.markdown(markdown)


def sidebar() -> None:
    """What this session has so far, so every page shows where the user stands."""
    with st.sidebar:
        st.markdown("#### This session")
        current = state.spec()
        st.caption(f"**Model:** `{current.label()}`")
        scores = state.get("scores")
        if scores:
            _, s = scores
            calib = s.calibration or {}
            size = f", N={calib.get('samples')}, T={calib.get('seq_len')}" if calib else ""
            st.caption(f"**Scores:** {s.criterion}{size}")
        else:
            st.caption("**Scores:** none yet (Saliency page)")
        pruned = state.get("pruned")
        if pruned:
            st.caption(f"**Pruned copy:** {pruned['params'] / 1e6:.1f} M parameters")
        st.divider()
        st.caption(
            "NIRVANA (Ai, Wei, Chen, He; arXiv 2509.14230, COLM 2026). "
            "This explorer re-implements the method; figures from the paper are labelled as such."
        )


def need_scores() -> tuple[str, object] | None:
    """The session's primary scores, or an info box pointing to the Saliency page."""
    scores = state.get("scores")
    if scores is None:
        st.info("No saliency scores yet: compute them on the **Saliency** page first (one click with the defaults).")
        st.page_link("pages/saliency.py", label="Go to Saliency", icon=":material/local_fire_department:")
    return scores


def scored_model():
    """(model, scores key, scores, shape) once a model is loaded and scored; else None (info box shown).

    `shape` is the decoder-only `ModelShape`; None for a T5."""

    scores_entry = need_scores()
    lm = state.model() if scores_entry is not None else None
    if lm is None:
        return None
    scores_key, scores = scores_entry
    if is_t5(lm.model):  # a T5 has no decoder-only shape: its pages draw `ui.seq2seq`'s views
        return lm, scores_key, scores, None
    return lm, scores_key, scores, ModelShape.from_dict(resources.shape_dict(lm, state.spec().key))


def parse_floats(text: str) -> tuple[float, ...]:
    """Numbers separated by commas or semicolons ("0.1, 0.2; 0.5"); ValueError on anything else."""
    return tuple(float(part) for part in text.replace(";", ",").split(",") if part.strip())


def achieved_metric(where, achieved: float, target: float) -> None:
    """The "Achieved block sparsity" metric beside its target (Allocation, for either family)."""
    where.metric(
        "Achieved block sparsity", f"{achieved:.1%}", delta=f"{achieved - target:+.1%} vs target", delta_color="off"
    )


def need_plan():
    plan = state.get("plan")
    if plan is None:
        st.info("No pruning plan yet: choose a sparsity on the **Allocation** page first.")
        st.page_link("pages/allocation.py", label="Go to Allocation", icon=":material/tune:")
    return plan
