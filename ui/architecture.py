"""The Allocation page's architecture view: where the width went, dense beside pruned, drawn to scale.

One row per layer (layer 0 at the bottom). Each row has two blocks on one parameter scale: the
attention (q, k, v, o of every KV group: `unit_params` each) and the MLP (gate, up, down of every
neuron). The light part of a block is what the plan removes, the dark part what it keeps, so a row's
dark length is the layer's pruned size and its whole length the dense one. Hover a block for its
kept units; click one to list that layer's units with their scores (kept or not).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from nirvana.models.shapes import ModelShape

KEPT, REMOVED = ("#1f77b4", "#ff7f0e"), ("#c6dbef", "#fdd0a2")  # (attention, MLP)


def figure(shape: ModelShape, plan, scores) -> go.Figure:
    """The block diagram (see the module docstring); `customdata` = (layer, kind) for the click."""
    attn_unit, mlp_unit = shape.unit_params()
    layers = np.arange(shape.num_layers)
    kv_kept = np.array([len(lp.kept_kv_groups) for lp in plan.layers])
    mlp_kept = np.array([len(lp.kept_neurons) for lp in plan.layers])
    kv_all, mlp_all = np.array(shape.num_kv_heads), np.array(shape.intermediate)
    attn_dense, mlp_dense = kv_all * attn_unit / 1e6, mlp_all * mlp_unit / 1e6
    attn_kept, mlp_kept_m = kv_kept * attn_unit / 1e6, mlp_kept * mlp_unit / 1e6
    gap = 0.04 * float((attn_dense + mlp_dense).max())
    mlp_start = float(attn_dense.max()) + gap
    attn_share = [
        f"{float(scores.attn[i, lp.kept_kv_groups].sum()) / max(float(scores.attn[i].sum()), 1e-30):.0%}"
        for i, lp in enumerate(plan.layers)
    ]
    mlp_share = [
        f"{float(scores.mlp[i, lp.kept_neurons].sum()) / max(float(scores.mlp[i].sum()), 1e-30):.0%}"
        for i, lp in enumerate(plan.layers)
    ]
    attn_text = [
        f"layer {i}: attention keeps {k} of {n} KV groups {list(lp.kept_kv_groups)} ({k * shape.group_size} of "
        f"{n * shape.group_size} query heads), {s} of the layer's KV-group score"
        for i, (k, n, lp, s) in enumerate(zip(kv_kept, kv_all, plan.layers, attn_share, strict=True))
    ]
    mlp_text = [
        f"layer {i}: MLP keeps {k:,} of {n:,} neurons, {s} of the layer's neuron score"
        for i, (k, n, s) in enumerate(zip(mlp_kept, mlp_all, mlp_share, strict=True))
    ]
    fig = go.Figure()
    rows = (
        ("attention kept", attn_kept, np.zeros_like(attn_kept), KEPT[0], attn_text, "attention"),
        ("attention removed", attn_dense - attn_kept, attn_kept, REMOVED[0], attn_text, "attention"),
        ("MLP kept", mlp_kept_m, np.full_like(mlp_kept_m, mlp_start), KEPT[1], mlp_text, "mlp"),
        ("MLP removed", mlp_dense - mlp_kept_m, mlp_start + mlp_kept_m, REMOVED[1], mlp_text, "mlp"),
    )
    for name, width, base, color, text, kind in rows:
        fig.add_bar(
            y=layers,
            x=width,
            base=base,
            orientation="h",
            name=name,
            marker_color=color,
            hovertext=text,
            hovertemplate="%{hovertext}<extra></extra>",
            customdata=[[int(i), kind] for i in layers],
        )
    fig.update_layout(
        barmode="overlay",
        bargap=0.15,
        title=f"Where the width went: every layer to scale, dense {shape.block_weights / 1e6:.1f} M block weights",
        xaxis_title="parameters (M): attention | MLP",
        yaxis_title="layer",
        height=max(320, 18 * shape.num_layers + 140),
        legend={"orientation": "h", "yanchor": "top", "y": -0.12, "x": 0},
        margin={"t": 60},
    )
    return fig


def units_table(layer: int, kind: str, plan, scores) -> pd.DataFrame:
    """One layer's units of `kind` ("attention": KV groups, "mlp": neurons), best score first, kept or not."""
    lp = plan.layers[layer]
    values = (scores.attn if kind == "attention" else scores.mlp)[layer].float().cpu().numpy()
    kept = set(lp.kept_kv_groups if kind == "attention" else lp.kept_neurons)
    unit = "KV group" if kind == "attention" else "neuron"
    frame = pd.DataFrame(
        {unit: np.arange(len(values)), "score": values, "kept": [i in kept for i in range(len(values))]}
    )
    return frame.sort_values("score", ascending=False, kind="stable").reset_index(drop=True)


def show(shape: ModelShape, plan, scores) -> None:
    st.subheader("Where the width went")
    event = st.plotly_chart(figure(shape, plan, scores), key="architecture", on_select="rerun", selection_mode="points")
    points = (event or {}).get("selection", {}).get("points", []) if event else []
    if not points:
        st.caption("Click a block to list that layer's units and their scores.")
        return
    layer, kind = points[0]["customdata"]
    table = units_table(int(layer), kind, plan, scores)
    kept = int(table["kept"].sum())
    st.markdown(f"**Layer {layer}, {'attention' if kind == 'attention' else 'MLP'}:** {kept} of {len(table)} kept")
    st.dataframe(table, hide_index=True, height=260)
