"""Page 5: apply the plan to a copy; compare perplexity, generations, speed and memory; save."""

from __future__ import annotations

from ui import routing

routing.require()  # first, before the heavy imports: see ui/routing.py

import re
import time

import pandas as pd
import streamlit as st

from nirvana import charts
from nirvana.errors import NirvanaError
from nirvana.measure.compare import accuracy_rows, bpb_rows, generation_rows, perplexity_pair, speed_rows, speed_table
from nirvana.measure.flops import ideal_speedup
from nirvana.measure.speed_check import check_of
from nirvana.methods import METHODS
from nirvana.models.shapes import count_parameters
from nirvana.pipeline import PruneSettings, prune
from nirvana.progress import sub_progress
from nirvana.pruning.reconstruct import reconstruct
from nirvana.store.keys import content_key
from nirvana.store.paths import cache_dir
from ui import accuracy, evals, frame, methods, recovery, resources, runs, seq2seq, speed, state
from ui.errors import guard
from ui.progress import progress_status

DATASETS = {
    "wikitext2": "WikiText-2 test (the paper's main figure)",
    "ptb": "Penn Treebank validation",
    "pydoc": "Python docs shipped with CPython",
    "python-code": "Python standard library source (code)",
}
DEFAULT_PROMPTS = "The capital of France is\nIn machine learning, pruning means\ndef fibonacci(n):"
EXPLANATION = r"""
**What happens.** *Apply* copies the model and physically slices its matrices to the plan: rows of
`q/k/v/gate/up` and columns of `o/down` that belong to pruned units are dropped. No masks: the
copy is smaller and does less arithmetic. The shared dense model is never changed.

**Perplexity** $=\exp(\text{mean negative log-likelihood per token})$: how surprised the model is by
real text (lower is better; 1 would be perfect). As in the paper, the text is cut into windows of
512 tokens and each window is scored on its own. On a CPU we evaluate a *token budget* (the first
few windows), not the whole test set, so compare dense and pruned on the same budget only.

**Speed and memory** are *measured* here on this device: prefill (reading the prompt) and decode
(generating token by token). Dense and pruned are timed in turn, round after round, on the same prompts;
the speed-up is the median of the rounds' ratios. The *ideal* speed-up is the ratio of
matrix-multiply FLOPs per token, what a perfectly compute-bound run would gain; small models on a
CPU are partly memory- and overhead-bound, so the measured gain is usually below it. A measured
speed-up well above the ideal is not a result (the machine was busy while dense ran): it is flagged
*disturbed* and not shown; re-measure. The paper's A100 figures are shown for reference only:
different model, hardware and batch.
"""


def _store(lm, result, request: dict | None = None) -> None:
    """The session's pruned copy (a `PruneResult`), recorded as a run; `request`: a baseline's settings."""
    plan, model = result.plan, result.model
    params, seconds = result.report["params_after"], result.report["timings"]["slice"]
    reconstructed = bool(result.report.get("reconstructed"))
    model_key = evals.pruned_model_key(state.spec().key, plan)
    run_id = runs.record_session_run(
        "prune", lm, plan, {"params_after": params, "slice_seconds": seconds}, result.report
    )
    # a reconstructed copy has other weights than the plan alone gives: its evaluations are its own
    model_key = content_key(model_key, "reconstructed") if reconstructed else model_key
    copy = state.PrunedCopy(model, plan, evals.plan_key(plan), model_key, params, seconds, result.report, request,
                            run_id, reconstructed)  # fmt: skip
    state.session.pruned = copy
    state.session.forget("evals")
    s = plan.settings
    if request is not None and methods.searches(s.method):  # the Allocation page draws what was searched
        searched = dict(state.session.searched or {})
        key = methods.searched_key(s.method, request["settings"])
        searched[key] = {**searched.get(key, {}), round(s.sparsity, 2): plan}
        state.session.searched = searched


def _pruned_summary(lm, pruned: state.PrunedCopy, where) -> None:
    dense_params = count_parameters(lm.model)
    added = pruned.report.get("added_bias_params") or 0
    where.success(
        f"Pruned copy: {pruned.params / 1e6:.2f} M parameters (dense {dense_params / 1e6:.2f} M, "
        f"−{1 - pruned.params / dense_params:.1%}), sliced in {pruned.seconds:.2f} s."
        + (f" It carries {added:,} added bias parameters (o_proj / down_proj compensation)." if added else "")
        + (f" Recorded as run `{pruned.run_id}` (Runs page)." if pruned.run_id else "")
    )


