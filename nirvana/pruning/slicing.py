"""`apply_plan`: physically slice a model to the plan's kept units; one sweep point = allocate + slice + measure.

Rows of q/k/v/gate/up and columns of o/down are copied into new, smaller `nn.Linear`
modules (biases sliced with their rows). No masks. `update_config` is the one place that
writes per-layer shapes into the config after slicing.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable
from typing import TypeVar

import torch
import torch.nn as nn

from nirvana.errors import InvalidInput, PlanMismatch
from nirvana.models.architectures import get_architecture, layer_projections
from nirvana.models.fingerprint import model_fingerprint
from nirvana.models.shapes import ModelShape, model_shape
from nirvana.models.weights import real_parameter
from nirvana.pruning.allocation import Allocation, allocate
from nirvana.pruning.plan import PruningPlan
from nirvana.scoring.scores import Scores

T = TypeVar("T")


def _slice_linear(lin: nn.Linear, rows: torch.Tensor | None = None, cols: torch.Tensor | None = None) -> nn.Linear:
    if type(lin) is not nn.Linear:
        raise InvalidInput(
            f"cannot slice a {type(lin).__name__}: pruning needs plain nn.Linear weights. Score a quantized model "
            "if you like, but apply the plan to the same model loaded in fp32/bf16."
        )
    weight = real_parameter(lin, "weight")  # accelerate-offloaded weights are read from their store
    if rows is not None:
        weight = weight.index_select(0, rows.to(weight.device))
    if cols is not None:
        weight = weight.index_select(1, cols.to(weight.device))
    if rows is None and cols is None:
        weight = weight.clone()  # index_select made a new tensor; the copy shares nothing with `lin` either way
    # Built on the meta device (no random init, no allocation), then given the sliced tensors themselves: a
    # layer's slice is made once, not initialised and copied (the Allocation page's live text slices a copy per
    # slider position).
    new = nn.Linear(weight.shape[1], weight.shape[0], bias=lin.bias is not None, device="meta", dtype=weight.dtype)
    new.weight = nn.Parameter(weight.detach(), requires_grad=lin.weight.requires_grad)
    if lin.bias is not None:
        bias = real_parameter(lin, "bias")
        bias = bias.index_select(0, rows.to(bias.device)) if rows is not None else bias.clone()
        new.bias = nn.Parameter(bias.detach(), requires_grad=lin.bias.requires_grad)
    return new


def group_rows(groups: list[int], width: int) -> torch.Tensor:
    """Row indices of whole groups of `width` rows: [m*width, (m+1)*width) for each m."""
    idx = torch.tensor(groups, dtype=torch.long)
    return (idx[:, None] * width + torch.arange(width)[None, :]).reshape(-1)  # (len(groups) * width,)


def copy_without_block_weights(model: nn.Module) -> nn.Module:
    """A deep copy of `model` whose q/k/v/o/gate/up/down parameters are *shared*, not copied.

    `apply_plan` replaces every one of those projections with a freshly sliced `nn.Linear`, so
    copying their weights first (about 80% of a decoder's parameters) would only raise the peak
    memory and cost time. After slicing, the copy shares no tensor with `model`.
    """
    memo: dict[int, object] = {}
    for proj in layer_projections(model):
        for lin in (proj.q_proj, proj.k_proj, proj.v_proj, proj.o_proj, proj.gate_proj, proj.up_proj, proj.down_proj):
            for param in lin.parameters(recurse=False):
                memo[id(param)] = param
    return copy.deepcopy(model, memo)


def apply_plan(
    model: nn.Module, plan: PruningPlan, *, inplace: bool = False, check_fingerprint: bool = True
) -> nn.Module:
    """Return a physically smaller model with only the plan's kept KV groups and neurons.

    The caller's model is left untouched unless `inplace=True` (the app's cached model must never
    be pruned in place). Example:
        >>> pruned = apply_plan(model, allocate(scores, model_shape(model), Allocation(0.5)))
    """
    if check_fingerprint:
        plan.check_model(model_fingerprint(model))
    shape = model_shape(model)
    if list(shape.num_kv_heads) != plan.model["num_kv_heads"] or list(shape.intermediate) != plan.model["intermediate"]:
        raise PlanMismatch("the plan's layer widths do not match this model's; was it made for another model?")
    if not inplace:
        model = copy_without_block_weights(model)
    d, g = shape.head_dim, shape.group_size
    arch = get_architecture(model)
    for proj, layer in zip(layer_projections(model), plan.layers):
        q_rows = group_rows(layer.kept_kv_groups, g * d)
        kv_rows = group_rows(layer.kept_kv_groups, d)
        neurons = torch.tensor(layer.kept_neurons, dtype=torch.long)
        setattr(proj.attn, arch.q_proj, _slice_linear(proj.q_proj, rows=q_rows))
        setattr(proj.attn, arch.k_proj, _slice_linear(proj.k_proj, rows=kv_rows))
        setattr(proj.attn, arch.v_proj, _slice_linear(proj.v_proj, rows=kv_rows))
        setattr(proj.attn, arch.o_proj, _slice_linear(proj.o_proj, cols=q_rows))
        setattr(proj.mlp, arch.gate_proj, _slice_linear(proj.gate_proj, rows=neurons))
        setattr(proj.mlp, arch.up_proj, _slice_linear(proj.up_proj, rows=neurons))
        setattr(proj.mlp, arch.down_proj, _slice_linear(proj.down_proj, cols=neurons))
    update_config(model)
    return model


def layer_shapes(model: nn.Module) -> list[dict]:
    shape = model_shape(model)
    return [
        {"num_key_value_heads": kv, "num_attention_heads": kv * shape.group_size, "intermediate_size": inter}
        for kv, inter in zip(shape.num_kv_heads, shape.intermediate)
    ]


def update_config(model: nn.Module) -> None:
    """Record per-layer widths in the config and in module attributes that cache head counts.

    The global `num_attention_heads` / `num_key_value_heads` stay the dense values: HF attention
    infers the head count from the projection width, and `g` is unchanged because only whole KV
    groups go. The reference implementation's keys are written too, so its loader can read ours.
    """
    shapes = layer_shapes(model)
    config = model.config
    config.nirvana_layer_shapes = shapes
    config.modified_head_num = [s["num_attention_heads"] for s in shapes]
    config.modified_intermediate_dimension = [s["intermediate_size"] for s in shapes]
    config.pruned = True
    biased = output_biases(model)
    if biased:  # an added bias (FLAP's compensation) is part of the shape a loader must rebuild
        config.nirvana_output_biases = biased
    for proj, s in zip(layer_projections(model), shapes):
        for attr, value in (("num_heads", s["num_attention_heads"]), ("num_key_value_heads", s["num_key_value_heads"])):
            if hasattr(proj.attn, attr):
                setattr(proj.attn, attr, value)
        if hasattr(proj.mlp, "intermediate_size"):
            proj.mlp.intermediate_size = s["intermediate_size"]


OUTPUT_PROJECTIONS = ("o_proj", "down_proj")  # the projections that write the residual stream


def output_biases(model: nn.Module) -> list[str]:
    """Which of o_proj / down_proj carry a bias in every layer (stock Llama has none; FLAP adds them)."""
    projections = layer_projections(model)
    return [n for n in OUTPUT_PROJECTIONS if all(getattr(p, n).bias is not None for p in projections)]


def add_output_biases(model: nn.Module, biases: dict[int, dict[str, torch.Tensor]]) -> None:
    """Add `biases[layer_idx][name]` ([D] each, name in o_proj / down_proj) to those projections, in place.

    A projection without a bias gets a new `nn.Linear` with the same weight and this bias, so the
    layer computes `W x + b`. Used after slicing by methods that compensate what was removed (FLAP).
    """
    arch = get_architecture(model)
    for layer_idx, proj in enumerate(layer_projections(model)):
        for name, bias in biases.get(layer_idx, {}).items():
            if name not in OUTPUT_PROJECTIONS:
                raise InvalidInput(f"output biases go on {' or '.join(OUTPUT_PROJECTIONS)}, not {name!r}.")
            lin = getattr(proj, name)
            new = nn.Linear(
                lin.in_features, lin.out_features, bias=True, device=lin.weight.device, dtype=lin.weight.dtype
            )
            with torch.no_grad():
                new.weight.copy_(lin.weight)
                old = lin.bias if lin.bias is not None else torch.zeros_like(new.bias)
                new.bias.copy_(old + bias.to(new.bias.device, new.bias.dtype))
            new.weight.requires_grad_(lin.weight.requires_grad)
            parent = proj.attn if name == "o_proj" else proj.mlp
            setattr(parent, getattr(arch, name), new)
    update_config(model)


def slice_at(
    model: nn.Module, scores: Scores, allocation: Allocation, shape: ModelShape | None = None
) -> tuple[PruningPlan, nn.Module]:
    """(plan, sliced copy) at one allocation, from already-computed scores: no gradients."""
    plan = allocate(scores, shape or model_shape(model), allocation)
    return plan, apply_plan(model, plan)


def prune_and_measure(
    model: nn.Module,
    scores: Scores,
    measure: Callable[[nn.Module], T],
    allocation: Allocation,
    *,
    shape: ModelShape | None = None,
    memo: dict | None = None,
) -> tuple[PruningPlan, T]:
    """(plan, measure(sliced copy)): one point of a sweep or search; the copy is freed afterwards.

    `memo` (a dict the caller keeps across points) maps `plan_signature`s to measurements: a
    point whose plan keeps exactly the units of an earlier one (two gammas that round to the
    same counts) is not sliced or measured again.
    """
    plan = allocate(scores, shape or model_shape(model), allocation)
    return plan, measure_plan(plan, lambda: apply_plan(model, plan), measure, memo)


def measure_plan(plan: PruningPlan, make: Callable[[], nn.Module], measure: Callable[[nn.Module], T], memo=None) -> T:
    """measure(make()) with the sliced copy freed afterwards; with `memo`, a plan already measured
    (same `plan_signature`) is neither sliced nor measured again. Every method's sweep point uses it."""
    key = plan_signature(plan) if memo is not None else None
    if memo is not None and key in memo:
        return memo[key]
    pruned = make()
    try:
        value = measure(pruned)
    finally:
        del pruned
    if memo is not None:
        memo[key] = value
    return value


def plan_signature(plan: PruningPlan) -> tuple:
    """Two plans with equal signatures slice identical models (same kept units in every layer, and the same
    hidden width: a SliceGPT plan keeps every unit and differs in its width only)."""
    width = (plan.stats.get("slicegpt") or {}).get("hidden_kept")
    return (width, *((tuple(lp.kept_kv_groups), tuple(lp.kept_neurons)) for lp in plan.layers))


def planned_shape(shape: ModelShape, plan: PruningPlan) -> ModelShape:
    """The shape `plan` leads to (per-layer widths from the plan), for FLOPs before/after without slicing."""
    return dataclasses.replace(
        shape,
        num_kv_heads=tuple(plan.kept_kv_groups),
        intermediate=tuple(plan.kept_neurons),
        total_params=int(plan.stats["params_after"]),
    )
