"""The pages' views of a T5 (encoder-decoder): what differs from a decoder-only model, in one place.

A page asks `is_seq2seq(lm)` and, for a T5, draws these instead of its decoder-only views; what is
the same (the calibration batch, scoring through the pipeline, accuracy through lm-eval, applying a
plan through `prune`, saving) stays on the page. A T5 has five kinds of units, not two
(`nirvana.t5.anatomy.KINDS`: the heads of encoder self-, decoder self- and cross-attention, and the
FFN neurons of each stack); every head is its own KV group (g = 1); the allocation is one global
ranking over both stacks or one per stack (docs/METHOD-T5.md). Everything here runs from the
session's cached scores: a slider move is one `allocate` (no gradients).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import streamlit as st

from nirvana import charts
from nirvana.errors import InvalidInput
from nirvana.measure.speed_check import check_of
from nirvana.models.family import family
from nirvana.pruning.allocation import Allocation, allocate
from nirvana.pruning.plan import SCOPES
from nirvana.t5.anatomy import KINDS, LABELS, t5_shape
from nirvana.t5.measure import (
    t5_default_prompts,
)
from nirvana.t5.speed import (
    measure_seq2seq_speeds,
    seq2seq_speedup_rows,
    seq2seq_summary,
)
from nirvana.t5.sweep import SEQ2SEQ_QUALITY, Seq2SeqSweepSettings, run_seq2seq_sweep
from ui import frame, resources, state
from ui.errors import guard
from ui.progress import progress_status
from ui.speed import (
    controls,
    speedup_metric,
    sweep_checked,
    sweep_speed_shown,
    sweep_warning,
    verdicts,
    without_unresolved,
)

ATTENTION_KINDS = [k for k, v in KINDS.items() if v.attention]
FFN_KINDS = [k for k, v in KINDS.items() if not v.attention]
PHASES = ("encoder", "decode")  # what a T5's speed is timed in: one encoder pass, then the decode steps
SCOPE_HELP = {
    "global": "one ranking over both stacks (the default): a stack whose units matter less loses more",
    "per-stack": "the target applies to each stack on its own: encoder and decoder lose the same share",
}
EXPLANATION = r"""
**A T5 is an encoder-decoder.** The **encoder** (E layers) reads the input; the **decoder** (L layers)
writes the output one token at a time, reading the encoder's states through **cross-attention**. So there
are three kinds of attention (encoder self, decoder self, decoder cross) and two FFNs (one per stack), and
NIRVANA prunes five kinds of *units*, always whole:

- **head** (of any of the three attentions): $d$ rows of `q`, `k`, `v` and $d$ columns of `o`, so
  $4dD$ weights. T5 has no grouped-query attention: every head is its own KV group ($g = 1$). The first
  layer of each stack owns the **relative position bias**, one column per head: a removed head takes its column.
- **FFN neuron**: one row of `wi` (T5 v1.0, ReLU) or of `wi_0` and `wi_1` (v1.1 / FLAN-T5, gated GELU) and
  one column of `wo`: $2D$ or $3D$ weights.