def _apply(lm, plan, fits: bool = False) -> None:
    """The Apply button; `fits`: the plan's model can be reconstructed (a decoder-only, non-rotating plan)."""
    key = evals.plan_key(plan)
    fit = fits and st.toggle(
        "Reconstruct the kept weights (least squares)",
        key="reconstruct",
        help="After slicing, re-solve each layer's kept o_proj and down_proj columns so that they reproduce the "
        "dense layer's output on the calibration batch, layer by layer (Tyr-the-Pruner's reconstruction, beyond the "
        "paper; `prune --reconstruct`). The same units are kept; only their weights move. About 20 s for SmolLM2.",
    )
    pruned = state.session.pruned
    current = pruned is not None and pruned.plan_key == key and pruned.reconstructed == fit
    row = st.columns([2, 3])
    label = "Apply the plan again" if current else "Apply the plan (slice a copy)"
    if row[0].button(label, type="primary" if not current else "secondary", key="apply_plan"):
        with guard("applying the plan") as g, st.spinner("Slicing a copy of the model…"):
            # slices a copy: the cached dense model stays as it is; a FLAP plan (a past run's) needs its scores
            result = prune(lm, plan=plan, scores=methods.plan_scores(plan), batch=methods.plan_batch(lm, plan))
            if fit:
                t = time.perf_counter()
                reconstruct(lm.model, result.model, plan, methods.calibration_batch(lm))
                result.report["reconstructed"] = True
                result.report["timings"]["reconstruct"] = time.perf_counter() - t
        if not g.failed:
            _store(lm, result)
    pruned = state.session.pruned
    if pruned is not None and pruned.plan_key != key:
        row[1].warning("The plan changed since the model was pruned: apply it again to compare the new plan.")
    elif pruned is not None and pruned.reconstructed != fit:
        row[1].warning("The reconstruction setting changed since the model was pruned: apply the plan again.")
    elif pruned is not None:
        _pruned_summary(lm, pruned, row[1])


def _method_choice() -> str:
    """The method picker (every row of `nirvana.methods.METHODS`) and its "how to read it" box."""
    st.session_state.setdefault("prune_method", methods.DEFAULT)
    c = st.columns([1, 3])
    name = c[0].selectbox(
        "Pruning method",
        list(METHODS),
        format_func=methods.label,
        key="prune_method",
        help="NIRVANA applies the Allocation page's plan; another method prunes with its own scores and allocation "
        "at the target below, on the Saliency page's calibration batch.",
    )
    methods.how_to_read([name], c[1])
    return name


def _baseline(lm, name: str):
    """Prune with baseline `name` (its scores cached, then its allocation and compensation); the plan of the
    session's pruned copy when it was made with these settings, else None."""
    label = methods.label(name)
    c = st.columns([3, 3, 2])
    st.session_state.setdefault("method_sparsity", float(st.session_state.get("sparsity", 0.2)))
    sparsity = c[0].slider(
        "Target sparsity s (fraction of block weights removed)", 0.0, 0.9, step=0.01, key="method_sparsity"
    )
    settings = methods.settings_input(name, c[1])
    if settings is None:
        return None
    request = {"method": name, "sparsity": float(sparsity), "settings": settings}
    pruned = state.session.pruned
    current = pruned is not None and pruned.request == request
    if c[2].button(f"Prune with {label}", type="secondary" if current else "primary", key="prune_with_method"):
        with guard(f"pruning with {label}") as g, progress_status(f"Pruning with {label}") as progress:
            methods.check(lm, name, settings, float(sparsity))  # before scoring: a layer range, a bias, a target
            batch = methods.calibration_batch(lm)
            prune_settings = PruneSettings(sparsity=float(sparsity), method=name, method_settings=settings)
            if methods.on_data(name):  # no scores: it rotates (SliceGPT) or searches (Tyr) on the session's batch
                with resources.hold_device(lm.model, progress):
                    result = prune(lm, prune_settings, batch=batch, progress=progress)
            else:
                step = sub_progress(progress, 0.0, 0.9, "scores: ")
                _, scores = methods.scores_for(lm, name, settings, batch, step)
                result = prune(lm, prune_settings, scores=scores)  # a copy: the shared dense model stays as it is
        if not g.failed:
            _store(lm, result, request)
            current = True
    pruned = state.session.pruned
    if pruned is not None and current:
        plan = pruned.plan
        st.markdown(
            f"Plan: **{label}** at target sparsity **{sparsity:.2f}** → **{plan.stats['achieved_block_sparsity']:.1%}**"
            f" of block weights removed ({plan.stats['total_param_reduction']:.1%} of all parameters)."
        )
        _pruned_summary(lm, pruned, st)
        if methods.rotates(name):
            _rotation_summary(lm, name, settings, pruned)
        if methods.searches(name):
            _search_summary(plan)
        return plan
    if pruned is not None:
        st.warning(f"The session's pruned copy was made with other settings: prune with {label} to compare these.")
    return None


