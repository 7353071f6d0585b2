"""Page 6: quality and measured speed against sparsity and gamma; pick a target on the Pareto chart."""

from __future__ import annotations

from ui import routing

routing.require()  # first, before the heavy imports: see ui/routing.py

import contextlib
from dataclasses import replace

import pandas as pd
import streamlit as st

from nirvana import charts
from nirvana.errors import InvalidInput
from nirvana.measure import duration
from nirvana.methods import METHODS
from nirvana.models.shapes import ModelShape
from nirvana.progress import sub_progress
from nirvana.pruning.plan import MAX_SPARSITY
from nirvana.search.sweep import ACCURACY_AXES, QUALITY, SweepSettings, run_sweep, sweep_points, sweep_seconds
from ui import cluster, frame, methods, resources, seq2seq, state
from ui.errors import guard
from ui.progress import progress_status
from ui.speed import sweep_checked, sweep_speed_shown, sweep_warning

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

**Methods as series.** Choose several pruning methods: each is one line on the sparsity charts, in
its colour, and its points join the Pareto chart. A baseline (LLM-Pruner, FLAP) is scored once on
the Saliency page's calibration batch (cached) and re-allocated from those scores at each sparsity,
as NIRVANA is; SliceGPT has no scores and is rotated afresh at each sparsity (one forward pass,
layer by layer, a point: slower); γ is NIRVANA's own budget split, so only NIRVANA has the γ chart. A sparsity that
a method cannot reach (LLM-Pruner's same-ratio-per-layer steps) is left out of its line, and the
page says so.

**Careful with speed on a shared CPU:** each point is timed once, on its own, not in turn with the
dense model, so a busy moment can make the dense model look slow and a point look faster than its
arithmetic allows. A point whose decode speed-up over the dense point is more than 1.1× its FLOPs ideal
is flagged *disturbed* (the machine was busy; run the sweep again) and, when one is, the charts use
the ideal speed-up instead of the measured speed. Use the Prune page's interleaved measurement for the
figure you report.
"""

# (what each entry must be, an example): the text boxes' rules, said in the error box of a bad entry
SPARSITY_RULE = (f"a number in [0, {MAX_SPARSITY}] (the fraction of decoder-block weights removed)", "0.1, 0.2, 0.5")
GAMMA_RULE = ("a positive number (MLP fraction pruned / KV-group fraction pruned)", "0.5, 1, 2, 4")


def _controls(shape: ModelShape, gamma_axis: bool = True) -> SweepSettings | None:
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
    gammas = c[2].text_input(
        f"γ values (NIRVANA at sparsity {sparsity:.2f}; γ* = {gamma_star:.2f})",
        key="sweep_gammas",
        disabled=not gamma_axis,
        help=None if gamma_axis else "γ is NIRVANA's budget split: choose NIRVANA to sweep it",
    )
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
    try:  # every entry checked here, so no bad value reaches the sweep (and its traceback)
        s_values = frame.parse_checked(sparsities, "Sparsities", lambda s: 0 <= s <= MAX_SPARSITY, *SPARSITY_RULE)
        # a disabled box (no NIRVANA: gamma is its budget split) is not swept, so not checked
        g_values = frame.parse_checked(gammas, "γ values", lambda g: g > 0, *GAMMA_RULE) if gamma_axis else ()
    except InvalidInput as exc:  # the message names the bad entries and what is accepted
        st.error(str(exc), icon="⚠️")
        return None
    if not any(s > 0 for s in s_values) and not g_values:
        st.info("Enter at least one sparsity above 0 (or a γ value): the dense point alone is no sweep.")
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


def _series_of(points, quality: str, has_speed: bool) -> dict:
    """The measures of a sweep chart ({subplot title: values}) for `points` (rows of one line)."""
    out = {quality: points["quality"].tolist()}
    if has_speed:
        out["decode tokens/s (batch 1)"] = points["decode_tokens_per_s"].tolist()
    out["ideal speed-up (FLOPs)"] = points["ideal_speedup"].tolist()
    return out


def _charts(rows: list[dict], settings: dict) -> None:
    rows = sweep_checked(rows)
    frame_ = pd.DataFrame(rows)
    centre = settings["allocation"]
    quality = QUALITY[settings["metric"]]
    has_speed = sweep_speed_shown(frame_)
    sweep_warning(rows, _label)
    log_y = (quality,) if settings["metric"] == "perplexity" else ()
    dense = frame_[frame_.axis == "dense"]
    lines = {}
    for name in settings["methods"]:  # one line per method, each from the dense point (sparsity 0)
        own = frame_[(frame_.axis == "sparsity") & (frame_.method == name)]
        if len(own):
            points = pd.concat([dense, own]).sort_values("sparsity")
            lines[name] = (points["sparsity"].tolist(), _series_of(points, quality, has_speed))
    if lines:
        at = f" (NIRVANA at γ = {centre.gamma:.2f})" if any(map(methods.has_sliders, lines)) else ""
        title = f"Against sparsity{at}"
        figure = charts.methods_sweep_chart(lines, x_title="target sparsity", title=title, log_y=log_y)
        st.plotly_chart(figure, key="sweep_sparsity")
    points = frame_[frame_.axis == "gamma"].sort_values("gamma")  # NIRVANA only: gamma is its budget split
    if len(points):
        figure = charts.sweep_chart(
            points["gamma"].tolist(),
            _series_of(points, quality, has_speed),
            x_title="γ",
            title=f"Against γ (sparsity {centre.sparsity:.2f})",
            log_y=log_y,
            marker_x=centre.gamma_default,
            marker_label="γ*",
        )
        st.plotly_chart(figure, key="sweep_gamma")
    labels = [_label(r) for r in rows]
    event = st.plotly_chart(
        _pareto(frame_, rows, settings["metric"], selected=st.session_state.get("sweep_pick")),
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


def _pareto(frame_: pd.DataFrame, rows: list[dict], metric: str, selected: int | None = None):
    """The Pareto chart of the sweep's points: measured decode speed (or the ideal speed-up when speed is not
    shown) against quality, one colour and marker per method, a log axis for perplexity."""
    has_speed = sweep_speed_shown(frame_)
    x_col, x_title = ("decode_tokens_per_s", "decode tokens/s") if has_speed else ("ideal_speedup", "ideal speed-up")
    return charts.pareto_chart(
        frame_[x_col].tolist(),
        frame_["quality"].tolist(),
        [_label(r) for r in rows],
        x_title=x_title,
        y_title=QUALITY[metric],
        selected=selected,
        methods=frame_["method"].tolist(),
        sparsities=frame_["sparsity"].tolist(),
        gammas=frame_["gamma"].tolist(),
        log_y=metric == "perplexity",
        highlight=_recommended(frame_, x_col),
    )


def _recommended(frame_: pd.DataFrame, x_col: str):
    """(x, y, label) of the Evidence page's recommendation among this sweep's points, when it is one of them."""
    best = state.session.recommendation
    if best is None:
        return None
    hits = frame_[(frame_["method"] == best.method) & (frame_["sparsity"].round(6) == round(best.sparsity, 6))]
    if hits.empty:
        return None
    row = hits.iloc[0]
    return float(row[x_col]), float(row["quality"]), f"recommended: {methods.label(best.method)} s={best.sparsity:g}"


def _label(row: dict) -> str:
    if row["method"] == "dense":
        return "dense (the reference)"
    if methods.has_sliders(row["method"]):
        return f"{row['axis']}: s={row['sparsity']:.2f}, γ={row['gamma']:.2f}"
    return f"{methods.label(row['method'])}: s={row['sparsity']:.2f}"


def _load(row: dict) -> None:
    """NIRVANA (or dense): set the Allocation sliders to the point, the page rebuilds the same plan. Another
    method: set Prune & compare to it at that sparsity (its settings box keeps the sweep's settings)."""
    if row["method"] != "dense" and not methods.has_sliders(row["method"]):
        st.session_state.prune_method = row["method"]
        st.session_state.method_sparsity = float(row["sparsity"])
        st.switch_page("pages/prune.py")
    st.session_state.sparsity = float(row["sparsity"])
    if row["gamma"] is not None:  # the dense point of a sweep without NIRVANA has none
        st.session_state.gamma = float(row["gamma"])
    st.session_state.prune_method = methods.DEFAULT
    state.session.forget("pruned", "evals")
    st.session_state.pop("plan", None)
    st.switch_page("pages/allocation.py")


def _method_picker() -> dict[str, dict]:
    """{name: settings} of the methods to sweep (every row of METHODS can be chosen), with their boxes."""
    st.session_state.setdefault("sweep_methods", [methods.DEFAULT])
    chosen = st.multiselect("Methods (one series each)", list(METHODS), format_func=methods.label, key="sweep_methods")
    return methods.boxes(chosen)


def _series(lm, settings: SweepSettings, chosen: dict[str, dict]) -> list[tuple[str, SweepSettings]]:
    """One `SweepSettings` per method (the dense point with the first only), each baseline's sparsities cut to
    those it can reach; what it cannot reach is said in an error box."""
    out = []
    for name, method_settings in chosen.items():
        sparsities = settings.sparsities
        if not methods.has_sliders(name):
            reachable, refused = [], []
            for s in settings.sparsities:
                with guard(f"{methods.label(name)} at sparsity {s:g}") as g:
                    methods.check(lm, name, method_settings, s)
                (refused if g.failed else reachable).append(s)
            sparsities = tuple(reachable)
            if not sparsities:
                continue
        series = replace(settings, sparsities=sparsities, method=name, method_settings=method_settings or None)
        out.append((name, replace(series, dense=not out)))
    return out


def _live(placeholder, metric: str):
    """`on_row` of a sweep on a cluster: redraw the table and the Pareto chart with the points so far."""

    def draw(rows: list[dict]) -> None:
        with placeholder.container():
            frame_ = pd.DataFrame(sweep_checked(rows))
            st.plotly_chart(_pareto(frame_, rows, metric))
            st.dataframe(frame_.rename(columns={"quality": QUALITY[metric]}), hide_index=True, width="stretch")

    return draw


def _run(lm, nirvana_scores, settings: SweepSettings, chosen: dict[str, dict], where=None) -> None:
    """Measure every series; on a cluster (`where`), each point is a Ray task and the rows are drawn as they arrive."""
    series = _series(lm, settings, chosen)
    if not series:
        return
    baselines = {name: chosen[name] for name, _ in series if not methods.has_sliders(name)}
    scored = methods.score_methods(lm, baselines, "Sweep") if baselines else {}
    series = [(name, s) for name, s in series if methods.has_sliders(name) or name in scored or methods.on_data(name)]
    batch = methods.calibration_batch(lm)  # what SliceGPT rotates on, and Tyr searches on, at every point
    for name in [name for name, _ in series if methods.searches(name)]:
        st.info(f"{methods.label(name)} runs its search at every point (minutes each here); Cancel stops it.")
    live = _live(st.empty(), settings.metric) if where is not None else None
    with (
        guard("running the sweep") as g,
        progress_status("Sweep") as progress,
        contextlib.nullcontext() if where is not None else resources.hold_device(lm.model, progress),
    ):
        rows, total = [], sum(len(sweep_points(s)) for _, s in series)
        done = 0
        for name, s in series:
            n = len(sweep_points(s))
            step = sub_progress(progress, done / total, (done + n) / total, f"{methods.label(name)}: ")
            scores = nirvana_scores if methods.has_sliders(name) else scored.get(name, (None, None))[1]
            before = list(rows)
            on_row = (lambda so_far, before=before: live(before + so_far)) if live else None
            rows += run_sweep(lm, scores, s, step, cluster=where, on_row=on_row, batch=batch)
            done += n
    if not g.failed:
        state.session.sweep = (rows, {**settings.__dict__, "methods": [name for name, _ in series]})
        st.session_state.pop("sweep_pick", None)


def main() -> None:
    st.title("6 · Sweep")
    frame.explain(EXPLANATION)
    if seq2seq.is_seq2seq(state.model()):  # a T5: NIRVANA's own sweep over its five unit kinds
        scored = frame.scored_model()
        if scored is not None:
            with guard("the T5 sweep"):
                seq2seq.sweep(scored[0], scored[1], scored[2])
        return
    chosen = _method_picker()
    if not chosen:
        st.info("Choose at least one method (with valid settings) to sweep.")
        return
    nirvana_scores = None
    sliders = any(map(methods.has_sliders, chosen))  # NIRVANA: the Saliency page's scores, and the γ axis
    if sliders:
        scored = frame.scored_model()
        if scored is None:
            return
        lm, _, nirvana_scores, shape = scored
    else:
        lm = state.model()
        if lm is None:
            return
        shape = ModelShape.from_dict(resources.shape_dict(lm, state.spec().key))
    settings = _controls(shape, gamma_axis=sliders)
    if settings is None:
        return
    count = sum(len(sweep_points(replace(settings, method=name, dense=i == 0))) for i, name in enumerate(chosen))
    with guard("estimating the sweep time"):
        rate = resources.matmul_rate(*resources.device_dtype(lm))
        seconds = [
            sweep_seconds(shape, replace(settings, method=name, dense=i == 0), rate) for i, name in enumerate(chosen)
        ]
        about = f", {duration.about(sum(seconds))} on this machine" if None not in seconds else ""
        st.caption(f"{count} points (the dense model first, as the reference){about}.")
    where = None
    with guard("connecting to the Ray cluster of NIRVANA_RAY_ADDRESS") as g:
        where = cluster.cluster()
    if g.failed:
        return
    if where is not None:
        st.info(
            f"Runs on the {where.describe()}: every point is a Ray task there (the model is loaded on the workers "
            "by its name). The table and the Pareto chart below fill in as the points arrive."
        )
    if st.button("Run sweep", type="primary", key="run_sweep"):
        _run(lm, nirvana_scores, settings, chosen, where)
    result = state.session.sweep
    if result is not None:
        with guard("drawing the sweep"):
            _charts(result[0], result[1])
        routing.next_step(
            ("evidence.py", "the committed benchmarks: every method at every sparsity, measured at length"),
            lead="Next step: pick a point above (Load this plan) to prune it, or compare with the benchmarks",
        )


main()
