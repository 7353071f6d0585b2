"""Physically slice a T5 encoder-decoder to kept heads and neurons per layer and unit kind.

    kept = {"enc_self": [[0, 2, 3], [1]], "dec_self": [...], "cross": [...], "enc_ffn": [[...]], "dec_ffn": [...]}
    pruned = slice_t5(model, kept)     # a smaller copy: q/k/v rows, o columns, wi rows, wo columns

A head's q/k/v rows and o columns go; the relative position bias table stays whole, because the
first block computes it for the whole stack and later blocks still read the columns of heads the
first block dropped (`nirvana.models.modeling_t5_sliced`: each layer adds its own columns). It is
`num_buckets x H` parameters per stack (32 x 12 = 384 on T5-base), so nothing is lost by keeping it.
An FFN neuron's row of `wi` (or `wi_0` and `wi_1`) and column of `wo` go. Every layer keeps at
least one head and one neuron (a layer with none would need its sublayer removed: not done).
"""

from __future__ import annotations

import copy
import math

import numpy as np
import torch
import torch.nn as nn

from nirvana.errors import InvalidInput
from nirvana.models.fingerprint import model_fingerprint
from nirvana.models.t5 import (
    KINDS,
    block_weights,
    check_t5,
    column_linears,
    head_dim,
    is_sliced,
    kind_modules,
    row_linears,
    t5_shape,
    unit_count,
)
from nirvana.pruning.allocation import EPS, lowest, spare_best
from nirvana.pruning.seq2seq_plan import SCOPES, Seq2SeqPlan, Seq2SeqSettings
from nirvana.scoring.seq2seq import Seq2SeqScores


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
    from nirvana.models.modeling_t5_sliced import ATTENTION, FFN_KEY, HEADS_KEY, kept_heads_buffer

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


def unit_costs(model: nn.Module) -> tuple[int, int]:
    """(ca, cm): weights of one head and of one FFN neuron, in units of D. A head owns d rows of each
    of q, k, v and d columns of o (4 d; g = 1), a neuron a row of wi (or wi_0 and wi_1) and a column of wo."""
    check_t5(model)
    attention = kind_modules(model, "enc_self")[0]
    ffn = kind_modules(model, "enc_ffn")[0]
    return 4 * head_dim(attention), len(row_linears(ffn, False)) + 1


def t5_default_gamma(heads: int, neurons: int, ca: int, cm: int) -> float:
    """METHOD.md's gamma* redone for T5: (FFN weights / attention weights) x g / (g + 1), with g = 1.

    `heads` and `neurons` count every unit the ranking covers (all layers and kinds in its scope).
    T5-base (d 64, H 12, I 3072 ReLU) and FLAN-T5-base (I 2048 gated): 2/3 over both stacks, 1 for
    the encoder alone and 1/2 for the decoder alone (whose layers have two attentions).
    """
    return neurons * cm / (heads * ca) * 0.5


def scope_default_gammas(model: nn.Module) -> dict[str, dict[str, float]]:
    """gamma* of each ranking of each scope, e.g. {"global": {"enc_self+...+dec_ffn": 0.67}, "per-stack": {...}}."""
    ca, cm = unit_costs(model)
    units = {kind: sum(unit_count(m, k.attention) for m in kind_modules(model, kind)) for kind, k in KINDS.items()}
    out: dict[str, dict[str, float]] = {}
    for scope in SCOPES:
        out[scope] = {}
        for kinds in _scope_kinds(scope):
            heads = sum(units[k] for k in kinds if KINDS[k].attention)
            neurons = sum(units[k] for k in kinds if not KINDS[k].attention)
            out[scope]["+".join(kinds)] = round(t5_default_gamma(heads, neurons, ca, cm), 4)
    return out


def _scope_kinds(scope: str) -> list[list[str]]:
    if scope not in SCOPES:
        raise InvalidInput(f"scope {scope!r} is not one of {', '.join(SCOPES)}.")
    if scope == "global":
        return [list(KINDS)]
    return [[k for k, v in KINDS.items() if v.stack == stack] for stack in ("encoder", "decoder")]


