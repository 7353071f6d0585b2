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
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from nirvana.errors import InvalidInput
from nirvana.models.family import FAMILIES
from nirvana.models.shapes import ModelShape
from nirvana.pruning.plan import (
    SCOPES,
    T5_GRID,
    PlanSettings,
    PruningPlan,
    check_align,
    check_allocation,
    check_gamma,
)
from nirvana.scoring.scores import Scores
from nirvana.t5.anatomy import KINDS as T5_KINDS

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
        check_allocation_kind("decoder-only", self.kind)
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


ALLOCATION_KINDS = {
    "global": "one ranking over all layers",
    "uniform": "the same sparsity in every layer",
    "per-stack": "one budget per stack",
}


def check_allocation_kind(family: str, kind: str) -> None:
    """`kind` is an allocation a model of `family` accepts (`FAMILIES[family].allocations`)."""
    accepted = FAMILIES[family].allocations
    if kind not in accepted:
        raise InvalidInput(
            f"allocation {kind!r} is not a {FAMILIES[family].label.split(' (')[0]} allocation; accepted: "
            + ", ".join(f"{a} ({ALLOCATION_KINDS[a]})" for a in accepted)
            + "."
        )


def budget_fractions(shape: ModelShape, sparsity: float, gamma: float) -> tuple[float, float, list[str]]:
    """(fraction of KV groups pruned, fraction of neurons pruned, notes on clamping) of a decoder-only model."""
    hkv, inter = sum(shape.num_kv_heads), sum(shape.intermediate)  # == L Hkv, L I for dense models
    return fractions(hkv, shape.attn_unit_cost, inter, shape.mlp_unit_cost, sparsity, gamma)


def fractions(heads: int, ca: int, neurons: int, cm: int, sparsity: float, gamma: float):
    """(pa, pm, notes): METHOD.md's budget split for one ranking of `heads` attention units of ca x D weights and
    `neurons` MLP units of cm x D weights, each fraction clamped to 1 with a note when gamma cannot meet it."""
    pa = sparsity * (heads * ca + neurons * cm) / (heads * ca + gamma * neurons * cm)
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


@dataclass(frozen=True)
class UnitKind:
    """One kind of prunable unit as the allocator sees it: `layers` x `width` units of `cost` x D weights each;
    an attention kind keeps at least one unit per layer, an MLP kind rounds its kept units up to `align`."""

    layers: int
    width: int
    cost: int
    attention: bool
    stack: str = "decoder"


@dataclass(frozen=True)
class Ranking:
    """The units ranked together against one budget, and what the allocation found for them."""

    kinds: tuple[str, ...]
    gamma: float
    gamma_default: float
    pa: float
    pm: float
    n_attn: int
    n_mlp: int

    @property
    def name(self) -> str:
        return "+".join(self.kinds)


def check_scores_fit(scores: Scores, shape) -> dict[str, UnitKind]:
    """The unit kinds of `shape` (its family's), once `scores` has one [layers, width] array per kind of them;
    otherwise the scores were computed for another model, and this says so."""
    kinds = RULES[scores.family].kinds(shape)
    have = {kind: tuple(scores.units[kind].shape) for kind in kinds}
    if any(have[k] != (u.layers, u.width) for k, u in kinds.items()):
        need = " and ".join(str((u.layers, u.width)) for u in kinds.values())
        raise InvalidInput(
            f"scores have shapes {', '.join(f'{k} {v}' for k, v in have.items())} but the model needs {need}; "
            "were they computed for another model?"
        )
    return kinds


