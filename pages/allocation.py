"""Page 3: sparsity and gamma sliders -> a plan, instantly, from cached scores."""

from __future__ import annotations

from ui import routing

routing.require()  # first, before the heavy imports: see ui/routing.py

import math
from dataclasses import replace

import streamlit as st

from nirvana import charts
from nirvana.measure.flops import DEFAULT_CONTEXT, flops_per_token
from nirvana.models.shapes import ModelShape
from nirvana.pruning.allocation import Allocation, default_gamma
from nirvana.pruning.plan import MAX_SPARSITY
from nirvana.pruning.slicing import planned_shape
from ui import architecture, frame, live_text, methods, resources, seq2seq, state
from ui.errors import guard

ALIGNS = (1, 8, 16, 64, 128)
GAMMA_STEP = 0.05
EXPLANATION = r"""
**What is shown.** A *plan*: which KV groups and neurons each layer keeps at the chosen sparsity.
It is recomputed from the cached scores on every slider move (no gradients: milliseconds).

**The formulas.** Sparsity $s$ is the fraction of decoder-block weights to remove. One KV group
costs $c_a = 2(g+1)d$ weights per hidden unit, one neuron $c_m = 3$. $\gamma$ = (fraction of
neurons pruned) / (fraction of KV groups pruned) splits the budget:

$$
p_a = s\,\frac{H_{kv} c_a + I c_m}{H_{kv} c_a + \gamma I c_m}
$$

$$
n_{attn} = \lfloor p_a L H_{kv} \rfloor, \quad n_{mlp} = \lfloor \gamma p_a L I \rfloor
$$

Then **global ranking**: all KV groups of all layers are sorted together and the $n_{attn}$ lowest
go; all neurons likewise. Each layer keeps at least one KV group, and its kept neurons are rounded
up to a multiple of the alignment (fast matrix kernels like widths divisible by 8).
The analytic default $\gamma^\ast = 3Ig / (2dH_{kv}(g+1)^2)$ balances the two so that pruning a
KV group and a neuron cost the same per parameter, corrected for grouped-query attention.

**How to read it.** Bars: units each layer keeps under global ranking; dotted markers: the
*uniform* allocation (the same sparsity in every layer) for contrast; solid lines: the other
pruning methods chosen above, at the same target (LLM-Pruner's flat band with untouched first and
last layers, FLAP's adaptive layers), each from its own scores. On the heatmaps, darkened
cells (and crosses) are the units that go. *Achieved* block sparsity differs slightly from the
target because units are whole and neurons are aligned; the *total* parameter reduction is
smaller still, because embeddings are never pruned.

**SliceGPT** keeps every head and neuron and slices the hidden dimension instead, so it is not a
line on the bars: its own panel shows the kept hidden width at the same target and its PCA
spectrum, the fraction of each layer's signal variance that the kept dimensions hold.
"""


def _sliders(shape: ModelShape, criterion: str) -> tuple[float, float, int]:
    gamma_star = default_gamma(shape)
    gamma_default = round(round(gamma_star / GAMMA_STEP) * GAMMA_STEP, 2)
    gamma_max = float(max(10.0, math.ceil(3 * gamma_star)))
    st.session_state.setdefault("sparsity", 0.2)
    st.session_state.setdefault("gamma", gamma_default)
    aligns = [a for a in ALIGNS if a <= min(shape.intermediate)]
    st.session_state.setdefault("align", 8 if 8 in aligns else aligns[-1])
    c1, c2, c3 = st.columns([4, 4, 2])
    sparsity = c1.slider(
        "Target sparsity s (fraction of block weights removed)",
        0.0,
        min(0.9, MAX_SPARSITY),
        step=0.01,
        key="sparsity",
    )
    gamma = c2.slider(
        f"γ: neuron vs KV-group pruning ratio (analytic γ* = {gamma_star:.2f})",
        GAMMA_STEP,
        gamma_max,
        step=GAMMA_STEP,
        key="gamma",
        help="γ > 1 prunes MLP neurons faster than attention; the default is the analytic γ*",
    )
    if abs(gamma - gamma_default) > 1e-9:
        c2.button(f"Reset γ to γ* = {gamma_default:.2f}", key="reset_gamma", on_click=_set_gamma, args=(gamma_default,))
    else:
        c2.caption(f"γ is at the analytic default γ* = {gamma_star:.3f}")
    _gamma_hint(c2, criterion, float(sparsity), gamma_star, gamma_max)
    align = c3.select_slider("Align kept neurons to", aligns, key="align", help="1 = no rounding")
    return float(sparsity), float(gamma), int(align)