def _search_summary(plan) -> None:
    """What a searching method (Tyr) found: the KL to dense per generation and each layer's removed units."""
    searched = plan.stats.get("tyr") or {}
    iterations = searched.get("iterations") or []
    if not iterations:
        return
    with st.expander(f"{methods.label(plan.settings.method)}: the search", expanded=True):
        for i, it in enumerate(iterations):
            kl = ", ".join(f"{v:.4f}" for v in it["kl_per_generation"])
            st.markdown(
                f"Iteration {i + 1} (levels {it['steps']['attn']} KV group(s) and {it['steps']['mlp']} neurons apart): "
                f"best sparse KL to dense per generation {kl}."
            )
        removed = searched.get("removed_per_layer", {})
        table = pd.DataFrame({"layer": range(len(plan.kept_kv_groups)), "KV groups kept": plan.kept_kv_groups,
                              "neurons kept": plan.kept_neurons,
                              "neurons removed": removed.get("mlp", [None] * len(plan.kept_neurons))})  # fmt: skip
        st.dataframe(table, hide_index=True, width="stretch")
        st.caption(
            "Each generation is scored on a new random draw of calibration tokens, so the best KL moves both ways. "
            "The kept weights of o_proj and down_proj are re-solved by least squares on the calibration batch."
        )


def _rotation_summary(lm, name: str, settings: dict, pruned: state.PrunedCopy) -> None:
    """A rotated model's kept width and the variance each slice kept, beside the dense model's spectra."""
    sliced = pruned.model.config.nirvana_sliced_hidden
    width, hidden = sliced["embedding"], sliced["hidden_size"]
    measured = sliced.get("variance_kept")
    spectra = methods.spectra_for(lm, name, settings, "Prune & compare")
    if spectra is None or measured is None:
        return
    with st.expander(f"{methods.label(name)}: variance kept by {width} of {hidden} hidden dimensions", expanded=True):
        st.plotly_chart(
            charts.variance_kept_chart(spectra.kept(width), width, hidden, measured=measured), key="prune_spectrum"
        )
        st.caption(
            "Crosses: this prune's own PCA of each layer, on signals already sliced upstream; lines: the dense "
            "model's spectra read at the same width (the Allocation page's panel)."
        )


def _evals() -> dict:
    if state.session.evals is None:
        state.session.evals = {}
    return state.session.evals


