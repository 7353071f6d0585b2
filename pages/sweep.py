"""Page 6: quality and measured speed against sparsity and gamma; pick a target on the Pareto chart."""

from __future__ import annotations

from ui import routing

routing.require()  # first, before the heavy imports: see ui/routing.py

import pandas as pd
import streamlit as st

from nirvana import charts
from nirvana.models.shapes import ModelShape
from nirvana.search.sweep import ACCURACY_AXES, QUALITY, SweepSettings, run_sweep, sweep_points
from ui import frame, resources, state
from ui.errors import guard
from ui.progress import progress_status

EXPLANATION = r"""
**What is shown.** The same cached scores pruned at several settings. Left charts: quality (perplexity
on a token budget, or KL to the dense model on a held-out anchor set) and *measured* decode speed
(batch 1) against the target sparsity at a fixed γ, and against γ at a fixed sparsity (the dashed
line marks the analytic γ*). No gradients are recomputed: each point is an allocation (~10 ms), a
slice and an evaluation.

**The Pareto chart** puts every point on speed (x, higher is better) against quality (y, lower is
better). A point is *Pareto-optimal* when no other point is both faster and better; the line joins
them. Targets worth choosing lie on that line. **Click a point** (or pick it in the list) to load its
plan on the Allocation and Prune pages.

**Careful with speed on a shared CPU:** single short runs are noisy; use the Prune page's repeated
measurement for the figure you report.
"""


def _floats(text: str) -> tuple[float, ...]:
    values = []
    for part in text.replace(";", ",").split(","):
        part = part.strip()
        if part:
            values.append(float(part))
    return tuple(values)


def _controls(shape: ModelShape) -> SweepSettings | None:
    centre = state.allocation(shape)
    if centre is None:
        return None
    sparsity, gamma, gamma_star = centre.sparsity, centre.gamma, centre.gamma_default
    st.session_state.setdefault("sweep_metric", "perplexity")
    st.session_state.setdefault("sweep_sparsities", "0.1, 0.2, 0.3, 0.5")
    st.session_state.setdefault("sweep_gammas", f"0.5, 1, {gamma_star:.2f}, 4")
    st.session_state.setdefault("sweep_tokens", 1024)
    st.session_state.setdefault("sweep_speed", True)
    c = st.columns([2, 3, 3, 2, 2])
    metric = c[0].radio("Quality", list(QUALITY), format_func=QUALITY.get, key="sweep_metric")
    sparsities = c[1].text_input(f"Sparsities (at γ = {gamma:.2f})", key="sweep_sparsities")
    gammas = c[2].text_input(f"γ values (at sparsity {sparsity:.2f}; γ* = {gamma_star:.2f})", key="sweep_gammas")
    if metric in ACCURACY_AXES:  # lm-eval tasks: the first N examples (problems) of each
        st.session_state.setdefault("sweep_acc_limit", 20)
        acc_limit = c[3].number_input("Examples per task", 1, 10_000, step=10, key="sweep_acc_limit")
        tokens = st.session_state.sweep_tokens
    else:
        acc_limit = st.session_state.get("sweep_acc_limit", 20)
        tokens = c[3].number_input(
            "Perplexity tokens", 128, 1_000_000, step=512, key="sweep_tokens", disabled=metric != "perplexity"
        )
    speed = c[4].checkbox("Measure decode speed", key="sweep_speed")
    try:
        s_values, g_values = _floats(sparsities), _floats(gammas)
    except ValueError:
        st.error("Sparsities and γ values must be numbers separated by commas, e.g. `0.1, 0.2, 0.5`.")
        return None
    return SweepSettings(
        sparsities=s_values,
        gammas=g_values,
        allocation=centre,
        metric=metric,
        tokens=int(tokens),
        window=min(512, int(tokens)),
        speed=bool(speed),
        acc_limit=int(acc_limit),
    )


