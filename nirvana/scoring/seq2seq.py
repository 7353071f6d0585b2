"""NIRVANA's saliency on a T5 encoder-decoder: units of five kinds (`nirvana.models.t5`).

Calibration: each window of T tokens is split in halves, the first as the encoder's input and
the second as the decoder's target (a prefix -> continuation pair; the perplexity of T5 uses the
same split), and the decoder runs under teacher forcing (its inputs are the targets shifted right
by the decoder start token). The objective is METHOD.md's on the decoder's logits:

    z = decoder logits [N, T_dec, V];   f = mean over (N, V) of max over T_dec of z

and s(W) = |df/dW * W| elementwise. A head's score is the sum of s over its q/k/v rows, its o
columns and, in the block that owns the relative position bias, that bias's column; a neuron's is
the sum over its `wi` (or `wi_0`, `wi_1`) row and its `wo` column. No labels, no normalisation.
Micro-batches add up to the full batch's gradient (f is a mean over sequences).
"""

from __future__ import annotations

import torch
import torch.nn as nn

from nirvana.errors import InvalidInput
from nirvana.models.t5 import (
    KINDS,
    check_t5,
    column_linears,
    head_dim,
    kind_modules,
    relative_bias,
    row_linears,
    unit_count,
)


def split_windows(input_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(encoder inputs [N, T // 2], decoder targets [N, T - T // 2]) from windows [N, T]."""
    if input_ids.dim() != 2 or input_ids.shape[1] < 2:
        raise InvalidInput(
            f"calibration windows must be [N, T] with T >= 2 to split in halves, got {tuple(input_ids.shape)}."
        )
    half = input_ids.shape[1] // 2
    return input_ids[:, :half], input_ids[:, half:]


def seq2seq_objective(logits: torch.Tensor, n_total: int) -> torch.Tensor:
    """This micro-batch's share of f: sum over its sequences and the vocabulary of the max over decoder
    positions, divided by (N V) of the whole batch."""
    return logits.float().max(dim=1).values.sum() / (n_total * logits.shape[-1])


def _unit_sums(module: nn.Module, attention: bool, units: int) -> torch.Tensor:
    """One module's `[units]` scores from its weights' .grad (rows, columns and the relative bias)."""
    size = head_dim(module) if attention else 1
    total = torch.zeros(units, dtype=torch.float64)
    for lin in row_linears(module, attention).values():
        s = (lin.weight.grad.double() * lin.weight.detach().double()).abs().sum(dim=1)  # [units * size]
        total += s.view(units, size).sum(dim=1).cpu()
    for lin in column_linears(module, attention).values():
        s = (lin.weight.grad.double() * lin.weight.detach().double()).abs().sum(dim=0)
        total += s.view(units, size).sum(dim=1).cpu()
    bias = relative_bias(module) if attention else None
    if bias is not None:
        total += (bias.weight.grad.double() * bias.weight.detach().double()).abs().sum(dim=0).cpu()  # [H]
    return total.float()


@torch.enable_grad()
def t5_scores(model: nn.Module, input_ids: torch.Tensor, micro_batch: int = 0) -> dict[str, torch.Tensor]:
    """{kind: [layers, units]} NIRVANA scores of a T5 model on calibration windows `input_ids: [N, T]`."""
    check_t5(model)
    encoder_ids, targets = split_windows(input_ids)
    n = len(input_ids)
    step = micro_batch or n
    device = model.get_input_embeddings().weight.device
    was_training = model.training
    requires = {p: p.requires_grad for p in model.parameters()}
    model.eval()
    try:
        for p in model.parameters():
            p.requires_grad_(True)
            p.grad = None
        for start in range(0, n, step):
            enc = encoder_ids[start : start + step].to(device)
            dec = model._shift_right(targets[start : start + step].to(device))
            logits = model(input_ids=enc, decoder_input_ids=dec, use_cache=False).logits  # [m, T_dec, V]
            seq2seq_objective(logits, n).backward()
        scores = {}
        for kind, k in KINDS.items():
            modules = kind_modules(model, kind)
            scores[kind] = torch.stack([_unit_sums(m, k.attention, unit_count(m, k.attention)) for m in modules])
    finally:
        for p, flag in requires.items():
            p.grad = None
            p.requires_grad_(flag)
        model.train(was_training)
    return scores