def allocate(scores: Scores, shape, allocation: Allocation) -> PruningPlan:
    """Turn scores into a plan at `allocation` (resolved here for `shape` unless it already is).

    One allocator for every family (`RULES`, keyed by `scores.family`): the family says its unit kinds, which of
    them are ranked together (decoder-only: one global ranking; a T5: over both stacks, or one per stack), gamma*
    of a ranking, and what its plan records. `shape`: the dense model's `ModelShape` (decoder-only) or `t5_shape`
    dict (T5).

    Example:
        >>> plan = allocate(scores, model_shape(model), Allocation(0.5))
        >>> plan.stats["achieved_block_sparsity"]
        0.499...
    """
    if not isinstance(allocation, Allocation):
        raise InvalidInput(f"allocate needs an Allocation (sparsity, gamma, align, kind), got {allocation!r}.")
    rules = RULES[scores.family]
    allocation = rules.resolve(allocation, shape)
    kinds = check_scores_fit(scores, shape)
    arrays = {kind: scores.units[kind].detach().cpu().numpy().astype(np.float64) for kind in kinds}
    if not all(np.isfinite(a).all() for a in arrays.values()):
        raise InvalidInput("scores contain NaN or inf (the forward pass overflowed?); recompute them in float32.")
    if allocation.kind == "uniform":
        rankings, pruned, notes = _uniform(arrays, shape, allocation.sparsity, allocation.gamma)
    else:
        rankings, pruned, notes = [], {}, []
        groups = rules.rankings(allocation.kind, shape)
        for group in groups:
            gamma_default = allocation.gamma_default or rules.default_gamma(shape, group)  # resolved: gamma* known
            ranking, ranking_notes = _rank(arrays, kinds, group, allocation, gamma_default, pruned)
            rankings.append(ranking)
            notes += [f"{ranking.name}: {n}" for n in ranking_notes] if len(groups) > 1 else ranking_notes
    ranked = {k: int(pruned[k].sum()) for k, u in kinds.items() if u.attention}
    _apply_minimums(pruned, arrays, kinds, allocation.align)
    spared = sum(ranked[k] - int(pruned[k].sum()) for k in ranked)
    unit = rules.attention_unit
    if spared and all(kinds[k].width == 1 for k in ranked):  # METHOD.md's minimum: the budget is not moved
        notes.append(
            f"every layer has one {unit}, which the per-layer minimum keeps: the {spared} {unit}(s) ranked for "
            "removal stay and the achieved sparsity falls short of the target; a larger gamma (e.g. 10 or more) puts "
            "the budget on the MLP"
        )
    elif spared:
        notes.append(f"the per-layer minimum kept {spared} {unit}(s) the ranking would have removed")
    kept = {kind: [np.flatnonzero(~row).tolist() for row in pruned[kind]] for kind in kinds}
    return rules.plan(scores, shape, allocation, kept, rankings, notes)


def _rank(arrays, kinds: dict[str, UnitKind], group, allocation: Allocation, gamma_default: float, pruned) -> tuple:
    """One ranking of `group`'s kinds (METHOD.md section 3): its budget split by gamma, all attention units ranked
    together and the n_attn lowest marked in `pruned`, all MLP units likewise; (Ranking, clamping notes)."""
    attn = [k for k in group if kinds[k].attention]
    mlp = [k for k in group if not kinds[k].attention]
    heads, neurons = sum(arrays[k].size for k in attn), sum(arrays[k].size for k in mlp)
    gamma = gamma_default if allocation.gamma is None else allocation.gamma
    pa, pm, notes = fractions(heads, kinds[attn[0]].cost, neurons, kinds[mlp[0]].cost, allocation.sparsity, gamma)
    n_attn, n_mlp = math.floor(pa * heads + EPS), math.floor(pm * neurons + EPS)
    for members, n in ((attn, n_attn), (mlp, n_mlp)):
        mask, start = lowest(np.concatenate([arrays[k].ravel() for k in members]), n), 0
        for k in members:
            pruned[k] = mask[start : start + arrays[k].size].reshape(arrays[k].shape)
            start += arrays[k].size
    return Ranking(tuple(group), gamma, gamma_default, pa, pm, n_attn, n_mlp), notes


def _apply_minimums(pruned: dict, arrays: dict, kinds: dict[str, UnitKind], align: int) -> None:
    """At least one unit per layer of an attention kind (the best-scoring); kept neurons rounded up to `align`."""
    for kind, unit in kinds.items():
        for layer in range(unit.layers):
            row, score = pruned[kind][layer], arrays[kind][layer]
            if unit.attention:
                if row.all():
                    row[int(np.argmax(score))] = False
                continue
            kept = unit.width - int(row.sum())
            target = min(unit.width, max(align, math.ceil(kept / align) * align))
            spare_best(row, score, target - kept)