def _perplexity(lm, pruned) -> None:
    on_cpu = state.on_cpu()
    st.session_state.setdefault("ppl_dataset", "wikitext2")
    st.session_state.setdefault("ppl_tokens", 2048 if on_cpu else 65536)
    st.session_state.setdefault("ppl_window", 512)
    c = st.columns([3, 2, 2, 2])
    dataset = c[0].selectbox("Dataset", list(DATASETS), format_func=lambda k: f"{k}: {DATASETS[k]}", key="ppl_dataset")
    tokens = c[1].number_input("Token budget", 128, 10_000_000, step=512, key="ppl_tokens")
    window = c[2].selectbox("Window (tokens)", [128, 256, 512, 1024, 2048], key="ppl_window")
    if on_cpu:
        c[3].caption("One forward pass per window, for each model: time grows with the token budget.")
    if c[3].button("Measure perplexity", type="primary", key="measure_ppl"):
        spec = state.spec()
        with guard("measuring perplexity") as g, progress_status("Perplexity, dense then pruned") as progress:
            dense = evals.perplexity(
                lm.model,
                lm.tokenizer,
                spec.key,
                dataset,
                int(tokens),
                int(window),
                sub_progress(progress, 0.0, 0.5, "dense: "),
            )
            after = evals.perplexity(
                pruned.model,
                lm.tokenizer,
                pruned.model_key,
                dataset,
                int(tokens),
                int(window),
                sub_progress(progress, 0.5, 1.0, "pruned: "),
            )
        if not g.failed:
            _evals()["ppl"] = (dense, after)
            runs.record_session_run(
                "eval",
                lm,
                pruned.plan,
                {"ppl_dense": dense["ppl"], "ppl_pruned": after["ppl"], "dataset": dataset, "tokens": after["tokens"]},
                metrics={"dense": dense, "pruned": after},
            )
    result = _evals().get("ppl")
    if result:
        dense, after = result
        pair = perplexity_pair(dense, after)
        row = st.columns(4)
        row[0].metric("Dense perplexity", evals.ppl_text(pair["before"]))
        row[1].metric(
            "Pruned perplexity", evals.ppl_text(pair["after"]), delta=f"{pair['ratio']:.3g}× dense", delta_color="off"
        )
        row[2].metric(
            "Tokens evaluated",
            f"{pair['predicted_tokens']:,}",
            help=f"a T5's continuation: {after['pairing']}"
            if "pairing" in after
            else "tokens whose next-token loss is averaged: windows × (window − 1)",
        )
        row[3].metric("Windows", f"{pair['windows']} × {pair['seq_len']}")
        st.caption(
            f"{after['dataset']} {after['split']} from {after['origin']}; {after['tokens']:,} tokens fed of "
            f"{after['text_tokens']:,} in the text; dense {dense['seconds']:.1f} s"
            f"{' (cached)' if dense.get('cache_hit') else ''}, pruned {after['seconds']:.1f} s"
            f"{' (cached)' if after.get('cache_hit') else ''}."
        )
        if after.get("fallback_reason"):
            st.warning(f"Measured on the embedded Python docs instead: {after['fallback_reason']}")


def _default_prompts() -> str:
    from nirvana.measure.generation import load_prompts

    try:
        return "\n".join(p["prompt"] for p in load_prompts()[:3])
    except NirvanaError:  # the prompt file is optional here: fall back to a built-in set
        return DEFAULT_PROMPTS


def _generations(lm, pruned) -> None:
    t5 = seq2seq.is_seq2seq(lm)  # a T5's prompts are its encoder's input ("summarize: ..."), with no chat template
    prompts_key = "t5_prompts" if t5 else "prompts"
    st.session_state.setdefault(prompts_key, seq2seq.default_prompts(lm) if t5 else _default_prompts())
    st.session_state.setdefault("max_new_tokens", 32)
    st.session_state.setdefault("chat_template", True)
    c = st.columns([4, 1])
    text = c[0].text_area("Prompts (one per line, up to 8)", key=prompts_key, height=110)
    max_new = c[1].number_input("New tokens", 1, 256, step=1, key="max_new_tokens")
    chat = False
    if not t5:
        chat = c[1].checkbox("Chat template", key="chat_template", help="wrap each prompt in the model's chat template")
    prompts = [p for p in (line.strip() for line in text.splitlines()) if p][:8]
    if c[1].button("Generate", type="primary", key="generate") and prompts:
        spec = state.spec()
        with guard("generating") as g, progress_status("Greedy generation, dense then pruned") as progress:
            dense = evals.generate(
                lm.model,
                lm.tokenizer,
                spec.key,
                prompts,
                int(max_new),
                chat,
                sub_progress(progress, 0.0, 0.5, "dense: "),
            )
            after = evals.generate(
                pruned.model,
                lm.tokenizer,
                pruned.model_key,
                prompts,
                int(max_new),
                chat,
                sub_progress(progress, 0.5, 1.0, "pruned: "),
            )
        if not g.failed:
            _evals()["generate"] = (dense, after)
    result = _evals().get("generate")
    if result:
        rows = generation_rows(*result)
        for i, r in enumerate(rows, start=1):  # code blocks: a continuation's newlines and indentation kept
            same_text = " (identical)" if r["identical"] else ""
            st.markdown(f"**{i}. `{r['prompt']}`**{same_text}")
            left, right = st.columns(2)
            for where, who in ((left, "dense"), (right, "pruned")):
                where.caption(f"{who.capitalize()}, {r[f'{who}_tokens']} new tokens")
                where.code(r[who] or "(nothing generated)", language=None, wrap_lines=True)
        same = sum(r["identical"] for r in rows)
        st.caption(f"Greedy decoding (no sampling): {same} of {len(rows)} continuations are identical.")


