"""FLAP's bias compensation: what the removed channels contributed on average becomes a bias.

lib/prune.py `compress` (real pruning, bias=True):

    output_bias = (mean_inp * ~mask) @ W.T        for o_proj (mask: kept q-head channels) and down_proj

so the layer's output keeps its expected value over the calibration tokens: `W x` over the kept
channels plus `sum over removed channels c of mean_inp[c] W[:, c]`.
"""

from __future__ import annotations

import torch

from nirvana.methods.base import Biases
from nirvana.methods.flap.config import FLAPConfig
from nirvana.models.architectures import layer_projections
from nirvana.models.shapes import model_shape
from nirvana.models.weights import dense_weight


def removed_mask(kept: list[int], units: int, width: int) -> torch.Tensor:
    """Boolean `[units * width]`: True on the channels of the units not in `kept`."""
    mask = torch.ones(units, dtype=torch.bool)
    mask[torch.tensor(kept, dtype=torch.long)] = False
    return mask.repeat_interleave(width)


def flap_biases(dense_model, plan, scores, config: FLAPConfig) -> Biases | None:
    """{layer: {"o_proj": [D], "down_proj": [D]}} from the dense weights and the scores' mean inputs."""
    if not config.bias:
        return None
    shape = model_shape(dense_model)
    g, d = shape.group_size, shape.head_dim
    out: Biases = {}
    for layer, proj in zip(plan.layers, layer_projections(dense_model)):
        i = layer.layer_idx
        attn_removed = removed_mask(layer.kept_kv_groups, shape.num_kv_heads[i], g * d)  # (Hq d,)
        mlp_removed = removed_mask(layer.kept_neurons, shape.intermediate[i], 1)  # (I,)
        w_o, w_down = dense_weight(proj.o_proj), dense_weight(proj.down_proj)  # (D, Hq d), (D, I)
        attn_mean = scores.extra["attn_mean_inp"][i].to(w_o.device)
        mlp_mean = scores.extra["mlp_mean_inp"][i].to(w_down.device)
        out[i] = {
            "o_proj": (attn_mean * attn_removed.to(w_o.device)) @ w_o.T,
            "down_proj": (mlp_mean * mlp_removed.to(w_down.device)) @ w_down.T,
        }
    return out