def allocate_t5(
    scores: dict[str, torch.Tensor] | Seq2SeqScores,
    model: nn.Module,
    sparsity: float,
    *,
    gamma: float | None = None,
    scope: str = "global",
    align: int = 8,
) -> tuple[dict[str, list[list[int]]], dict]:
    """(kept units per kind and layer, stats) at a target fraction `sparsity` of the blocks' linear weights.

    METHOD.md section 3 over T5's units: in each scope, every head of every attention kind is ranked
    together (all heads cost the same 4 d D weights) and the n_attn lowest go, and every FFN neuron
    of the scope likewise with n_mlp, where pa = s (A ca + N cm) / (A ca + gamma N cm), n_attn =
    floor(pa A), n_mlp = floor(gamma pa N). Then each attention module keeps its best head if the
    ranking took them all, and each FFN's kept neurons are rounded up to a multiple of `align`.
    """
    scores = getattr(scores, "tensors", scores)  # a Seq2SeqScores, or its {kind: tensor}
    from_module = {kind: kind_modules(model, kind) for kind in KINDS}
    if not 0 <= sparsity < 1:
        raise InvalidInput(f"sparsity must be in [0, 1), got {sparsity}.")
    ca, cm = unit_costs(model)
    pruned: dict[str, np.ndarray] = {}
    gammas, defaults, notes = {}, {}, []
    for kinds in _scope_kinds(scope):
        attn = [k for k in kinds if KINDS[k].attention]
        ffn = [k for k in kinds if not KINDS[k].attention]
        a_flat = np.concatenate([scores[k].numpy().ravel() for k in attn])
        f_flat = np.concatenate([scores[k].numpy().ravel() for k in ffn])
        default = t5_default_gamma(a_flat.size, f_flat.size, ca, cm)
        g = gamma if gamma is not None else default
        pa = sparsity * (a_flat.size * ca + f_flat.size * cm) / (a_flat.size * ca + g * f_flat.size * cm)
        if pa > 1 or g * pa > 1:
            notes.append(f"{'+'.join(kinds)}: a fraction above 1 was clamped; gamma {g:.3g} cannot meet the target")
        pa_c, pm_c = min(pa, 1.0), min(g * pa, 1.0)
        for flat, group, n in (
            (a_flat, attn, math.floor(pa_c * a_flat.size + EPS)),
            (f_flat, ffn, math.floor(pm_c * f_flat.size + EPS)),
        ):
            mask, start = lowest(flat, n), 0
            for k in group:
                size = scores[k].numel()
                pruned[k] = mask[start : start + size].reshape(tuple(scores[k].shape))
                start += size
        gammas["+".join(kinds)], defaults["+".join(kinds)] = round(g, 4), round(default, 4)
    kept: dict[str, list[list[int]]] = {}
    for kind, k in KINDS.items():
        rows = []
        for layer in range(len(from_module[kind])):
            p, s = pruned[kind][layer].copy(), scores[kind][layer].numpy()
            if k.attention and p.all():
                p[int(np.argmax(s))] = False
            if not k.attention:
                width, left = p.size, p.size - int(p.sum())
                spare_best(p, s, min(width, max(align, math.ceil(left / align) * align)) - left)
            rows.append([int(i) for i in np.flatnonzero(~p)])
        kept[kind] = rows
    total = sum(scores[k].numel() * (ca if v.attention else cm) for k, v in KINDS.items())
    removed = sum(
        (scores[k].numel() - sum(len(r) for r in kept[k])) * (ca if v.attention else cm) for k, v in KINDS.items()
    )
    stats = {"target_sparsity": sparsity, "achieved_block_sparsity": removed / total, "gamma": gammas,
             "gamma_default": defaults, "scope": scope, "align": align, "notes": notes}  # fmt: skip
    return kept, stats


def plan_t5(
    scores: Seq2SeqScores,
    model: nn.Module,
    sparsity: float,
    *,
    gamma: float | None = None,
    scope: str = "global",
    align: int = 8,
    fingerprint: str | None = None,
) -> Seq2SeqPlan:
    """The plan (JSON-able) of `allocate_t5` on these scores, for this dense model.

    `fingerprint`: the model's `model_fingerprint`, when the caller has it (a sweep plans many points of
    one model; hashing a t5-base takes about a second)."""
    fingerprint = fingerprint or model_fingerprint(model)
    if scores.fingerprint != fingerprint:
        raise InvalidInput(
            f"these T5 scores are of model fingerprint {scores.fingerprint}, not of this model ({fingerprint}); "
            "score this model."
        )
    kept, stats = allocate_t5(scores, model, sparsity, gamma=gamma, scope=scope, align=align)
    settings = Seq2SeqSettings(
        sparsity, stats["gamma"], stats["gamma_default"], gamma, scope, align, scores.criterion, scores.calibration
    )
    stats = {**stats, "block_weights_before": block_weights(model)}
    return Seq2SeqPlan(fingerprint, t5_shape(model), settings, kept, stats)


def apply_t5_plan(
    model: nn.Module, plan: Seq2SeqPlan, *, inplace: bool = False, fingerprint: str | None = None
) -> nn.Module:
    """Slice the dense model `plan` was made for (fingerprint checked; `fingerprint`: as `plan_t5`'s)
    to the plan's kept units."""
    plan.check_model(fingerprint or model_fingerprint(model))
    return slice_t5(model, plan.kept, inplace=inplace)