def _uniform(arrays: dict, shape: ModelShape, sparsity: float, gamma: float) -> tuple:
    """The same block sparsity in every layer of a decoder-only model: round(pa Hkv) KV groups per layer, the rest
    of the layer's budget from its lowest-scoring neurons. (Attention is too coarse to match pa exactly in
    small models: with Hkv = 3 a layer drops 0, 1 or 2 groups, so the MLP makes up the difference.)"""
    pa, pm, notes = budget_fractions(shape, sparsity, gamma)
    L, hkv, inter = shape.num_layers, shape.num_kv_heads[0], shape.intermediate[0]
    D, ca, cm = shape.hidden_size, shape.attn_unit_cost, shape.mlp_unit_cost
    na = min(hkv - 1, round(pa * hkv))
    layer_budget = sparsity * shape.layer_block_weights(0)
    nm = max(0, min(inter, math.floor((layer_budget - na * ca * D) / (cm * D) + EPS)))
    pruned = {
        "attn": np.stack([lowest(arrays["attn"][i], na) for i in range(L)]),
        "mlp": np.stack([lowest(arrays["mlp"][i], nm) for i in range(L)]),
    }
    return [Ranking(("attn", "mlp"), gamma, gamma, pa, pm, na * L, nm * L)], pruned, notes


def plan_stats(shape: ModelShape, kept: dict[str, list[list[int]]]) -> dict:
    """Parameter counts before/after of a decoder-only plan's `kept` units, from shapes alone (the slice must
    reproduce them)."""
    attn_unit, mlp_unit = shape.unit_params()
    removed_weights = removed_params = 0
    removed_groups = removed_neurons = 0
    for i, (kv, mlp) in enumerate(zip(kept["attn"], kept["mlp"])):
        ga = shape.num_kv_heads[i] - len(kv)
        gm = shape.intermediate[i] - len(mlp)
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


# -- what differs per family -----------------------------------------------------------------------------------


def _decoder_kinds(shape: ModelShape) -> dict[str, UnitKind]:
    L = shape.num_layers
    return {
        "attn": UnitKind(L, shape.num_kv_heads[0], shape.attn_unit_cost, True),
        "mlp": UnitKind(L, shape.intermediate[0], shape.mlp_unit_cost, False),
    }


def _decoder_plan(scores: Scores, shape: ModelShape, allocation: Allocation, kept, rankings, notes) -> PruningPlan:
    settings = allocation.plan_settings(scores.criterion, scores.calibration)
    (ranking,) = rankings
    stats = plan_stats(shape, kept)
    stats.update(
        {
            "ranked_attn_pruned": ranking.n_attn,
            "ranked_mlp_pruned": ranking.n_mlp,
            "attn_fraction_target": ranking.pa,
            "mlp_fraction_target": ranking.pm,
            "notes": notes,
        }
    )
    return PruningPlan(scores.fingerprint, shape.to_dict(), settings, kept, stats)


def _t5_resolve(allocation: Allocation, shape: dict) -> Allocation:
    check_allocation_kind("t5", allocation.kind)
    check_align(allocation.align, shape["d_ff"])
    return allocation  # gamma None stays: each ranking's own gamma*


def _t5_kinds(shape: dict) -> dict[str, UnitKind]:
    """A head owns d rows of each of q, k, v and d columns of o (4 d; g = 1), a neuron a row of wi (or wi_0 and
    wi_1) and a column of wo."""
    cost = {True: 4 * shape["d_kv"], False: 3 if shape["gated"] else 2}
    return {
        kind: UnitKind(shape[T5_GRID[kind][0]], shape[T5_GRID[kind][1]], cost[k.attention], k.attention, k.stack)
        for kind, k in T5_KINDS.items()
    }  # layers and width per kind: the plan file's T5_GRID, so a plan and its allocation read one table