def _charts(rows: list[dict], settings: dict) -> None:
    frame_ = pd.DataFrame(rows)
    centre = settings["allocation"]
    quality = QUALITY[settings["metric"]]
    has_speed = frame_["decode_tokens_per_s"].notna().all()
    axes = (
        ("sparsity", ["dense", "sparsity"], "target sparsity", f"Against sparsity (γ = {centre.gamma:.2f})", {}),
        (
            "gamma",
            ["gamma"],
            "γ",
            f"Against γ (sparsity {centre.sparsity:.2f})",
            {"marker_x": centre.gamma_default, "marker_label": "γ*"},
        ),
    )
    for col, axis_names, x_title, title, marker in axes:
        points = frame_[frame_.axis.isin(axis_names)].sort_values(col)
        if not len(points):
            continue
        series = {quality: points["quality"].tolist()}
        if has_speed:
            series["decode tokens/s (batch 1)"] = points["decode_tokens_per_s"].tolist()
        series["ideal speed-up (FLOPs)"] = points["ideal_speedup"].tolist()
        figure = charts.sweep_chart(
            points[col].tolist(),
            series,
            x_title=x_title,
            title=title,
            log_y=(quality,) if settings["metric"] == "perplexity" else (),
            **marker,
        )
        st.plotly_chart(figure, key=f"sweep_{col}")
    x_col, x_title = ("decode_tokens_per_s", "decode tokens/s") if has_speed else ("ideal_speedup", "ideal speed-up")
    labels = [f"{r['axis']}: s={r['sparsity']:.2f}, γ={r['gamma']:.2f}" for r in rows]
    event = st.plotly_chart(
        charts.pareto_chart(
            frame_[x_col].tolist(),
            frame_["quality"].tolist(),
            labels,
            x_title=x_title,
            y_title=quality,
            selected=st.session_state.get("sweep_pick"),
        ),
        key="pareto",
        on_select="rerun",
        selection_mode="points",
    )
    points = [p for p in (event.selection.points if event is not None else []) if "customdata" in p]
    if points:  # a click on the chart picks the point in the list below (drawn after this, so it may be set)
        index = points[0]["customdata"]
        st.session_state.sweep_pick = int(index[0] if isinstance(index, list) else index)
    st.dataframe(frame_.rename(columns={"quality": quality}), hide_index=True, width="stretch")
    st.session_state.setdefault("sweep_pick", None)
    pick = st.selectbox(
        "Load the plan of",
        list(range(len(rows))),
        format_func=lambda i: labels[i],
        placeholder="click a point or choose here",
        key="sweep_pick",
    )
    if pick is not None and st.button("Load this plan", type="primary", key="load_sweep_plan"):
        _load(rows[pick])


def _load(row: dict) -> None:
    """Set the Allocation sliders to the point; the Allocation page then rebuilds the same plan."""
    st.session_state.sparsity = float(row["sparsity"])
    st.session_state.gamma = float(row["gamma"])
    state.clear("pruned", "evals")
    st.session_state.pop("plan", None)
    st.switch_page("pages/allocation.py")


def main() -> None:
    st.title("6 · Sweep")
    frame.explain(EXPLANATION)
    scored = frame.scored_model()
    if scored is None:
        return
    lm, _, scores, shape = scored
    settings = _controls(shape)
    if settings is None:
        return
    st.caption(f"{len(sweep_points(settings))} points (the dense model first, as the reference).")
    if st.button("Run sweep", type="primary", key="run_sweep"):
        with (
            guard("running the sweep") as g,
            progress_status("Sweep") as progress,
            resources.hold_device(lm.model, progress),
        ):
            rows = run_sweep(lm, scores, settings, progress)
        if not g.failed:
            state.put("sweep", (rows, settings.__dict__.copy()))
            st.session_state.pop("sweep_pick", None)
    result = state.get("sweep")
    if result is not None:
        with guard("drawing the sweep"):
            _charts(result[0], result[1])


main()