The saliency objective is the decoder's logits under teacher forcing: each calibration window's first
half is the encoder's input, its second half the decoder's target (docs/METHOD-T5.md says why).
"""


def is_seq2seq(lm) -> bool:
    """The pages' one question of the family: a model without a decoder-only shape gets this module's views."""
    return lm is not None and not family(lm.model).decoder_shape


# ---- Model page ---------------------------------------------------------------------------------------------------


def model_facts(lm, spec) -> None:
    facts = resources.model_facts(lm, spec.key)
    pruned = " · pruned" if facts["pruned"] else ""
    st.subheader(f"`{facts['model']}` · {facts['model_type']} (encoder-decoder){pruned}")
    row = st.columns(4)
    row[0].metric("Encoder / decoder layers", f"{facts['encoder_layers']} / {facts['decoder_layers']}")
    row[1].metric("Hidden size D", facts["hidden_size"])
    row[2].metric("Heads × head dim d", f"{facts['heads']} × {facts['head_dim']}")
    row[3].metric("FFN width", f"{facts['d_ff']} ({'gated GELU' if facts['gated'] else 'ReLU'})")
    row = st.columns(4)
    row[0].metric("Parameters", f"{facts['parameters'] / 1e6:.2f} M")
    row[1].metric(
        "Block parameters",
        f"{facts['block_parameters'] / 1e6:.2f} M",
        help="weights of q, k, v, o of the three attentions and wi / wo of both FFNs: what pruning removes",
    )
    gammas = facts["default_gamma"]
    row[2].metric("γ* (one global ranking)", "—" if not gammas else f"{next(iter(gammas['global'].values())):.2f}")
    row[3].metric(
        "γ* per stack (encoder / decoder)",
        "—" if not gammas else " / ".join(f"{g:.2f}" for g in gammas["per-stack"].values()),
    )
    d, D = facts["head_dim"], facts["hidden_size"]
    per_neuron = (3 if facts["gated"] else 2) * D
    layers = {"encoder": facts["encoder_layers"], "decoder": facts["decoder_layers"]}
    table = pd.DataFrame(
        [
            {
                "unit kind": LABELS[kind],
                "stack": k.stack,
                "layers": layers[k.stack],
                "units (all layers)": facts["prunable_units"][kind],
                "weights per unit": 4 * d * D if k.attention else per_neuron,
            }
            for kind, k in KINDS.items()
        ]
    )
    st.markdown("**Prunable units**")
    st.dataframe(table, hide_index=True, width="stretch")
    if facts["pruned"]:
        st.info(
            "This T5 is already pruned (its layers differ in width). Evaluate it on **Prune & compare**; to score "
            "and prune again, load the dense model."
        )
    with st.expander("All facts (as `nirvana info --json` prints them)"):
        st.json(facts, expanded=False)
    st.caption(f"Loaded on {facts['device']} as {facts['dtype']} in {facts['model_load_seconds']:.2f} s (cached).")


# ---- Saliency page ------------------------------------------------------------------------------------------------


def _heatmaps(scores, masks: dict | None, mode: str, suffix: str, what: str) -> None:
    """Three head heatmaps side by side, then the two FFN heatmaps (encoder, decoder)."""
    name = scores.criterion
    for col, kind in zip(st.columns(len(ATTENTION_KINDS)), ATTENTION_KINDS):
        col.plotly_chart(
            charts.kv_heatmap(
                scores.units[kind], None if masks is None else masks[kind],
                title=f"{name}: {LABELS[kind]} {what}".rstrip(), unit="head",
            ),
            key=f"t5_{kind}_{suffix}",
        )  # fmt: skip
    for col, kind in zip(st.columns(len(FFN_KINDS)), FFN_KINDS):
        col.plotly_chart(
            charts.neuron_heatmap(
                scores.units[kind], None if masks is None else masks[kind], mode=mode,
                title=f"{name}: {LABELS[kind]} {what}".rstrip(),
            ),
            key=f"t5_{kind}_{suffix}",
        )  # fmt: skip


def saliency(scores, second, mode: str) -> None:
    """The five kinds' heatmaps and each stack's per-layer totals; a second criterion's below, in full."""
    meta = scores.meta
    row = st.columns(4)
    row[0].metric("Criterion", scores.criterion)
    row[1].metric("Scoring time", "cached" if meta.get("cache_hit") else f"{meta.get('seconds', 0):.1f} s")
    heads = sum(scores.units[k].numel() for k in ATTENTION_KINDS)
    neurons = sum(scores.units[k].numel() for k in FFN_KINDS)
    row[2].metric("Heads (3 attention kinds)", f"{heads}")
    row[3].metric("FFN neurons (2 stacks)", f"{neurons:,}")
    for s, suffix in ((scores, "a"), *(((second, "b"),) if second is not None else ())):
        if suffix == "b":
            st.subheader(f"Second criterion: {s.criterion}")
        _heatmaps(s, None, mode, suffix, "")
        t = s.units
        left, right = st.columns(2)
        left.plotly_chart(
            charts.layer_totals(t["enc_self"], t["enc_ffn"], title=f"{s.criterion}: encoder per-layer totals"),
            key=f"t5_totals_enc_{suffix}",
        )
        decoder_heads = t["dec_self"] + t["cross"] if t["dec_self"].shape == t["cross"].shape else t["dec_self"]
        right.plotly_chart(
            charts.layer_totals(decoder_heads, t["dec_ffn"], title=f"{s.criterion}: decoder per-layer totals"),
            key=f"t5_totals_dec_{suffix}",
        )
    st.caption(
        "Decoder totals: attention sums the self- and cross-attention heads of each layer. The first block of each "
        "stack owns that stack's relative position bias (one column per head), scored with its heads."
    )