def t5_default_gamma(heads: int, neurons: int, ca: int, cm: int) -> float:
    """METHOD.md's gamma* redone for T5: (FFN weights / attention weights) x g / (g + 1), with g = 1.

    `heads` and `neurons` count every unit the ranking covers (all layers and kinds in its scope).
    T5-base (d 64, H 12, I 3072 ReLU) and FLAN-T5-base (I 2048 gated): 2/3 over both stacks, 1 for
    the encoder alone and 1/2 for the decoder alone (whose layers have two attentions).
    """
    return neurons * cm / (heads * ca) * 0.5


def _t5_rankings(kind: str, shape: dict) -> list[list[str]]:
    kinds = _t5_kinds(shape)
    if kind == "global":
        return [list(kinds)]
    return [[k for k, u in kinds.items() if u.stack == stack] for stack in ("encoder", "decoder")]


def _t5_gamma(shape: dict, group) -> float:
    kinds = _t5_kinds(shape)
    heads = sum(kinds[k].layers * kinds[k].width for k in group if kinds[k].attention)
    neurons = sum(kinds[k].layers * kinds[k].width for k in group if not kinds[k].attention)
    head, neuron = (next(kinds[k].cost for k in group if kinds[k].attention is a) for a in (True, False))
    return t5_default_gamma(heads, neurons, head, neuron)


def _t5_plan(scores: Scores, shape: dict, allocation: Allocation, kept, rankings, notes) -> PruningPlan:
    kinds = _t5_kinds(shape)
    total = sum(u.layers * u.width * u.cost for u in kinds.values())
    removed = sum((u.layers * u.width - sum(len(r) for r in kept[k])) * u.cost for k, u in kinds.items())
    gammas = {r.name: round(r.gamma, 4) for r in rankings}
    defaults = {r.name: round(r.gamma_default, 4) for r in rankings}
    settings = PlanSettings(allocation.sparsity, gammas, defaults, allocation.align, allocation.kind,
                            scores.criterion, scores.calibration, gamma_given=allocation.gamma)  # fmt: skip
    stats = {"target_sparsity": allocation.sparsity, "achieved_block_sparsity": removed / total, "gamma": gammas,
             "gamma_default": defaults, "scope": allocation.kind, "align": allocation.align, "notes": notes,
             "block_weights_before": shape["block_weights"]}  # fmt: skip
    return PruningPlan(scores.fingerprint, shape, settings, kept, stats, family="t5")


def unit_kinds(family: str, shape) -> dict[str, UnitKind]:
    """The unit kinds the allocator sees in a dense model of `family` and `shape`: layers, width, cost per unit."""
    return RULES[family].kinds(shape)


def scope_default_gammas(shape: dict) -> dict[str, dict[str, float]]:
    """gamma* of each ranking of each T5 allocation (`shape`: `t5_shape`), e.g.
    {"global": {"enc_self+...+dec_ffn": 0.67}, "per-stack": {"enc_self+enc_ffn": 1.0, ...}}."""
    return {
        scope: {"+".join(group): round(_t5_gamma(shape, group), 4) for group in _t5_rankings(scope, shape)}
        for scope in SCOPES
    }


@dataclass(frozen=True)
class FamilyRules:
    """What the allocator asks a family: the allocation checked for its shape, its unit kinds, which kinds each
    ranking of an allocation kind covers, gamma* of a ranking, the plan it records, the attention unit's name."""

    resolve: Callable
    kinds: Callable
    rankings: Callable
    default_gamma: Callable
    plan: Callable
    attention_unit: str


RULES: dict[str, FamilyRules] = {
    "decoder-only": FamilyRules(
        Allocation.resolve, _decoder_kinds, lambda kind, shape: [["attn", "mlp"]],
        lambda shape, group: default_gamma(shape), _decoder_plan, "KV group",
    ),
    "t5": FamilyRules(_t5_resolve, _t5_kinds, _t5_rankings, _t5_gamma, _t5_plan, "head"),
}  # fmt: skip