def _measured_gamma(model: str) -> dict | None:
    """`committed_gamma(model)`, read from disk once per file version (slider moves reuse it)."""
    from nirvana.bench.gamma import gamma_path

    path = gamma_path(model)
    return _committed_gamma(model, path.stat().st_mtime) if path.exists() else None


@st.cache_data(max_entries=8, show_spinner=False)
def _committed_gamma(model: str, mtime: float) -> dict | None:
    from nirvana.bench.gamma import committed_gamma

    return committed_gamma(model)


def _gamma_hint(where, criterion: str, sparsity: float, gamma_star: float, gamma_max: float) -> None:
    """What the committed γ benchmark of this model measured near this sparsity (Evidence page)."""
    from nirvana.bench.gamma import kl_at

    data = _measured_gamma(state.spec().name)
    result = (data or {}).get("criteria", {}).get(criterion)
    if not result or not result["best"]:
        return
    nearest = min(result["best"], key=lambda s: abs(float(s) - sparsity))
    best = result["best"][nearest]
    at_star = kl_at(result["points"], float(nearest), round(gamma_star, 4))
    versus = f" vs {at_star:.3f} at γ*" if at_star else ""
    where.caption(
        f"Measured on this model ({criterion}, sparsity {float(nearest):g}, Evidence page): the lowest KL to dense is "
        f"at γ = {best['gamma']:g} (KL {best['kl']:.3f}{versus})."
    )
    if abs(best["gamma"] - st.session_state.gamma) > 1e-9 and best["gamma"] <= gamma_max:
        where.button(f"Try γ = {best['gamma']:g}", key="try_best_gamma", on_click=_set_gamma, args=(best["gamma"],))


def _set_gamma(value: float) -> None:
    st.session_state.gamma = value


def _metrics(shape: ModelShape, plan, uniform) -> None:
    stats = plan.stats
    after = planned_shape(shape, plan)
    flops_before, flops_after = flops_per_token(shape), flops_per_token(after)
    row = st.columns(5)
    frame.achieved_metric(row[0], stats["achieved_block_sparsity"], plan.settings.sparsity)
    row[1].metric(
        "Parameters",
        f"{stats['params_after'] / 1e6:.1f} M",
        delta=f"-{stats['total_param_reduction']:.1%} of {stats['params_before'] / 1e6:.1f} M",
        delta_color="off",
    )
    row[2].metric(
        "FLOPs / token",
        f"{flops_after / 1e6:.1f} M",
        delta=f"{flops_after / flops_before - 1:+.1%}",
        delta_color="off",
        help=f"analytic matmul FLOPs per token at a context of {DEFAULT_CONTEXT}",
    )
    row[3].metric(f"KV groups pruned (of {stats['kv_groups_total']})", f"{stats['kv_groups_pruned']}")
    row[4].metric(f"Neurons pruned (of {stats['neurons_total']:,})", f"{stats['neurons_pruned']:,}")
    st.caption(
        f"Uniform allocation at the same target: {uniform.stats['achieved_block_sparsity']:.1%} block sparsity, "
        f"{uniform.stats['kv_groups_pruned']} KV groups and {uniform.stats['neurons_pruned']:,} neurons pruned "
        f"(the same number in every layer). Ideal speed-up from FLOPs: ×{flops_before / flops_after:.2f}."
    )
    for note in stats.get("notes") or []:
        st.warning(note)


