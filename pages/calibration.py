"""Page 4: choose the calibration batch by KL divergence to the dense model."""

from __future__ import annotations

from ui import routing

routing.require()  # first, before the heavy imports: see ui/routing.py

import pandas as pd
import streamlit as st

from nirvana import charts
from nirvana.measure import duration
from nirvana.measure.compare import kl_rows
from nirvana.models.shapes import ModelShape
from nirvana.scoring.criteria import DATA_CRITERIA, criteria_help
from nirvana.search.calibration import AnchorSpec, selection_seconds
from ui import frame, resources, seq2seq, state
from ui.errors import guard
from ui.progress import progress_status

POOLS = ("wikitext2-valid", "ptb", "pydoc")
EXPLANATION = r"""
**Why.** Saliency is measured on a small calibration batch, and a different random batch can
give a different plan. NIRVANA does not trust one draw: it tries **K candidate batches** (seeds
0..K−1), prunes with each at the target sparsity and γ, and keeps the batch whose pruned model
stays **closest to the dense model**.

**The formula.** On a fixed *anchor* set of held-out text (never part of any candidate),

$$
\mathrm{KL}(P_{\text{dense}}\,\|\,P_{\text{pruned}}) = \frac{1}{\#\text{tokens}}\sum_{\text{tokens}}
\sum_{v \in V} p_{\text{dense}}(v)\,\log\frac{p_{\text{dense}}(v)}{p_{\text{pruned}}(v)}
$$

in nats per token: 0 means the pruned model predicts exactly like the dense one.

**How to read it.** One bar per candidate; the highlighted one is chosen. Small differences
between bars mean the method is robust to the calibration draw at this sparsity; large ones mean
the choice matters. Each candidate costs one scoring pass (forward + backward) plus one forward
over the anchor set, so K candidates take about K times the Saliency step.
"""


def _controls(shape: ModelShape) -> dict | None:
    on_cpu = state.on_cpu()
    defaults = state.default_calibration()
    st.session_state.setdefault("kl_candidates", 4 if on_cpu else 8)
    st.session_state.setdefault("kl_samples", defaults["samples"])
    st.session_state.setdefault("kl_seq_len", defaults["seq_len"])
    st.session_state.setdefault("kl_anchor", 32 if on_cpu else 128)
    st.session_state.setdefault("kl_pool", "wikitext2-valid")
    st.session_state.setdefault("kl_criterion", "nirvana")
    c = st.columns([2, 1, 1, 1, 1, 2])
    pool = c[0].selectbox("Calibration pool", POOLS, key="kl_pool")
    k = c[1].number_input("K candidates", 1, 32, step=1, key="kl_candidates")
    samples = c[2].number_input("N per batch", 1, 512, step=1, key="kl_samples")
    seq_len = c[3].number_input("T tokens", 8, 2048, step=8, key="kl_seq_len")
    anchor = c[4].number_input("Anchor sequences (×64 tokens)", 1, 512, step=1, key="kl_anchor")
    criterion = c[5].selectbox("Criterion", list(DATA_CRITERIA), key="kl_criterion", help=criteria_help(DATA_CRITERIA))
    allocation = state.allocation(shape)
    if allocation is None:
        return None
    st.caption(
        f"Pruning each candidate at the Allocation page's settings: sparsity {allocation.sparsity:.2f}, "
        f"γ {allocation.gamma:.2f}, align {allocation.align}. The anchor set is drawn with seed 42 from the same "
        f"pool, from documents no candidate uses"
        f"{' (the paper uses 128 × 64 tokens; fewer here to keep CPU time short)' if on_cpu else ''}."
    )
    return {
        "pool": pool,
        "k": int(k),
        "samples": int(samples),
        "seq_len": int(seq_len),
        "anchor": int(anchor),
        "criterion": criterion,
        "allocation": allocation,
    }