def _speed(lm, pruned) -> None:
    dense_shape, pruned_shape = lm.model, pruned.model  # FLOPs from the modules' widths (a sliced stream too)
    settings = speed.controls("Measure speed and memory")
    if settings is not None:
        with guard("measuring speed") as g, progress_status("Speed and memory, dense and pruned in turn") as progress:
            measured = evals.speed_pair(lm.model, pruned.model, progress, **settings)
        if not g.failed:
            _evals()["speed"] = measured
    result = _evals().get("speed")
    if not result:
        st.caption(
            "Runs a 64-token prompt (prefill) and the decode steps at each batch size, dense and pruned in turn "
            "for every round; the speed-up is the median of the rounds' ratios."
        )
        return
    dense = result["dense"]
    rows = speed_rows(dense, result["pruned"], dense_shape, pruned_shape)
    last = rows[-1]
    row = st.columns(3)
    speed.speedup_metric(row[0], f"Decode speed-up, batch {last['batch_size']}", check_of(last, "decode"))
    speed.speedup_metric(row[1], f"Prefill speed-up, batch {last['batch_size']}", check_of(last, "prefill"))
    row[2].metric("Ideal speed-up at 512 context", f"{ideal_speedup(dense_shape, pruned_shape):.2f}×")
    speed.verdicts(rows, ("prefill", "decode"))
    st.dataframe(pd.DataFrame(speed_table(rows)), hide_index=True, width="stretch")
    with guard("reading the paper's speed figure"):
        from nirvana.reference import reference_rows

        for ref in reference_rows("speed"):
            ratio = f" ({ref['pruned'] / ref['dense']:.2f}×)"
            st.caption(
                f"Paper, for reference only (not measured here): {ref['model']} on {ref['hardware']}, sparsity "
                f"{ref['sparsity']:.0%}, batch {ref['batch_size']}: {ref['metric']} {ref['dense']} → {ref['pruned']} "
                f"{ref['unit']}{ratio}."
            )
    st.caption(
        f"Measured on {dense['device_name']} ({dense['device']}, {dense['dtype']}, {dense['threads']} threads, "
        f"load average {dense.get('load_average_1min', '?')}): {dense['repeats']} rounds, each timing dense, then "
        "pruned, on the same prompts, while this app held the device (no other session's heavy work ran); tok/s are "
        "the medians, the speed-up the median of the rounds' ratios with their middle half. A speed-up more than "
        "1.1× its FLOPs ideal is not a result: it is flagged and not shown. "
        f"Memory: {dense['memory_method']}. Other processes on a shared machine still change these figures."
    )


def _paper_reference() -> None:
    from nirvana.reference import paper_reference, reference_rows, table_rows

    ref = paper_reference()
    st.markdown(f"**{ref['label']}**")
    st.caption(f"Source: {ref['source']}")
    st.markdown("Speed and memory (the paper's A100 measurements):")
    st.dataframe(pd.DataFrame(table_rows(reference_rows("speed"))), hide_index=True, width="stretch")
    st.markdown("Accuracy (task metrics we do not run here):")
    st.dataframe(pd.DataFrame(table_rows(reference_rows("accuracy"))), hide_index=True, width="stretch")
    st.caption(f"Pruning time claimed by the paper: {ref['pruning_time']['claim']}.")
    unverified = ref.get("unverified")
    if unverified:
        rows = [  # "≈" on the value, not a column that is empty but for one row
            {"sparsity": r["sparsity"], "WikiText-2 perplexity": f"{'≈ ' if r.get('approximate') else ''}{r['ppl']:g}"}
            for r in unverified["wikitext2_ppl"]
        ]
        st.markdown(f"WikiText-2 perplexity, {unverified['label']}")
        st.dataframe(pd.DataFrame(table_rows(rows)), hide_index=True)


