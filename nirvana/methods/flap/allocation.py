"""FLAP's AL-AM allocation: one ranking of every KV group and neuron of every layer.

lib/prune.py `prune_flap`, structure AL-AM:

    prune_metric = cat(attention scores, MLP scores); sorted descending
    weight of a unit = its parameters in units of a neuron's: a head 512 / 3 (4 x 128 D / 3 D), a neuron 1
    p = argmin | cumsum(weights in sorted order) - total weight x (1 - ratio) |
    keep the units scoring above the p-th (`metric > threshold`)

so the p best units are kept. For GQA a KV group weighs its parameters, 2 (g + 1) d / 3 neurons
(512 / 3 when g = 1, d = 128), and the ratio is then the fraction of block weights removed.
"""

from __future__ import annotations

import numpy as np

from nirvana.errors import InvalidInput
from nirvana.methods.base import build_plan
from nirvana.methods.flap.config import FLAPConfig
from nirvana.models.shapes import ModelShape


def allocate_flap(scores, shape: ModelShape, sparsity: float, config: FLAPConfig):
    L, hkv, inter = shape.num_layers, shape.num_kv_heads[0], shape.intermediate[0]
    attn = scores.attn.detach().cpu().numpy().astype(np.float64).reshape(-1)  # (L Hkv,)
    mlp = scores.mlp.detach().cpu().numpy().astype(np.float64).reshape(-1)  # (L I,)
    metric = np.concatenate([attn, mlp])
    if not np.isfinite(metric).all():
        raise InvalidInput("flap scores contain NaN or inf (a channel with zero variance in every layer?); recompute.")
    weights = np.concatenate([np.full(attn.size, shape.attn_unit_cost / shape.mlp_unit_cost), np.ones(mlp.size)])
    order = np.lexsort((np.arange(metric.size), -metric))  # descending; ties: lower index first
    keep = np.zeros(metric.size, dtype=bool)
    if sparsity == 0:
        keep[:] = True  # the reference's strict `>` would still drop the last unit
    else:
        target = weights.sum() * (1 - sparsity)
        p = int(np.argmin(np.abs(np.cumsum(weights[order]) - target)))
        keep[order[:p]] = True
    attn_keep, mlp_keep = keep[: attn.size].reshape(L, hkv), keep[attn.size :].reshape(L, inter)
    spared = []
    for layer in range(L):  # a layer keeps its best KV group (the reference would leave it none)
        if not attn_keep[layer].any():
            attn_keep[layer, int(np.argmax(attn.reshape(L, hkv)[layer]))] = True
            spared.append(layer)
    kept_attn = [np.flatnonzero(row).tolist() for row in attn_keep]
    kept_mlp = [np.flatnonzero(row).tolist() for row in mlp_keep]
    notes = [f"layers {spared} kept their best KV group (ranked out entirely)"] if spared else []
    return build_plan(
        scores, shape, sparsity, "flap", config, kept_attn, kept_mlp, allocation="global", stats={"notes": notes}
    )
