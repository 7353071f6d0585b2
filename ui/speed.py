"""The speed tab's controls and verdicts, one set for both families (decoder-only and T5): batch sizes, decode
steps and rounds, with defaults by device (a GPU gets larger batches and more steps); a measured speed-up shown
beside its FLOPs ideal, and one that is not a result (`nirvana.measure.speed_check`) shown as a warning with a
Re-measure button instead of a figure."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from nirvana.measure.speed_check import DISTURBED, MESSAGES, RULE, SpeedCheck, check_against_reference, check_of
from ui import state
from ui.evals import SPEED_BATCH_SIZES_CPU, SPEED_BATCH_SIZES_GPU

BATCH_CHOICES = [1, 2, 4, 8, 16, 32, 64]
ROUNDS = 5  # dense and pruned in turn, five times: enough for a median and an interquartile range
REMEASURE = "speed_remeasure"  # set by the Re-measure button; the next `controls` call measures again


def controls(button: str) -> dict | None:
    """Draw the controls and the `button`; its settings (`batch_sizes`, `new_tokens`, `repeats`) on a
    click (or after the Re-measure button) with at least one batch size, else None."""
    gpu = not state.on_cpu()
    st.session_state.setdefault("speed_batches", list(SPEED_BATCH_SIZES_GPU if gpu else SPEED_BATCH_SIZES_CPU))
    st.session_state.setdefault("speed_new_tokens", 64 if gpu else 16)
    st.session_state.setdefault("speed_repeats", ROUNDS)
    c = st.columns([3, 2, 2, 2])
    batches = c[0].multiselect("Batch sizes", BATCH_CHOICES, key="speed_batches")
    new_tokens = c[1].number_input("Decode steps", 2, 512, step=1, key="speed_new_tokens")
    repeats = c[2].number_input(
        "Rounds (median)",
        1,
        20,
        step=1,
        key="speed_repeats",
        help="each round times dense, then pruned, on the same prompts; the speed-up is the median of the rounds' "
        "ratios, and 5 or more rounds give its spread",
    )
    clicked = c[3].button(button, type="primary", key="measure_speed")
    again = st.session_state.pop(REMEASURE, False)
    if not ((clicked or again) and batches):
        return None
    return {"batch_sizes": tuple(sorted(batches)), "new_tokens": int(new_tokens), "repeats": int(repeats)}


def speedup_metric(where, label: str, check: SpeedCheck) -> None:
    """A measured speed-up (median of the rounds) with its FLOPs ideal and the rounds' middle half; when its
    verdict is not "ok" the figure is not shown, only the verdict (`verdicts` says why)."""
    if check.ok:
        spread = f" · rounds {check.low:.2f}–{check.high:.2f}×" if check.rounds > 1 else ""
        where.metric(label, f"{check.ratio:.2f}×", delta=f"ideal {check.ideal:.2f}×{spread}", delta_color="off")
    else:
        where.metric(
            label,
            "—",
            delta=f"{check.verdict}: re-measure",
            delta_color="off",
            help=f"{check.message} ({check.detail()})",
        )


def verdicts(rows: list[dict], phases: tuple[str, ...]) -> bool:
    """A warning listing every batch size and phase whose measured speed-up is not a result, with a Re-measure
    button (it measures again with the controls' settings). True when there was one."""
    bad = [
        (r["batch_size"], phase, check_of(r, phase)) for r in rows for phase in phases if r[f"{phase}_verdict"] != "ok"
    ]
    if not bad:
        return False
    lines = [f"- batch {b}, {phase}: **{c.message}** (measured {c.detail()})" for b, phase, c in bad]
    st.warning(
        "These speed-ups are not results, so they are not shown:\n" + "\n".join(lines) + f"\n\nThe rule: {RULE}.",
        icon=":material/warning:",
    )
    st.button("Re-measure", key="remeasure_speed", on_click=lambda: st.session_state.update({REMEASURE: True}))
    return True


def without_unresolved(rows: list[dict], phases: tuple[str, ...]) -> list[dict]:
    """The rows for a table: a phase whose verdict is not "ok" loses its measured speed-ups (None), keeping its
    speeds, ideal and verdict."""
    out = []
    for r in rows:
        r = dict(r)
        for phase in phases:
            if r[f"{phase}_verdict"] != "ok":
                r |= dict.fromkeys((f"{phase}_speedup", f"{phase}_ratio", f"{phase}_fraction_of_ideal"))
        out.append(r)
    return out


# ---- a sweep's points: each timed once, on its own ------------------------------------------------------------------


def sweep_checked(rows: list[dict]) -> list[dict]:
    """A sweep's rows with `decode_speedup` over the dense point and `decode_verdict` ("disturbed" when more than
    1.1x the point's FLOPs ideal: `nirvana.measure.speed_check.check_against_reference`); a disturbed point's
    speed-up is left out (None)."""
    dense = next((r for r in rows if r["method"] == "dense"), None)
    if dense is None:  # no reference to judge against
        return [r | {"decode_speedup": None, "decode_verdict": None} for r in rows]
    checked = check_against_reference(rows, dense, "decode_tokens_per_s", "ideal_speedup")
    return [r | {"decode_speedup": None} if r["decode_verdict"] == DISTURBED else r for r in checked]


def sweep_speed_shown(table: pd.DataFrame) -> bool:
    """Whether a sweep's charts may use the measured decode speed: every point has one and none is disturbed."""
    measured = table["decode_tokens_per_s"].notna().all()
    return bool(measured and not (table["decode_verdict"] == DISTURBED).any())


def sweep_warning(rows: list[dict], label) -> None:
    """A warning naming the disturbed points of `sweep_checked` rows (`label(row)`: how the page names one)."""
    flagged = [label(r) for r in rows if r["decode_verdict"] == DISTURBED]
    if flagged:
        st.warning(
            f"{MESSAGES[DISTURBED]}: the decode speed-up over the dense point is more than 1.1× the FLOPs ideal at "
            f"{len(flagged)} point(s) ({'; '.join(flagged)}), so the charts show the ideal speed-up instead of the "
            "measured speed. Run the sweep again to re-measure.",
            icon=":material/warning:",
        )