def _accuracy(lm, pruned) -> None:
    c = st.columns([4, 2, 3])
    tasks = c[0].multiselect(
        "Tasks (lm-eval's own definitions)", accuracy.CHOICES, default=["arc_easy", "piqa"], key="acc_tasks"
    )
    limit = c[1].number_input("Examples per task", 1, 20000, value=50, step=50, key="acc_limit")
    allow, unsafe = True, False
    runs_code = any(accuracy.is_code(t) for t in tasks)
    if runs_code:
        if accuracy.sandbox_available():
            st.info(accuracy.code_notice())
            allow = st.checkbox("Run the generated code in that sandbox", key="acc_allow_code")
        else:
            unsafe = st.checkbox(
                "Run without a sandbox (UNSAFE: the model's code runs as this server's user)", key="acc_unsafe_exec"
            )
            st.warning(accuracy.code_notice(unsafe))
            allow = unsafe and st.checkbox("Run the generated code anyway", key="acc_allow_code")
    if not tasks:
        return
    spec = state.spec()
    rates, basis = accuracy.estimate_rates(spec.name, sum(p.numel() for p in lm.model.parameters()))
    eta = accuracy.estimate_eval_seconds(tasks, int(limit), rates)
    rows, why = accuracy.generation_rows(spec.name)
    generating = [t for t in tasks if accuracy.generates(t)]
    c[2].caption(
        f"Estimated **{eta / 60:.1f} min** for dense + pruned ({basis}; repeats are instant, from the cache)."
        + (f" {', '.join(generating)}: {rows} rows generate at once ({why})." if generating else "")
    )
    if c[2].button("Measure accuracy", type="primary", key="measure_acc", disabled=runs_code and not allow):
        with guard("measuring accuracy") as g, progress_status("Accuracy, dense then pruned") as progress:
            dense = accuracy.run(
                lm.model,
                lm.tokenizer,
                spec.key,
                tasks,
                int(limit),
                allow,
                lambda f, m: progress(f / 2, f"dense: {m}"),
                unsafe,
                rows,
            )
            after = accuracy.run(
                pruned.model,
                lm.tokenizer,
                pruned.model_key,
                tasks,
                int(limit),
                allow,
                lambda f, m: progress(0.5 + f / 2, f"pruned: {m}"),
                unsafe,
                rows,
            )
        if not g.failed:
            _evals()["accuracy"] = (dense, after)
    result = _evals().get("accuracy")
    if result:
        dense, after = result
        if accuracy.has_accuracy(after):
            st.plotly_chart(accuracy.chart(dense, after), key="accuracy_chart")
            st.dataframe(pd.DataFrame(accuracy_rows(dense, after)), hide_index=True, width="stretch")
        if accuracy.has_bpb(after):
            st.plotly_chart(accuracy.bpb_chart(dense, after), key="accuracy_bpb_chart")
            st.dataframe(pd.DataFrame(bpb_rows(dense, after)), hide_index=True, width="stretch")
            st.caption(
                "Gold bits per byte: how unlikely the model finds the reference solution after the reference "
                "suite's (OLMES) few-shot prompt, -log2 P(answer) / its UTF-8 bytes; lower is better. It moves "
                "smoothly where pass@1 is 0 for every small model. '± paired' is the standard error of the "
                "per-problem differences (both models scored the same problems)."
            )
        st.caption(
            f"lm-evaluation-harness {after['harness_version']}, the first {after['limit']} examples of each task; "
            "± one standard error. " + after["metrics_note"]
        )
        for task, row in after["tasks"].items():
            if row.get("sandbox"):  # generated code: the isolation it actually ran under
                st.caption(f"{task}: {row['sandbox']['line']}")


def _stem(plan) -> str:
    """`s0.20-g2.25` for a NIRVANA plan, `flap-s0.20` for another method's (gamma does not apply to it)."""
    s = plan.settings
    if isinstance(s.gamma, dict):  # a T5 plan: one gamma per ranking
        return seq2seq.plan_stem(plan)
    return f"s{s.sparsity:.2f}-g{s.gamma:.2f}" if methods.has_sliders(s.method) else f"{s.method}-s{s.sparsity:.2f}"


