"""Scores -> `PruningPlan`: the budget, gamma, the two global rankings, minimums and alignment.

METHOD.md section 3, exactly:

    pa = s (Hkv ca + I cm) / (Hkv ca + gamma I cm)       fraction of KV groups pruned
    n_attn = floor(pa L Hkv),  n_mlp = floor(gamma pa L I)

with ca = 2 (g+1) d and cm = 3 (weights per unit, in units of D). All KV groups of all layers
are ranked together and the n_attn lowest pruned; neurons likewise. Then every layer keeps its
best KV group if the ranking took them all, and kept neurons are rounded *up* to a multiple
of `align` by sparing the layer's best pruned neurons. Ties: exactly n units go, in stable
(score, layer, index) order.

This is pure array work on cached scores (no model, no gradients): it is what a slider calls.
It runs in numpy: single-threaded small-array code avoids torch's thread-pool start-up, which
dominated (100+ ms) when other work was keeping the CPU busy.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from nirvana.errors import InvalidInput
from nirvana.models.shapes import ModelShape
from nirvana.pruning.plan import LayerPlan, PlanSettings, PruningPlan, check_align, check_allocation, check_gamma
from nirvana.scoring.scores import Scores

EPS = 1e-9  # floor(0.3 * 10) must be 3, not 2


def default_gamma(shape: ModelShape) -> float:
    """gamma* = 3 I g / (2 d Hkv (g+1)^2): (MLP params / attention params per layer) x g/(g+1).

    3.36 for Llama-3.1-8B, 2.25 for SmolLM2-135M.
    """
    g, d, hkv, inter = shape.group_size, shape.head_dim, shape.num_kv_heads[0], shape.intermediate[0]
    return 3 * inter * g / (2 * d * hkv * (g + 1) ** 2)


@dataclass(frozen=True)
class Allocation:
    """How the pruning budget is spent: one typed value for sparsity, gamma, align and the allocation kind.

    `sparsity`: target fraction of decoder-block weights removed, in [0, MAX_SPARSITY].
    `gamma`: MLP fraction pruned / KV-group fraction pruned (> 0); None = the model's analytic gamma*.
    `align`: kept neurons per layer rounded up to a multiple of this power of two (1 = off).
    `kind`: "global" (one ranking over all layers) or "uniform" (the same sparsity in every layer);
    a plan file and the `--allocation` flag call it `allocation`.
    `gamma_default`: gamma* of the model, filled by `resolve` (leave it unset).

    Built, it is checked for everything that does not need the model (PlanSettings' checks and
    messages); `resolve(shape)` fills gamma* and checks what does (align against the MLP width).
    Example:
        >>> allocation = Allocation(0.5).resolve(model_shape(model))   # gamma = gamma*, 2.25 for SmolLM2
        >>> plan = allocate(scores, model_shape(model), allocation)
    """

    sparsity: float
    gamma: float | None = None
    align: int = 8
    kind: str = "global"
    gamma_default: float | None = None

    def __post_init__(self) -> None:
        check_allocation(self.sparsity, self.gamma, self.align, self.kind, self.gamma_default, resolved=False)

    @property
    def resolved(self) -> bool:
        return self.gamma is not None and self.gamma_default is not None

    def resolve(self, shape: ModelShape) -> Allocation:
        """This allocation for a model of `shape`: gamma* filled (gamma=None becomes gamma*), align checked.

        Resolving a resolved value returns it unchanged: a resolved value belongs to the shape it was
        resolved for. gamma* is only defined for a uniform (dense) model: on an already pruned one,
        gamma must be given.
        """
        if self.resolved:
            return self
        gamma_star = default_gamma(shape)
        gamma = gamma_star if self.gamma is None and shape.is_uniform else self.gamma
        check_gamma(gamma, gamma_star)
        check_align(self.align, min(shape.intermediate))
        return replace(self, gamma=gamma, gamma_default=gamma_star)

    def plan_settings(self, criterion: str = "nirvana", calibration: dict | None = None) -> PlanSettings:
        """The settings a plan records: this resolved allocation and where the scores came from."""
        if not self.resolved:
            raise InvalidInput("an allocation must be resolved for the model (Allocation.resolve(shape)) first.")
        return PlanSettings(
            self.sparsity, self.gamma, self.gamma_default, self.align, self.kind, criterion, calibration
        )


def budget_fractions(shape: ModelShape, sparsity: float, gamma: float) -> tuple[float, float, list[str]]:
    """(fraction of KV groups pruned, fraction of neurons pruned, notes on clamping)."""
    ca, cm = shape.attn_unit_cost, shape.mlp_unit_cost
    hkv, inter = sum(shape.num_kv_heads), sum(shape.intermediate)  # == L Hkv, L I for dense models
    pa = sparsity * (hkv * ca + inter * cm) / (hkv * ca + gamma * inter * cm)
    notes = []
    if pa > 1:
        notes.append(f"attention fraction {pa:.3f} > 1 clamped to 1: this gamma cannot meet the target sparsity")
        pa = 1.0
    pm = gamma * pa
    if pm > 1:
        notes.append(f"MLP fraction {pm:.3f} > 1 clamped to 1: this gamma cannot meet the target sparsity")
        pm = 1.0
    return pa, pm, notes


def lowest(flat: np.ndarray, n: int) -> np.ndarray:
    """Boolean mask of the n lowest entries; ties broken by position (stable sort)."""
    mask = np.zeros(flat.size, dtype=bool)
    if n > 0:
        mask[np.argsort(flat, kind="stable")[:n]] = True
    return mask


def spare_best(pruned_row: np.ndarray, score_row: np.ndarray, count: int) -> None:
    """Un-prune the `count` best-scoring pruned units of one layer (in place)."""
    if count <= 0:
        return
    idx = np.flatnonzero(pruned_row)
    best = np.argsort(-score_row[idx], kind="stable")[:count]
    pruned_row[idx[best]] = False


def _apply_minimums(attn_pruned, mlp_pruned, attn_scores, mlp_scores, align: int) -> None:
    """At least one KV group per layer (the best-scoring); kept neurons rounded up to `align`."""
    for layer in range(attn_pruned.shape[0]):
        if attn_pruned[layer].all():
            attn_pruned[layer, int(np.argmax(attn_scores[layer]))] = False
        width = mlp_pruned.shape[1]
        kept = width - int(mlp_pruned[layer].sum())
        target = min(width, max(align, math.ceil(kept / align) * align))
        spare_best(mlp_pruned[layer], mlp_scores[layer], target - kept)


def allocate(scores: Scores, shape: ModelShape, allocation: Allocation) -> PruningPlan:
    """Turn scores into a plan at `allocation` (resolved here for `shape` unless it already is).

    Example:
        >>> plan = allocate(scores, model_shape(model), Allocation(0.5))
        >>> plan.stats["achieved_block_sparsity"]
        0.499...
    """
    if not isinstance(allocation, Allocation):
        raise InvalidInput(f"allocate needs an Allocation (sparsity, gamma, align, kind), got {allocation!r}.")
    allocation = allocation.resolve(shape)
    settings = allocation.plan_settings(scores.criterion, scores.calibration)
    sparsity, gamma, align = allocation.sparsity, allocation.gamma, allocation.align
    L, hkv, inter = shape.num_layers, shape.num_kv_heads[0], shape.intermediate[0]
    if tuple(scores.attn.shape) != (L, hkv) or tuple(scores.mlp.shape) != (L, inter):
        raise InvalidInput(
            f"scores have shapes attn {tuple(scores.attn.shape)}, mlp {tuple(scores.mlp.shape)} "
            f"but the model needs ({L}, {hkv}) and ({L}, {inter}); were they computed for another model?"
        )
    attn_scores = scores.attn.detach().cpu().numpy().astype(np.float64)  # (L, Hkv)
    mlp_scores = scores.mlp.detach().cpu().numpy().astype(np.float64)  # (L, I)
    if not (np.isfinite(attn_scores).all() and np.isfinite(mlp_scores).all()):
        raise InvalidInput("scores contain NaN or inf (the forward pass overflowed?); recompute them in float32.")
    pa, pm, notes = budget_fractions(shape, sparsity, gamma)
    if allocation.kind == "global":
        n_attn, n_mlp = math.floor(pa * L * hkv + EPS), math.floor(pm * L * inter + EPS)
        attn_pruned = lowest(attn_scores.reshape(-1), n_attn).reshape(L, hkv)
        mlp_pruned = lowest(mlp_scores.reshape(-1), n_mlp).reshape(L, inter)
    else:
        n_attn, n_mlp, attn_pruned, mlp_pruned = _uniform(attn_scores, mlp_scores, shape, sparsity, pa)
    ranked_attn = int(attn_pruned.sum())
    _apply_minimums(attn_pruned, mlp_pruned, attn_scores, mlp_scores, align)
    spared = ranked_attn - int(attn_pruned.sum())
    if spared and hkv == 1:  # METHOD.md's minimum: the budget ranked onto those groups is not moved to the MLP
        notes.append(
            f"every layer has one KV group, which the per-layer minimum keeps: the {spared} group(s) ranked for "
            "removal stay and the achieved sparsity falls short of the target; a larger gamma (e.g. 10 or more) puts "
            "the budget on the MLP"
        )
    elif spared:
        notes.append(f"the per-layer minimum kept {spared} KV group(s) the ranking would have removed")
    layers = [
        LayerPlan(i, np.flatnonzero(~attn_pruned[i]).tolist(), np.flatnonzero(~mlp_pruned[i]).tolist())
        for i in range(L)
    ]
    stats = plan_stats(shape, layers)
    stats.update(
        {
            "ranked_attn_pruned": n_attn,
            "ranked_mlp_pruned": n_mlp,
            "attn_fraction_target": pa,
            "mlp_fraction_target": pm,
            "notes": notes,
        }
    )
    return PruningPlan(scores.fingerprint, shape.to_dict(), settings, layers, stats)


def _uniform(attn_scores: np.ndarray, mlp_scores: np.ndarray, shape: ModelShape, sparsity: float, pa: float):
    """The same block sparsity in every layer: round(pa Hkv) KV groups per layer, the rest of the
    layer's budget from its lowest-scoring neurons. (Attention is too coarse to match pa exactly in
    small models: with Hkv = 3 a layer drops 0, 1 or 2 groups, so the MLP makes up the difference.)"""
    L, hkv, inter = shape.num_layers, shape.num_kv_heads[0], shape.intermediate[0]
    D, ca, cm = shape.hidden_size, shape.attn_unit_cost, shape.mlp_unit_cost
    na = min(hkv - 1, round(pa * hkv))
    layer_budget = sparsity * shape.layer_block_weights(0)
    nm = max(0, min(inter, math.floor((layer_budget - na * ca * D) / (cm * D) + EPS)))
    attn_pruned = np.stack([lowest(attn_scores[i], na) for i in range(L)])
    mlp_pruned = np.stack([lowest(mlp_scores[i], nm) for i in range(L)])
    return na * L, nm * L, attn_pruned, mlp_pruned


def plan_stats(shape: ModelShape, layers: list[LayerPlan]) -> dict:
    """Parameter counts before/after, from shapes alone (the slice must reproduce them)."""
    attn_unit, mlp_unit = shape.unit_params()
    removed_weights = removed_params = 0
    removed_groups = removed_neurons = 0
    for layer in layers:
        ga = shape.num_kv_heads[layer.layer_idx] - len(layer.kept_kv_groups)
        gm = shape.intermediate[layer.layer_idx] - len(layer.kept_neurons)
        removed_groups += ga
        removed_neurons += gm
        removed_weights += shape.hidden_size * (ga * shape.attn_unit_cost + gm * shape.mlp_unit_cost)
        removed_params += ga * attn_unit + gm * mlp_unit
    block = shape.block_weights
    return {
        "block_weights_before": block,
        "block_weights_after": block - removed_weights,
        "achieved_block_sparsity": removed_weights / block,
        "params_before": shape.total_params,
        "params_after": shape.total_params - removed_params,
        "total_param_reduction": removed_params / shape.total_params if shape.total_params else None,
        "kv_groups_pruned": removed_groups,
        "neurons_pruned": removed_neurons,
        "kv_groups_total": sum(shape.num_kv_heads),
        "neurons_total": sum(shape.intermediate),
    }
