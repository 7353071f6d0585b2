"""Landing page: the method's three ideas at a glance, and the one-click start."""

from __future__ import annotations

from ui import routing

routing.require()  # first, before the heavy imports: see ui/routing.py

import streamlit as st

from ui import state


def main() -> None:
    st.title("NIRVANA Explorer")
    st.markdown(
        "**Structured pruning of language models, one step at a time.** NIRVANA (Ai, Wei, Chen, He; "
        "[arXiv 2509.14230](https://arxiv.org/abs/2509.14230), COLM 2026) removes *whole* attention units and "
        "*whole* MLP neurons, so the pruned model has genuinely smaller matrices and runs faster on ordinary "
        "hardware, without retraining. This explorer runs the method on a real model on your machine."
    )
    current = state.spec()
    defaults = state.default_calibration()
    left, right = st.columns([3, 2], vertical_alignment="center")
    with left:
        st.markdown(
            f"It starts on **`{current.label()}`**. One click scores every attention unit and MLP neuron "
            f"(N = {defaults['samples']} sequences × T = {defaults['seq_len']} tokens"
            f"{', kept small because this runs on a CPU' if state.on_cpu() else ''}) and shows the heatmaps."
        )
    with right:
        fire = ":material/local_fire_department:"
        if st.button("Compute saliency now", type="primary", icon=fire, width="stretch", key="quick_start"):
            state.session.autorun_saliency = True
            st.switch_page("pages/saliency.py")

    st.subheader("The three ideas")
    one, two, three = st.columns(3)
    with one:
        st.markdown("##### 1 · Keep what the model *outputs*")
        st.markdown(
            "A unit matters if removing it changes the model's **function**, not its loss. NIRVANA scores "
            "every weight with a first-order, NTK-inspired saliency on the output, with no labels:"
        )
        st.latex(r"s(W) = \left|\frac{\partial F}{\partial W} \odot W\right|")
        st.latex(r"F = \operatorname{mean}_{n,v}\,\max_t\, z_{n,t,v}")
        st.markdown(
            "($z$: the logits of N calibration sequences.) It adds the scores of the weights a unit owns: "
            "one **KV group** (a key/value head and the "
            "query heads that read it) or one **MLP neuron** (a row of gate and up, a column of down)."
        )
    with two:
        st.markdown("##### 2 · Decide *where* to prune globally")
        st.markdown(
            "All KV groups of all layers are ranked together, and all neurons together, so each layer loses "
            "what its scores say it can spare: per-layer sparsity is not uniform. One knob, **γ**, splits the "
            "budget between attention and MLP:"
        )
        st.latex(r"\gamma = \frac{\text{share of neurons pruned}}{\text{share of KV groups pruned}}")
        st.latex(r"\gamma^\ast = \frac{3 I g}{2 d H_{kv} (g+1)^2}")
        st.markdown("(γ\\* = 3.36 for Llama-3.1-8B.) Kept neurons are rounded up to a multiple of 8 for fast kernels.")
    with three:
        st.markdown("##### 3 · Choose the data that tells the story")
        st.markdown(
            "Saliency depends on the calibration text. Instead of trusting one random batch, NIRVANA prunes with "
            "several candidate batches and keeps the one whose pruned model stays **closest to the dense model**:"
        )
        st.latex(r"\text{choose } \arg\min_k \; \mathrm{KL}\left(P_{\text{dense}} \,\|\, P_{\text{pruned},k}\right)")
        st.markdown("measured on a fixed held-out anchor set, disjoint from every candidate.")

    st.subheader("The pages")
    st.markdown(
        "1. **Model**: load the embedded model, a Hugging Face id or a folder; see what can be pruned.\n"
        "2. **Saliency**: score every unit (heatmaps layer × unit), compare two criteria.\n"
        "3. **Allocation**: drag sparsity and γ; see instantly which units go, per layer, and what it saves.\n"
        "4. **Calibration**: pick the calibration batch by KL divergence.\n"
        "5. **Prune & compare**: slice the model; compare perplexity, generations, speed and memory.\n"
        "6. **Sweep**: quality and speed against sparsity and γ; pick a target on the Pareto chart.\n"
        "7. **Evidence**: the committed benchmark of five criteria, global vs uniform, KL-selected calibration."
    )
    st.caption(
        "Pipeline: scores → plan (JSON) → apply → smaller model. Moving a slider recomputes only the plan from "
        "cached scores (milliseconds); gradients are computed once per model and calibration batch."
    )
    st.page_link(
        "pages/evidence.py",
        label="Does it work? The measured comparison with four other criteria, including where NIRVANA loses",
        icon=":material/fact_check:",
    )


main()
