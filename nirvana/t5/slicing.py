"""Physically slice a T5 encoder-decoder to kept heads and neurons per layer and unit kind.

    kept = {"enc_self": [[0, 2, 3], [1]], "dec_self": [...], "cross": [...], "enc_ffn": [[...]], "dec_ffn": [...]}
    pruned = slice_t5(model, kept)     # a smaller copy: q/k/v rows, o columns, wi rows, wo columns

A head's q/k/v rows and o columns go; the relative position bias table stays whole, because the
first block computes it for the whole stack and later blocks still read the columns of heads the
first block dropped (`nirvana.t5.modeling_t5_sliced`: each layer adds its own columns). It is
`num_buckets x H` parameters per stack (32 x 12 = 384 on T5-base), so nothing is lost by keeping it.
An FFN neuron's row of `wi` (or `wi_0` and `wi_1`) and column of `wo` go. Every layer keeps at
least one head and one neuron (a layer with none would need its sublayer removed: not done).
"""

from __future__ import annotations

import copy

import torch
import torch.nn as nn

from nirvana.errors import InvalidInput
from nirvana.models.fingerprint import model_fingerprint
from nirvana.pruning.plan import PruningPlan
from nirvana.t5.anatomy import (
    KINDS,
    check_t5,
    column_linears,
    head_dim,
    is_sliced,
    kind_modules,
    row_linears,
    unit_count,
)


def _select(lin: nn.Linear, index: torch.Tensor, dim: int) -> nn.Linear:
    """A new nn.Linear with the rows (dim 0) or input columns (dim 1) of `index`."""
    weight = lin.weight.detach().index_select(dim, index.to(lin.weight.device)).clone()
    new = nn.Linear(
        weight.shape[1], weight.shape[0], bias=lin.bias is not None, device=weight.device, dtype=weight.dtype
    )
    new.weight.data.copy_(weight)
    if lin.bias is not None:
        new.bias.data.copy_(lin.bias.detach() if dim == 1 else lin.bias.detach()[index])
    return new


def check_kept(model: nn.Module, kept: dict[str, list[list[int]]]) -> None:
    """Every kind has one sorted, duplicate-free, in-range, non-empty list of kept units per layer."""
    check_t5(model)
    for kind, k in KINDS.items():
        modules = kind_modules(model, kind)
        rows = kept.get(kind)
        if rows is None or len(rows) != len(modules):
            raise InvalidInput(
                f"kept {kind} needs one list per layer ({len(modules)}), got {None if rows is None else len(rows)}."
            )
        for i, (units, module) in enumerate(zip(rows, modules)):
            total = module.n_heads if k.attention else unit_count(module, False)
            if not units or len(set(units)) != len(units) or min(units) < 0 or max(units) >= total:
                raise InvalidInput(
                    f"kept {kind} of layer {i} must be distinct indices in [0, {total}), at least one; got {units}."
                )


def slice_t5(model: nn.Module, kept: dict[str, list[list[int]]], *, inplace: bool = False) -> nn.Module:
    """The model with only the `kept` heads and neurons (indices of the dense model's units)."""
    # The pipeline is imported by the CLI's checks, which must not wait for transformers' modeling.
    # here, not at the top: the shipped modeling file imports transformers' T5 (seconds)
    from nirvana.t5.modeling_t5_sliced import ATTENTION, FFN_KEY, HEADS_KEY, kept_heads_buffer

    check_t5(model)
    if is_sliced(model):
        raise InvalidInput("this T5 is already sliced; slice the dense model.")
    check_kept(model, kept)
    if not inplace:
        model = copy.deepcopy(model)
    for kind, k in KINDS.items():
        for units, module in zip(kept[kind], kind_modules(model, kind)):
            units = sorted(units)
            if k.attention:
                d = head_dim(module)
                index = torch.tensor([h * d + j for h in units for j in range(d)], dtype=torch.long)
                module.register_buffer("kept_heads", kept_heads_buffer(units), persistent=True)
                module.inner_dim = len(units) * d  # n_heads stays the stack's dense count (the shared bias)
            else:
                index = torch.tensor(units, dtype=torch.long)
            for name, lin in row_linears(module, k.attention).items():
                setattr(module, name, _select(lin, index, 0))
            for name, lin in column_linears(module, k.attention).items():
                setattr(module, name, _select(lin, index, 1))
    model.config.update(
        {
            HEADS_KEY: {kind: [sorted(r) for r in kept[kind]] for kind, k in KINDS.items() if k.attention},
            FFN_KEY: {kind: [len(r) for r in kept[kind]] for kind, k in KINDS.items() if not k.attention},
        }
    )  # what the modeling file (and `load_pruned`) rebuilds the layers from
    model.set_attn_implementation(ATTENTION)
    return model


def apply_t5_plan(
    model: nn.Module, plan: PruningPlan, *, inplace: bool = False, fingerprint: str | None = None
) -> nn.Module:
    """Slice the dense model a T5 `plan` was made for (fingerprint checked; `fingerprint`: the model's
    `model_fingerprint` when the caller has it, as a sweep over one model does) to the plan's kept units."""
    plan.check_model(fingerprint or model_fingerprint(model))
    return slice_t5(model, plan.kept, inplace=inplace)