# ---- Allocation page ----------------------------------------------------------------------------------------------


@st.cache_data(max_entries=256, show_spinner=False)
def _plan(_scores, scores_key: str, _model, spec_key: str, sparsity: float, gamma, scope: str, align: int):
    """`allocate` (pure array work, milliseconds) cached by scores and settings."""
    return allocate(_scores, t5_shape(_model), Allocation(sparsity, gamma, align, scope))


def _sliders(lm) -> tuple[float, float | None, str, int]:
    st.session_state.setdefault("sparsity", 0.2)
    st.session_state.setdefault("t5_gamma_star", True)
    st.session_state.setdefault("t5_gamma", 1.0)
    st.session_state.setdefault("t5_scope", "global")
    d_ff = lm.model.config.d_ff
    aligns = [a for a in (1, 2, 4, 8, 16, 32, 64) if a <= d_ff]
    if st.session_state.get("align") not in aligns:
        st.session_state["align"] = 8 if 8 in aligns else aligns[-1]
    c = st.columns([4, 3, 2, 2])
    sparsity = c[0].slider("Target sparsity s (fraction of block weights removed)", 0.0, 0.9, step=0.01, key="sparsity")
    star = c[1].checkbox("γ = γ* of each ranking", key="t5_gamma_star", help="the analytic default, redone for T5")
    gamma = c[1].slider("γ: neuron vs head pruning ratio", 0.05, 10.0, step=0.05, key="t5_gamma", disabled=star)
    scope = c[2].radio("Ranking", SCOPES, key="t5_scope", help="; ".join(f"{k}: {v}" for k, v in SCOPE_HELP.items()))
    align = c[3].select_slider("Align kept neurons to", aligns, key="align", help="1 = no rounding")
    return float(sparsity), None if star else float(gamma), scope, int(align)


def allocation(lm, scores_key: str, scores) -> None:
    """Sliders -> a T5 plan from the cached scores -> kept units per layer of each kind, and what goes."""
    sparsity, gamma, scope, align = _sliders(lm)
    with guard("allocating the pruning budget") as g:
        plan = _plan(scores, scores_key, lm.model, state.spec().key, sparsity, gamma, scope, align)
    if g.failed:
        return
    state.session.plan = plan
    stats, widths = plan.stats, plan.dense_widths
    counts = plan.kept_counts
    row = st.columns(4)
    frame.achieved_metric(row[0], stats["achieved_block_sparsity"], sparsity)
    heads_total = sum(len(counts[k]) * widths[k] for k in ATTENTION_KINDS)
    neurons_total = sum(len(counts[k]) * widths[k] for k in FFN_KINDS)
    row[1].metric(f"Heads pruned (of {heads_total})", heads_total - sum(sum(counts[k]) for k in ATTENTION_KINDS))
    row[2].metric(
        f"Neurons pruned (of {neurons_total:,})", f"{neurons_total - sum(sum(counts[k]) for k in FFN_KINDS):,}"
    )
    used = ", ".join(f"{g_:.2f}" for g_ in plan.settings.gamma.values())
    row[3].metric("γ used" + (" (encoder, decoder)" if scope == "per-stack" else ""), used)
    for note in stats.get("notes") or []:
        st.warning(note)
    left, right = st.columns([1, 1])
    left.plotly_chart(
        charts.kind_kept_bars(counts, widths, LABELS, title=f"Kept units per layer at s = {sparsity:.2f} ({scope})"),
        key="t5_kept_bars",
    )
    kept = pd.DataFrame(
        [{"unit kind": LABELS[k], "kept": sum(counts[k]), "of": len(counts[k]) * widths[k]} for k in KINDS]
    )
    kept["kept %"] = (100 * kept["kept"] / kept["of"]).round(1)
    right.dataframe(kept, hide_index=True, width="stretch")
    right.caption(
        "A head costs 4·d·D weights and a neuron 2·D or 3·D, so the target is met on weights, not on unit counts. "
        "Every attention keeps at least one head; FFN widths are rounded up to the alignment."
    )
    masks = charts.kind_masks(plan.kept, widths)
    _heatmaps(scores, masks, st.session_state.get("neuron_mode", "sorted"), "alloc", "· pruned ×")
    st.download_button(
        "Download plan JSON",
        plan.to_json,
        file_name=f"t5-plan-s{sparsity:.2f}-{scope}.json",
        mime="application/json",
        key="download_plan_alloc",
        on_click="ignore",
    )


