"""Page 2: score every KV group and MLP neuron; heatmaps, per-layer totals, a second criterion."""

from __future__ import annotations

from ui import routing

routing.require()  # first, before the heavy imports: see ui/routing.py

import streamlit as st

from nirvana import charts
from nirvana.measure import duration
from nirvana.progress import sub_progress
from nirvana.scoring.criteria import CRITERIA, criteria_help
from nirvana.t5.scoring import T5_CRITERIA
from ui import frame, resources, seq2seq, state
from ui.errors import guard
from ui.progress import progress_status

SOURCES = {
    "wikitext2-valid": "WikiText-2 validation (the calibration pool; disjoint from the test split)",
    "ptb": "Penn Treebank validation",
    "pydoc": "Python documentation shipped with CPython (always available)",
    "python-code": "Python standard library source shipped with CPython: code, for code models",
    "custom": "a .txt / .jsonl / .npy file on this machine",
}
EXPLANATION = r"""
**What is shown.** Every prunable unit gets one importance score. Rows are layers (layer 0 at the
bottom); columns are the units of that layer: the KV groups, and the MLP neurons (binned: each
column is the mean of several neurons). Colour is on a **log scale**: scores span orders of
magnitude. Hover a cell to read the layer, unit and raw score.

**The formula (criterion `nirvana`).** Run the calibration batch (N sequences of T tokens) through
the model, take the logits $z \in \mathbb{R}^{N\times T\times V}$ and form one scalar
$F = \operatorname{mean}_{n,v}\max_t z_{n,t,v}$. One backward pass gives $\partial F/\partial W$ for
every weight, and the weight's saliency is $s(W) = |\partial F/\partial W \odot W|$: how much the
model's output would move if that weight were removed (a first-order, NTK-inspired view). A unit's
score is the plain sum of the saliencies of the weights it owns. Other criteria (`taylor` uses the
loss instead of the output, `magnitude` just $|W|$, `wanda` $|W|\cdot\|X\|$, `random`) score the
same units, so they can be compared side by side.

**How to read it.** Dark cells are the candidates for pruning. *Sorted* view: neurons ordered
best-first inside each layer, so you see how fast importance falls off per layer; *index* view:
neurons by position. The bars give each layer's total: layers with small totals will lose more
units under global ranking.
"""


def _controls(lm) -> dict:
    defaults = state.default_calibration()
    names = list(T5_CRITERIA if seq2seq.is_seq2seq(lm) else CRITERIA)  # a T5 has no Wanda (see T5_CRITERIA)
    for key, value in (
        ("calib_source", "wikitext2-valid"),
        ("calib_samples", defaults["samples"]),
        ("calib_seq_len", defaults["seq_len"]),
        ("calib_seed", defaults["seed"]),
        ("criterion", "nirvana"),
        ("criterion2", "(none)"),
        ("neuron_mode", "sorted"),
    ):
        st.session_state.setdefault(key, value)
    c = st.columns([3, 1, 1, 1, 2, 2])
    source = c[0].selectbox(
        "Calibration text", list(SOURCES), format_func=lambda k: f"{k}: {SOURCES[k]}", key="calib_source"
    )
    samples = c[1].number_input("N sequences", 1, 512, step=1, key="calib_samples")
    seq_len = c[2].number_input("T tokens", 8, 2048, step=8, key="calib_seq_len")
    seed = c[3].number_input("seed", 0, 10_000, step=1, key="calib_seed")
    for key, fallback in (("criterion", "nirvana"), ("criterion2", "(none)")):
        if st.session_state[key] not in (*names, "(none)"):
            st.session_state[key] = fallback  # chosen for a decoder-only model before a T5 was loaded
    criterion = c[4].selectbox("Criterion", names, key="criterion", help=criteria_help())
    criterion2 = c[5].selectbox("Compare with", ["(none)", *names], key="criterion2")
    if source == "custom":
        source = st.text_input("File path", key="calib_path", placeholder="/path/to/text.txt") or ""
    if state.on_cpu():
        st.caption(
            f"Running on CPU: the default N = {state.default_calibration()['samples']} sequences of T = 128 tokens is "
            "a quarter of the paper's N = 32, to keep the one forward + backward pass short; its time grows with "
            "N × T, and with whatever else the machine is running."
        )
    return {
        "source": source,
        "samples": int(samples),
        "seq_len": int(seq_len),
        "seed": int(seed),
        "criterion": criterion,
        "criterion2": None if criterion2 == "(none)" else criterion2,
    }


def _estimate(lm, choice: dict) -> None:
    """'about N s on this machine' for the chosen criteria, before the button (scores on disk load at once)."""
    with guard("estimating the scoring time"):
        criteria = [c for c in (choice["criterion"], choice["criterion2"]) if c]
        seconds = resources.scoring_seconds(lm, state.spec().key, criteria, choice)
        if seconds is not None:
            st.caption(
                f"Scoring takes {duration.about(seconds)} on this machine ({choice['samples']} × {choice['seq_len']} "
                "tokens; estimated from the model's FLOPs and this machine's measured matrix-multiply rate, longer "
                "when the machine is busy). Scores computed before load at once."
            )