def _save(lm, plan, pruned) -> None:
    st.download_button(
        "Download plan JSON",
        plan.to_json,
        file_name=f"plan-{_stem(plan)}.json",
        mime="application/json",
        key="download_plan",
        on_click="ignore",
    )
    if pruned is None:
        return
    name = re.sub(r"[^A-Za-z0-9_.-]+", "-", state.spec().name.strip("/").split("/")[-1])
    default = cache_dir() / "pruned" / f"{name}-{_stem(plan)}"
    folder = st.text_input("Save the pruned model to", value=str(default), key="save_dir")
    if st.button("Save pruned model", key="save_pruned"):
        from nirvana.checkpoints.pruned import save_pruned

        with guard("saving the pruned model") as g, st.spinner("Writing safetensors…"):
            path = save_pruned(pruned.model, lm.tokenizer, plan, folder)
        if not g.failed:
            st.success(
                f"Saved to `{path}` (safetensors, config with per-layer shapes, tokenizer, plan.json). "
                "Load it on the Model page as a local directory."
            )


def _seq2seq_speed(lm, pruned) -> None:
    seq2seq.speed(lm, pruned, _evals())


def _views(lm, plan, pruned, t5: bool) -> None:
    """The tabs of a pruned copy, as a table {tab: (what its error box names, view)}; a T5's speed is its own
    (encoder pass and decode steps), and recovery and the paper's (Llama) figures are decoder-only."""
    views = {
        "Perplexity": ("the perplexity view", _perplexity),
        "Accuracy": ("the accuracy view", _accuracy),
        "Generations": ("the generation view", _generations),
        "Speed & memory": ("the speed view", _seq2seq_speed if t5 else _speed),
    }
    if not t5:
        views["Recover (LoRA)"] = ("the recovery view", recovery.render)
        views["Paper reference"] = ("reading the paper's reference figures", lambda lm, pruned: _paper_reference())
    tabs = st.tabs([*views, "Save"])
    for tab, (what, view) in zip(tabs, views.values()):
        with tab, guard(what):
            view(lm, pruned)
    with tabs[-1]:
        _save(lm, plan, pruned)
    if t5:
        st.caption("LoRA recovery is for decoder-only models here; the T5 path ends at the pruned copy.")


def main() -> None:
    st.title("5 · Prune & compare")
    frame.explain(EXPLANATION)
    t5 = seq2seq.is_seq2seq(state.model())
    name = methods.DEFAULT if t5 else _method_choice()  # the baselines read decoder layers: a T5 has NIRVANA only
    if t5:
        plan = frame.need_plan()
        if plan is None:
            return
        lm = state.model()
        st.markdown(seq2seq.plan_line(plan))
        with guard("applying the plan"):
            _apply(lm, plan)
    elif methods.has_sliders(name):
        plan = frame.need_plan()
        lm = state.model() if plan is not None else None
        if lm is None:
            return
        s = plan.settings
        if not methods.has_sliders(s.method):  # reopened from a past run (Runs page)
            st.info(f"The session's plan was made by {methods.label(s.method)} (a past run); it is applied as it is.")
        st.markdown(
            f"Plan: sparsity **{s.sparsity:.2f}**, γ **{s.gamma:.2f}**, align {s.align}, criterion "
            f"`{s.criterion}` → **{plan.stats['achieved_block_sparsity']:.1%}** of block weights removed "
            f"({plan.stats['total_param_reduction']:.1%} of all parameters)."
        )
        frame.show_calibration_note(s)  # the CLI's default calibration plans differently
        with guard("applying the plan"):
            _apply(lm, plan, fits=not methods.rotates(s.method))
    else:
        lm = state.model()
        if lm is None:
            return
        plan = None
        with guard(f"pruning with {methods.label(name)}"):
            plan = _baseline(lm, name)
        if plan is not None:
            frame.show_calibration_note(plan.settings)
    pruned = state.session.pruned
    if plan is None or (pruned is not None and pruned.plan_key != evals.plan_key(plan)):
        pruned = None
    if pruned is not None:
        _views(lm, plan, pruned, t5)
        routing.next_step(
            ("sweep.py", "the same at several sparsities (and other methods), on a Pareto chart"),
            ("evidence.py", "what the committed benchmarks measured for these methods"),
        )
    elif plan is not None:
        _save(lm, plan, None)


main()