def default_prompts(lm) -> str:
    """The T5's default prompts, one per line (instructions for FLAN-T5, task prefixes for T5)."""
    return "\n".join(p["prompt"] for p in t5_default_prompts(lm.model)[:4])


def plan_line(plan) -> str:
    s = plan.settings
    gammas = ", ".join(f"{g:.2f}" for g in s.gamma.values())
    return (
        f"T5 plan: sparsity **{s.sparsity:.2f}**, {s.allocation} ranking, γ {gammas}, align {s.align}, criterion "
        f"`{s.criterion}` → **{plan.stats['achieved_block_sparsity']:.1%}** of block weights removed."
    )


def plan_stem(plan) -> str:
    return f"t5-s{plan.settings.sparsity:.2f}-{plan.settings.allocation}"


# ---- Prune & compare: speed -----------------------------------------------------------------------------------------


def speed(lm, pruned: state.PrunedCopy, results: dict) -> None:
    """Encoder pass and decode steps of dense and pruned, repeats interleaved, beside the FLOPs ideal."""
    settings = controls("Measure speed")
    if settings is not None:
        label = "Speed, dense and pruned interleaved"
        with (
            guard("measuring speed") as g,
            progress_status(label) as progress,
            resources.hold_device(lm.model, progress),
        ):
            measured = measure_seq2seq_speeds(
                {"dense": lm.model, "pruned": pruned.model}, prompt_len=64, progress=progress, **settings
            )
        if not g.failed:
            results["speed"] = measured
    measured = results.get("speed")
    if not measured:
        st.caption("Runs a 64-token input through the encoder, then the decode steps; median of the repeats.")
        return
    rows = seq2seq_speedup_rows(measured["dense"], measured["pruned"])
    last = rows[-1]
    row = st.columns(3)
    for col, phase in zip(row, PHASES):
        speedup_metric(col, f"{phase.capitalize()} speed-up, batch {last['batch_size']}", check_of(last, phase))
    ideal = seq2seq_summary(lm.model)["flops_per_token"] / seq2seq_summary(pruned.model)["flops_per_token"]
    row[2].metric("Ideal speed-up (FLOPs, 512-token windows)", f"{ideal:.2f}×")
    verdicts(rows, PHASES)
    st.dataframe(pd.DataFrame(without_unresolved(rows, PHASES)).round(3), hide_index=True, width="stretch")
    d = measured["dense"]
    st.caption(
        f"Measured on {d.get('device_name', d.get('device'))} ({d.get('threads', '?')} threads): {d['repeats']} "
        "rounds, each timing dense, then pruned; the speed-up is the median of the rounds' ratios, and one more "
        "than 1.1× its FLOPs ideal is flagged, not shown. On a shared CPU other processes change these figures."
    )


# ---- Sweep page ---------------------------------------------------------------------------------------------------


def _label(row: dict) -> str:
    if row["method"] == "dense":
        return "dense (the reference)"
    gamma = "γ*" if row["gamma"] is None else f"γ={row['gamma']:.2f}"
    return f"{row['axis']}: s={row['sparsity']:.2f}, {gamma}"