def _compute(lm, choice: dict) -> None:
    spec = state.spec()
    micro_batch = max(1, choice["samples"] // 4)  # progress (and a chance to cancel) every quarter
    criteria = [c for c in (choice["criterion"], choice["criterion2"]) if c]
    with guard("computing saliency") as g, progress_status(f"Scoring {spec.label()}") as progress:
        batch = resources.calibration(
            lm.tokenizer, spec.key, choice["source"], choice["samples"], choice["seq_len"], choice["seed"]
        )
        progress(0.02, f"calibration batch {batch.shape[0]}×{batch.shape[1]} tokens from {batch.source}")
        results = []
        for i, criterion in enumerate(criteria):
            step = sub_progress(progress, i / len(criteria), (i + 1) / len(criteria), f"{criterion}: ")
            results.append(resources.scores_for(lm, spec, criterion, batch, choice["seed"], micro_batch, step))
    if g.failed:
        return
    state.session.scores = results[0]
    state.session.scores2 = results[1] if len(results) > 1 else None
    state.session.calib_info = {**batch.describe(), "fallback_reason": batch.fallback_reason}
    state.session.calib_batch = batch  # the baseline methods score on the same batch
    state.session.forget("plan", "pruned", "evals", "sweep")  # they were built on the previous scores


def _views(scores, mode: str, suffix: str, compact: bool) -> None:
    """KV heatmap, neuron heatmap and per-layer totals of one criterion."""
    name = scores.criterion
    if compact:
        st.plotly_chart(
            charts.kv_heatmap(scores.attn, title=f"{name}: KV-group scores [layer × group]"), key=f"kv_{suffix}"
        )
        st.plotly_chart(
            charts.neuron_heatmap(scores.mlp, mode=mode, title=f"{name}: neuron scores [layer × neuron]"),
            key=f"mlp_{suffix}",
        )
    else:
        left, right = st.columns([1, 2])
        left.plotly_chart(
            charts.kv_heatmap(scores.attn, title=f"{name}: KV-group scores [layer × group]"), key=f"kv_{suffix}"
        )
        right.plotly_chart(
            charts.neuron_heatmap(scores.mlp, mode=mode, title=f"{name}: neuron scores [layer × neuron]"),
            key=f"mlp_{suffix}",
        )
    st.plotly_chart(
        charts.layer_totals(scores.attn, scores.mlp, title=f"{name}: per-layer totals"), key=f"totals_{suffix}"
    )


def _calibration_caption(info: dict) -> None:
    if info:
        st.caption(
            f"Calibration: {info.get('source')}, N = {info.get('samples')}, T = {info.get('seq_len')}, "
            f"seed {info.get('seed')}, batch hash `{info.get('hash')}`"
        )


def _neuron_mode() -> str:
    return st.radio(
        "Neuron view",
        charts.NEURON_MODES,
        horizontal=True,
        key="neuron_mode",
        help="sorted: best-first within each layer; index: by neuron position",
    )


def _results(lm) -> None:
    _, scores = state.session.scores
    second = state.session.scores2
    info = state.session.calib_info or {}
    if info.get("fallback_reason"):
        st.warning(f"Calibrated on the embedded Python docs instead: {info['fallback_reason']}")
    if seq2seq.is_seq2seq(lm):
        _calibration_caption(info)
        mode = _neuron_mode()
        seq2seq.saliency(scores, None if second is None else second[1], mode)
        return
    meta = scores.meta
    row = st.columns(4)
    row[0].metric("Criterion", scores.criterion)
    if meta.get("cache_hit"):  # from the memo or the disk cache: its `seconds` are the earlier computation's
        earlier = f"computed in {meta['seconds']:.1f} s earlier" if meta.get("seconds") is not None else None
        row[1].metric("Scoring time", "cached", earlier, delta_color="off", delta_arrow="off")
    else:
        row[1].metric("Scoring time", f"{meta.get('seconds', 0):.1f} s")
    row[2].metric("KV groups × layers", f"{scores.attn.shape[1]} × {scores.attn.shape[0]}")
    row[3].metric("Neurons × layers", f"{scores.mlp.shape[1]} × {scores.mlp.shape[0]}")
    _calibration_caption(info)
    mode = _neuron_mode()
    if second is None:
        _views(scores, mode, "a", compact=False)
    else:
        left, right = st.columns(2)
        with left:
            _views(scores, mode, "a", compact=True)
        with right:
            _views(second[1], mode, "b", compact=True)


def main() -> None:
    st.title("2 · Saliency")
    frame.explain(EXPLANATION, expanded=state.session.scores is None)
    lm = state.model()
    if lm is None:
        return
    choice = _controls(lm)
    _estimate(lm, choice)
    clicked = st.button("Compute saliency", type="primary", key="compute_saliency")
    autorun, state.session.autorun_saliency = state.session.autorun_saliency, None
    if clicked or autorun:
        _compute(lm, choice)
    if state.session.scores is not None:
        with guard("drawing the saliency charts"):
            _results(lm)
        routing.next_step(("allocation.py", "choose the sparsity and γ, and see which units go"))


main()
