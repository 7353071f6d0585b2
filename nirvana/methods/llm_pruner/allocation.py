"""LLM-Pruner's allocation: the same channel ratio r in every pruned layer, none outside the range.

The reference (`MetaPruner.prune_local`, LLMPruner/torch_pruning/pruner/algorithms/metapruner.py)
prunes, in each group rooted at a layer's k_proj (attention) or gate_proj (MLP),

    n_pruned = channels - int(channels * (1 - r))           # k_proj: Hkv d channels, gate: I
    attention: the n_pruned // d lowest KV heads (consecutive_groups = head_dim)
    MLP:       the n_pruned lowest neurons

and skips a group that would lose every channel (`check_pruning_group`). So kept MLP widths are
`int(I (1 - r))`, truncated, with no rounding to a multiple of 8. Our sparsity is the fraction of
block weights removed; `solve_ratio` finds the r whose achieved sparsity is closest to the target.
"""

from __future__ import annotations

import numpy as np

from nirvana.errors import InvalidInput
from nirvana.methods.base import build_plan
from nirvana.methods.llm_pruner.config import LLMPrunerConfig
from nirvana.models.shapes import ModelShape


def pruned_per_layer(shape: ModelShape, ratio: float) -> tuple[int, int]:
    """(KV groups, neurons) the reference removes from one pruned dense layer at channel ratio `ratio`."""
    hkv, d, inter = shape.num_kv_heads[0], shape.head_dim, shape.intermediate[0]
    channels = hkv * d
    heads = (channels - int(channels * (1 - ratio))) // d
    neurons = inter - int(inter * (1 - ratio))
    # check_pruning_group: a group that would lose all its channels is not pruned at all.
    return (0 if heads >= hkv else heads), (0 if neurons >= inter else neurons)


def achieved_sparsity(shape: ModelShape, ratio: float, attn_layers, mlp_layers) -> float:
    heads, neurons = pruned_per_layer(shape, ratio)
    removed = heads * shape.attn_unit_cost * (attn_layers[1] - attn_layers[0])
    removed += neurons * shape.mlp_unit_cost * (mlp_layers[1] - mlp_layers[0])
    return removed * shape.hidden_size / shape.block_weights


def solve_ratio(shape: ModelShape, sparsity: float, config: LLMPrunerConfig) -> tuple[float, float]:
    """(r, achieved): the per-layer ratio whose block sparsity is closest to `sparsity` (or the given one).

    Counts change only where `int(c (1 - r))` steps, at r = 1 - k / c; every candidate is the midpoint
    between two such steps, far from float ties. `InvalidInput` when the nearest is off by more than
    `config.tolerance`, naming the reachable sparsities on either side.
    """
    attn, mlp = config.layer_ranges(shape.num_layers)
    if config.pruning_ratio is not None:
        return config.pruning_ratio, achieved_sparsity(shape, config.pruning_ratio, attn, mlp)
    channels, inter = shape.num_kv_heads[0] * shape.head_dim, shape.intermediate[0]
    steps = np.unique(np.concatenate([1 - np.arange(channels + 1) / channels, 1 - np.arange(inter + 1) / inter]))
    candidates = np.concatenate([[0.0], (steps[:-1] + steps[1:]) / 2])  # steps are sorted ascending
    achieved = np.array([achieved_sparsity(shape, float(r), attn, mlp) for r in candidates])
    best = int(np.argmin(np.abs(achieved - sparsity)))  # first = smallest r among equals
    if abs(achieved[best] - sparsity) <= config.tolerance:
        return float(candidates[best]), float(achieved[best])
    below = achieved[achieved < sparsity].max(initial=0.0)
    above = achieved[achieved > sparsity]
    reach = f"{below:.3f} and {above.min():.3f}" if above.size else f"at most {below:.3f}"
    raise InvalidInput(
        f"llm-pruner removes the same ratio of KV groups and neurons in attention layers [{attn[0]}, {attn[1]}) "
        f"and MLP layers [{mlp[0]}, {mlp[1]}); with {shape.num_kv_heads[0]} KV groups per layer it cannot reach "
        f"block sparsity {sparsity:g} within {config.tolerance:g} (nearest reachable: {reach}). Choose a sparsity "
        "near those, another attn_layers / mlp_layers range, or an explicit pruning_ratio."
    )


def allocate_llm_pruner(scores, shape: ModelShape, sparsity: float, config: LLMPrunerConfig):
    """Scores -> plan: in each layer of the range, drop the lowest-scoring KV groups / neurons (stable ties)."""
    ratio, achieved = solve_ratio(shape, sparsity, config)
    heads, neurons = pruned_per_layer(shape, ratio)
    attn_range, mlp_range = config.layer_ranges(shape.num_layers)
    attn = scores.attn.detach().cpu().numpy().astype(np.float64)  # (L, Hkv)
    mlp = scores.mlp.detach().cpu().numpy().astype(np.float64)  # (L, I)
    if not (np.isfinite(attn).all() and np.isfinite(mlp).all()):
        raise InvalidInput(
            "llm-pruner scores contain NaN or inf (the backward overflowed?); recompute them in float32."
        )
    kept_attn, kept_mlp = [], []
    for layer in range(shape.num_layers):
        drop_a = heads if attn_range[0] <= layer < attn_range[1] else 0
        drop_m = neurons if mlp_range[0] <= layer < mlp_range[1] else 0
        kept_attn.append(np.argsort(attn[layer], kind="stable")[drop_a:].tolist())
        kept_mlp.append(np.argsort(mlp[layer], kind="stable")[drop_m:].tolist())
    resolved = LLMPrunerConfig(**{**config.__dict__, "attn_layers": attn_range, "mlp_layers": mlp_range})
    stats = {"pruning_ratio": ratio, "llm_pruner_achieved": achieved, "kv_groups_per_layer_pruned": heads}
    stats["neurons_per_layer_pruned"] = neurons
    return build_plan(
        scores, shape, sparsity, "llm-pruner", resolved, kept_attn, kept_mlp, allocation="uniform", stats=stats
    )