def _method_picker(lm) -> dict[str, tuple[dict, object]]:
    """The baselines to draw beside NIRVANA: {name: (settings, (scores key, scores))}, scored once (cached);
    a rotating method's entry is its dense PCA `Spectra` instead (computed once, cached)."""
    st.session_state.setdefault("alloc_methods", [])
    chosen = st.multiselect(
        "Draw beside NIRVANA (other pruning methods, each with its own scores)",
        methods.baselines(),
        format_func=methods.label,
        key="alloc_methods",
        help="Each method is scored once on the Saliency page's calibration batch (cached); "
        "the sliders then only re-allocate.",
    )
    settings = methods.boxes(chosen)
    scored = methods.score_methods(lm, settings, "Allocation") if settings else {}
    for name in [n for n in settings if methods.rotates(n)]:
        spectra = methods.spectra_for(lm, name, settings[name], "Allocation")
        if spectra is not None:
            scored[name] = spectra
    for name in [n for n in settings if methods.searches(n)]:  # no slider plan: the session's searched plans
        scored[name] = methods.searched_plans(name, settings[name])
    return {name: (settings[name], scored[name]) for name in settings if name in scored}


def _method_plans(lm, chosen: dict, shape: ModelShape, sparsity: float) -> list:
    """Each chosen baseline's plan at `sparsity` from its cached scores (a rotating method's: its kept width);
    a method that cannot reach it says so."""
    plans = []
    for name, (settings, entry) in chosen.items():
        with guard(f"allocating with {methods.label(name)} at sparsity {sparsity:.2f}") as g:
            if methods.rotates(name):
                plan = methods.rotation_plan_for(lm, name, settings, sparsity)
            elif methods.searches(name):
                plan = entry.get(round(sparsity, 2))
                if plan is None:
                    done = ", ".join(f"{s:.2f}" for s in sorted(entry)) or "none yet"
                    st.info(
                        f"{methods.label(name)} finds each layer's share by a search on calibration data (minutes, "
                        f"not a slider move): prune with it at s = {sparsity:.2f} on Prune & compare and its kept "
                        f"units are drawn here. Searched this session with these settings: {done}."
                    )
                    continue
            else:
                plan = methods.plan(entry, shape, name, settings, sparsity)
        if not g.failed:
            plans.append((name, plan))
    return plans


def _hidden_kept(plan, shape: ModelShape) -> int:
    """The residual-stream width a plan keeps: D, or a rotating method's sliced width."""
    return (plan.stats.get("slicegpt") or {}).get("hidden_kept", shape.hidden_size)


def _method_table(plan, others: list, shape: ModelShape) -> None:
    rows = [("NIRVANA (this page's plan)", plan)] + [(methods.label(n), p) for n, p in others]
    st.dataframe(
        [
            {
                "method": name,
                "achieved block sparsity": round(p.stats["achieved_block_sparsity"], 4),
                "KV groups pruned": p.stats["kv_groups_pruned"],
                "neurons pruned": p.stats["neurons_pruned"],
                "hidden width kept": _hidden_kept(p, shape),
                "layers untouched": 0
                if _hidden_kept(p, shape) < shape.hidden_size
                else sum(
                    kv == shape.num_kv_heads[i] and n == shape.intermediate[i]
                    for i, (kv, n) in enumerate(zip(p.kept_kv_groups, p.kept_neurons))
                ),
                "parameters after (M)": round(p.stats["params_after"] / 1e6, 3),
            }
            for name, p in rows
        ],
        hide_index=True,
    )


def _rotation_panel(name: str, plan, spectra, shape: ModelShape, sparsity: float) -> None:
    """A rotating method at the page's target: its kept hidden width and the variance that width keeps."""
    info = plan.stats["slicegpt"]
    width = info["hidden_kept"]
    st.subheader(f"{methods.label(name)} at s = {sparsity:.2f}: the residual stream")
    c = st.columns(4)
    c[0].metric("Hidden width kept", f"{width} of {shape.hidden_size}", delta=f"slicing {info['slicing']:.1%}")
    c[1].metric("Achieved block sparsity", f"{plan.stats['achieved_block_sparsity']:.1%}", delta_color="off")
    c[2].metric("Parameters after", f"{plan.stats['params_after'] / 1e6:.1f} M")
    kept = spectra.kept(width)
    c[3].metric("Least variance kept (a layer)", f"{min(kept['attention'] + kept['mlp']):.1%}")
    st.plotly_chart(charts.variance_kept_chart(kept, width, shape.hidden_size), key=f"spectrum_{name}")
    st.caption(
        f"Lines: the dense model's PCA spectra on the session's calibration batch (the rotation at slicing 0, "
        f"cached), read at {width} dimensions. A real {methods.label(name)} prune computes each layer's PCA on "
        "signals already sliced upstream, so its own figures (Prune & compare) are a little lower past layer 0. "
        "Shortcut matrices and the untied LM head are counted in the parameters."
    )