def sweep(lm, scores_key: str, scores) -> None:
    """Quality and measured decode speed against sparsity and γ, from the cached scores; the Pareto chart."""
    st.session_state.setdefault("t5_sweep_metric", "perplexity")
    st.session_state.setdefault("t5_sweep_sparsities", "0.1, 0.2, 0.3, 0.5")
    st.session_state.setdefault("t5_sweep_gammas", "0.25, 0.5, 1, 2")
    st.session_state.setdefault("sweep_tokens", 1024)
    st.session_state.setdefault("sweep_speed", True)
    scope = st.session_state.get("t5_scope", "global")
    c = st.columns([2, 3, 3, 2, 2])
    metric = c[0].radio("Quality", list(SEQ2SEQ_QUALITY), format_func=SEQ2SEQ_QUALITY.get, key="t5_sweep_metric")
    sparsities = c[1].text_input("Sparsities (at γ*)", key="t5_sweep_sparsities")
    centre = float(st.session_state.get("sparsity", 0.2))
    gammas = c[2].text_input(f"γ values (at sparsity {centre:.2f})", key="t5_sweep_gammas")
    tokens = c[3].number_input("Perplexity tokens", 128, 1_000_000, step=512, key="sweep_tokens")
    measure_speed = c[4].checkbox("Measure decode speed", key="sweep_speed")
    try:
        settings = Seq2SeqSweepSettings(
            frame.parse_floats(sparsities), frame.parse_floats(gammas), sparsity=centre, scope=scope,
            align=int(st.session_state.get("align", 8)), metric=metric, tokens=int(tokens),
            window=min(256, int(tokens)), speed=bool(measure_speed),
        )  # fmt: skip
    except ValueError:
        st.error("Sparsities and γ values must be numbers separated by commas, e.g. `0.1, 0.2, 0.5`.")
        return
    except InvalidInput as exc:  # the message says what is accepted
        st.error(str(exc))
        return
    st.caption(f"Ranking: {scope} (set on the Allocation page). {len(settings.points())} points, the dense one first.")
    if st.button("Run sweep", type="primary", key="run_sweep"):
        with (
            guard("running the sweep") as g,
            progress_status("Sweep") as progress,
            resources.hold_device(lm.model, progress),
        ):
            rows = run_seq2seq_sweep(lm, scores, settings, progress)
        if not g.failed:
            state.session.t5_sweep = {"rows": rows, "metric": metric, "scores_key": scores_key}
    result = state.session.t5_sweep
    if not result or result.get("scores_key") != scores_key:
        return
    rows, quality = sweep_checked(result["rows"]), SEQ2SEQ_QUALITY[result["metric"]]
    table = pd.DataFrame(rows)
    has_speed = sweep_speed_shown(table)
    sweep_warning(rows, _label)
    log_y = (quality,) if result["metric"] == "perplexity" else ()
    for axis, x_title in (("sparsity", "target sparsity"), ("gamma", "γ")):
        on_axis = (table.axis == axis) | ((table.axis == "dense") & (axis == "sparsity"))  # sparsity starts at 0
        points = table[on_axis]
        if len(points) < 2:
            continue
        points = points.sort_values(axis)
        series = {quality: points["quality"].tolist()}
        if has_speed:
            series["decode tokens/s (batch 1)"] = points["decode_tokens_per_s"].tolist()
        series["ideal speed-up (FLOPs)"] = points["ideal_speedup"].tolist()
        st.plotly_chart(
            charts.sweep_chart(points[axis].tolist(), series, x_title=x_title, title=f"Against {x_title}", log_y=log_y),
            key=f"t5_sweep_{axis}",
        )
    x_col, x_title = ("decode_tokens_per_s", "decode tokens/s") if has_speed else ("ideal_speedup", "ideal speed-up")
    labels = [_label(r) for r in rows]
    st.plotly_chart(
        charts.pareto_chart(table[x_col].tolist(), table["quality"].tolist(), labels, x_title=x_title, y_title=quality),
        key="t5_pareto",
    )
    st.dataframe(table.rename(columns={"quality": quality}), hide_index=True, width="stretch")
    pick = st.selectbox("Load the plan of", range(len(rows)), format_func=labels.__getitem__, key="t5_sweep_pick")
    if st.button("Load this plan", key="load_sweep_plan"):
        chosen = rows[int(pick)]
        st.session_state.sparsity = float(chosen["sparsity"])
        given = chosen["axis"] == "gamma"
        st.session_state.t5_gamma_star = not given
        if given:
            st.session_state.t5_gamma = float(np.clip(chosen["gamma"], 0.05, 10.0))
        state.session.forget("pruned", "evals", "plan")
        st.switch_page("pages/allocation.py")