def _run(lm, choice: dict) -> None:
    from nirvana.search.calibration import select_calibration

    with (
        guard("selecting the calibration batch") as g,
        progress_status("KL calibration selection") as progress,
        resources.hold_device(lm.model, progress),
    ):
        selection = select_calibration(
            lm.model,
            lm.tokenizer,
            choice["allocation"],
            criterion=choice["criterion"],
            candidates=choice["k"],
            pool=choice["pool"],
            samples=choice["samples"],
            seq_len=choice["seq_len"],
            anchor=AnchorSpec(choice["pool"], choice["anchor"], 64, 42),
            micro_batch=max(1, choice["samples"] // 4),
            progress=progress,
        )
    if not g.failed:
        state.session.kl_selection = selection


def _results(lm, selection) -> None:
    from nirvana.search.calibration import chosen_batch

    seeds = [c.seed for c in selection.candidates]
    kls = [c.kl for c in selection.candidates]
    chosen = seeds.index(selection.chosen_seed)
    row = st.columns(4)
    row[0].metric("Chosen seed", selection.chosen_seed)
    row[1].metric("Its KL (nats/token)", f"{selection.chosen.kl:.4f}")
    row[2].metric(
        "Worst candidate",
        f"{max(kls):.4f}",
        delta=f"{max(kls) / max(min(kls), 1e-12):.2f}× the best",
        delta_color="off",
    )
    row[3].metric("Time", "cached" if selection.from_cache else f"{selection.seconds:.1f} s")
    st.plotly_chart(
        charts.bar_chart(
            [f"seed {s}" for s in seeds],
            kls,
            chosen,
            title="KL(P_dense ‖ P_pruned) per candidate",
            y_title="nats / token",
        ),
        key="kl_bars",
    )
    st.dataframe(pd.DataFrame(kl_rows(selection)), hide_index=True, width="stretch")
    for note in selection.notes:
        st.warning(note)
    with guard("previewing the chosen texts"):
        batch = chosen_batch(lm.tokenizer, selection)
        with st.expander(f"The chosen batch: {batch.shape[0]} × {batch.shape[1]} tokens (first 3 shown)"):
            for ids in batch.input_ids[:3]:
                st.text(lm.tokenizer.decode(ids, skip_special_tokens=True)[:600])
        if st.button("Use the chosen batch for saliency", type="primary", key="use_chosen"):
            spec = state.spec()
            criterion = selection.settings["criterion"]
            with guard("scoring with the chosen batch"), progress_status("Scores of the chosen batch") as progress:
                result = resources.scores_for(lm, spec, criterion, batch, selection.chosen_seed, 0, progress)
                state.session.scores = result
                state.session.scores2 = None
                state.session.calib_info = {**batch.describe(), "fallback_reason": batch.fallback_reason}
                state.session.calib_batch = batch  # the baseline methods score on the same batch
                state.session.forget("plan", "pruned", "evals", "sweep")
                st.success("Scores now come from the chosen batch: the Allocation page uses them.")
        routing.next_step(
            ("allocation.py", "the plan from these scores (use the chosen batch first)"),
            ("prune.py", "prune a copy and measure it against the dense model"),
        )


def main() -> None:
    st.title("4 · Calibration")
    frame.explain(EXPLANATION)
    lm = state.model()
    if lm is None:
        return
    if seq2seq.is_seq2seq(lm):
        st.info(
            "KL-guided calibration selection is for decoder-only models: a T5 is scored on its calibration windows "
            "split in halves (docs/METHOD-T5.md), and the candidates' KL is not defined for it here yet. Choose the "
            "calibration text on the **Saliency** page."
        )
        return
    shape = ModelShape.from_dict(resources.shape_dict(lm, state.spec().key))
    if not shape.is_uniform:
        st.info("This model is already pruned; load the dense model to select calibration data.")
        return
    choice = _controls(shape)
    if choice is None:
        return
    with guard("estimating the selection time"):
        rate = resources.matmul_rate(*resources.device_dtype(lm))
        anchor = AnchorSpec(source=choice["pool"], samples=choice["anchor"])
        seconds = selection_seconds(shape, choice["k"], choice["samples"], choice["seq_len"], anchor, rate)
        st.caption(
            f"The selection takes {duration.about(seconds)} on this machine (K scorings and KL passes; estimated "
            "from the model's FLOPs and this machine's matrix-multiply rate)."
        )
    if st.button("Run KL selection", type="primary", key="run_kl"):
        _run(lm, choice)
    selection = state.session.kl_selection
    if selection is not None:
        with guard("showing the selection"):
            _results(lm, selection)


main()