@st.fragment
def _interactive(lm, scores_key: str, scores, shape: ModelShape, chosen: dict) -> None:
    """Sliders and everything they drive. A fragment: a slider move reruns only this part of the page."""
    sparsity, gamma, align = _sliders(shape, scores.criterion)
    with guard("allocating the pruning budget") as g:
        allocation = Allocation(sparsity, gamma, align).resolve(shape)
        plan = resources.plan_for(scores, scores_key, shape.to_dict(), allocation)
        uniform = resources.plan_for(scores, scores_key, shape.to_dict(), replace(allocation, kind="uniform"))
    if g.failed:
        return
    state.session.plan = plan
    _metrics(shape, plan, uniform)
    frame.show_calibration_note(scores)  # the CLI's default calibration plans differently
    text_box = st.container()  # filled last: the charts below answer the slider first, the text follows
    compare = None
    second = state.session.scores2
    if second is not None and second[1].criterion != scores.criterion:
        key2, scores2 = second
        with guard("allocating for the second criterion"):
            other = resources.plan_for(scores2, key2, shape.to_dict(), allocation)
            compare = (scores2.criterion, other.kept_kv_groups, other.kept_neurons)
    others = _method_plans(lm, chosen, shape, sparsity)
    units = [(name, p) for name, p in others if not methods.rotates(name)]
    left, right = st.columns([1, 1])
    left.plotly_chart(
        charts.kept_units_bars(
            plan.kept_kv_groups,
            plan.kept_neurons,
            shape.num_kv_heads[0],
            shape.intermediate[0],
            uniform.kept_kv_groups,
            uniform.kept_neurons,
            title=f"Kept units per layer at s = {sparsity:.2f}, γ = {gamma:.2f}",
            compare=compare,
            methods=[(name, p.kept_kv_groups, p.kept_neurons) for name, p in units],
        ),
        key="kept_bars",
    )
    if others:
        with left:
            _method_table(plan, others, shape)
    if compare is not None:
        left.caption(
            f"Diamonds: {compare[0]} (the second criterion of the Saliency page) ranked globally at the same "
            "settings. Criteria whose scores grow with depth (Wanda-style) empty the first layers."
        )
    attn_mask, mlp_mask = charts.pruned_masks(plan)
    right.plotly_chart(
        charts.kv_heatmap(scores.attn, attn_mask, title="Which KV groups go (darkened, ×)"), key="kv_overlay"
    )
    mode = st.session_state.get("neuron_mode", "sorted")
    st.plotly_chart(
        charts.neuron_heatmap(scores.mlp, mlp_mask, mode=mode, title=f"Which neurons go (darkened; {mode} view)"),
        key="mlp_overlay",
    )
    with guard("drawing the architecture view"):
        architecture.show(shape, plan, scores)
    for name, p in others:
        if methods.rotates(name):
            with guard(f"drawing {methods.label(name)}'s spectrum"):
                _rotation_panel(name, p, chosen[name][1], shape, sparsity)
    st.download_button(
        "Download plan JSON",
        plan.to_json,  # called only when clicked: the JSON is not rebuilt on every slider move
        file_name=f"plan-s{sparsity:.2f}-g{gamma:.2f}.json",
        mime="application/json",
        key="download_plan_alloc",
        on_click="ignore",
    )
    routing.next_step(("prune.py", "prune a copy with this plan and compare it with the dense model"))
    with text_box:
        live_text.show(lm, plan)


def main() -> None:
    st.title("3 · Allocation")
    frame.explain(EXPLANATION)
    scored = frame.scored_model()
    if scored is None:
        return
    lm, scores_key, scores, shape = scored
    if shape is None:  # a T5: five unit kinds, NIRVANA's own allocation (the baselines read decoder layers)
        with guard("the T5 allocation"):
            seq2seq.allocation(lm, scores_key, scores)
        return
    chosen = {}
    with guard("choosing the methods to compare"):
        chosen = _method_picker(lm)
    _interactive(lm, scores_key, scores, shape, chosen)


main()
