"""The shared frame: sidebar status (model, scores, plan, pruned copy) and the explanation box."""

from __future__ import annotations

import math
from operator import eq

import streamlit as st

from nirvana.data.text import parse_name
from nirvana.errors import InvalidInput
from nirvana.models.family import family
from nirvana.models.shapes import ModelShape
from nirvana.pipeline import PruneSettings
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
        scores = state.session.scores
        if scores:
            _, s = scores
            calib = s.calibration or {}
            size = f", N={calib.get('samples')}, T={calib.get('seq_len')}" if calib else ""
            st.caption(f"**Scores:** {s.criterion}{size}")
        else:
            st.caption("**Scores:** none yet (Saliency page)")
        pruned = state.session.pruned
        if pruned:
            st.caption(f"**Pruned copy:** {pruned.params / 1e6:.1f} M parameters")
        st.divider()
        st.caption(
            "NIRVANA (Ai, Wei, Chen, He; arXiv 2509.14230, COLM 2026). "
            "This explorer re-implements the method; figures from the paper are labelled as such."
        )


def need_scores() -> tuple[str, object] | None:
    """The session's primary scores, or an info box pointing to the Saliency page."""
    scores = state.session.scores
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
    if not family(lm.model).decoder_shape:  # a T5: its pages draw `ui.seq2seq`'s views
        return lm, scores_key, scores, None
    return lm, scores_key, scores, ModelShape.from_dict(resources.shape_dict(lm, state.spec().key))


def parse_floats(text: str) -> tuple[float, ...]:
    """Numbers separated by commas or semicolons ("0.1, 0.2; 0.5"); ValueError on anything else."""
    return tuple(float(part) for part in text.replace(";", ",").split(",") if part.strip())


def parse_checked(text: str, what: str, ok, accepted: str, example: str) -> tuple[float, ...]:
    """`parse_floats` of a text box whose every value must pass `ok(value)`; `InvalidInput` otherwise.

    The message names each rejected entry, says what is `accepted` and gives an `example`, so a page
    shows it as it is (no traceback): "Sparsities: 1.5 not accepted; each must be a number in [0, 0.95]".
    """
    values, bad = [], []
    for part in (p.strip() for p in text.replace(";", ",").split(",")):
        if not part:
            continue
        try:
            value = float(part)
        except ValueError:
            value = math.nan
        if math.isfinite(value) and ok(value):
            values.append(value)
        else:
            bad.append(f"`{part}`")
    if bad:
        raise InvalidInput(
            f"{what}: {', '.join(bad)} not accepted; each must be {accepted}, separated by commas, e.g. `{example}`."
        )
    return tuple(values)


# The session's calibration field -> (what it is called here, the `prune` flag that sets it)
CLI_FLAGS = {"samples": ("N", "--samples"), "seq_len": ("T", "--seq-len"), "seed": ("seed", "--seed"),
             "source": ("source", "--calib")}  # fmt: skip


def calibration_note(scores) -> str | None:
    """One line when the session's calibration differs from `python -m nirvana prune`'s defaults (N, T, seed,
    source), which then plans differently for "the same" prune; None when they agree or the scores use no data.

    Example: "Calibrated on N = 8 × T = 128 (the app's CPU default); `python -m nirvana prune` uses N = 32 ×
    T = 128 by default, so its plan can differ: pass `--samples 8` to match."
    """
    calib = getattr(scores, "calibration", None)
    if not calib:
        return None
    cli = PruneSettings(sparsity=0.0)
    default = {"samples": cli.samples, "seq_len": cli.seq_len, "seed": cli.seed, "source": cli.calib}
    same = {"source": lambda a, b: parse_name(str(a)) == parse_name(str(b))}  # "wikitext2:validation" = its alias
    differ = [k for k in CLI_FLAGS if calib.get(k) is not None and not same.get(k, eq)(calib[k], default[k])]
    if not differ:
        return None
    size, app = (calib["samples"], calib["seq_len"]), state.default_calibration()
    # the app's own default differs from the CLI's on CPU only (N = 8 there)
    is_app_default = size == (app["samples"], app["seq_len"]) != (cli.samples, cli.seq_len)
    ours = " (the app's CPU default)" if is_app_default else ""
    extra = "".join(f", {CLI_FLAGS[k][0]} {calib[k]}" for k in ("seed", "source") if k in differ)
    theirs = "".join(f", {CLI_FLAGS[k][0]} {default[k]}" for k in ("seed", "source") if k in differ)
    flags = " ".join(f"{CLI_FLAGS[k][1]} {calib[k]}" for k in differ)
    return (
        f"Calibrated on N = {calib['samples']} × T = {calib['seq_len']}{extra}{ours}; `python -m nirvana prune` uses "
        f"N = {default['samples']} × T = {default['seq_len']}{theirs} by default, so its plan can differ: pass "
        f"`{flags}` to match."
    )


def show_calibration_note(scores) -> None:
    """`calibration_note` as a caption, where a plan is shown (Allocation, Prune & compare)."""
    note = calibration_note(scores)
    if note:
        st.caption(f":material/info: {note}")


def achieved_metric(where, achieved: float, target: float) -> None:
    """The "Achieved block sparsity" metric beside its target (Allocation, for either family)."""
    where.metric(
        "Achieved block sparsity", f"{achieved:.1%}", delta=f"{achieved - target:+.1%} vs target", delta_color="off"
    )


def need_plan():
    plan = state.session.plan
    if plan is None:
        st.info("No pruning plan yet: choose a sparsity on the **Allocation** page first.")
        st.page_link("pages/allocation.py", label="Go to Allocation", icon=":material/tune:")
    return plan
