"""Unit scores of a T5 encoder-decoder: units of five kinds (`nirvana.t5.anatomy`), cached on disk.

Calibration: each window of T tokens is split in halves, the first as the encoder's input and
the second as the decoder's target (a prefix -> continuation pair; the perplexity of T5 uses the
same split), and the decoder runs under teacher forcing (its inputs are the targets shifted right
by the decoder start token). NIRVANA's objective is METHOD.md's on the decoder's logits:

    z = decoder logits [N, T_dec, V];   f = mean over (N, V) of max over T_dec of z

and s(W) = |df/dW * W| elementwise. A head's score is the sum of s over its q/k/v rows, its o
columns and, in the block that owns the relative position bias, that bias's column; a neuron's is
the sum over its `wi` (or `wi_0`, `wi_1`) row and its `wo` column. No labels, no normalisation.
Micro-batches add up to the full batch's gradient (f is a mean over sequences).

The other criteria, where they carry over (`T5_CRITERIA`): loss-Taylor is the same sum with f the
mean next-token loss of the targets; magnitude sums |W| over the same weights; random is seeded.
Wanda-style needs each projection's input norms, which the decoder-only hooks collect per layer
of one stack; it is not offered on T5 (the message says so).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from nirvana.errors import InvalidInput
from nirvana.guard.memory import check_scoring_memory, estimate_t5_scoring
from nirvana.progress import Progress
from nirvana.scoring.scores import Scores, cached_scores
from nirvana.t5.anatomy import (
    KINDS,
    check_t5,
    column_linears,
    head_dim,
    is_sliced,
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


def seq2seq_objective(logits: torch.Tensor, targets: torch.Tensor, n_total: int) -> torch.Tensor:
    """NIRVANA's f, this micro-batch's share: the sum over its sequences and the vocabulary of the max over
    decoder positions, divided by (N V) of the whole batch."""
    return logits.float().max(dim=1).values.sum() / (n_total * logits.shape[-1])


def lm_objective(logits: torch.Tensor, targets: torch.Tensor, n_total: int) -> torch.Tensor:
    """loss-Taylor's f, this micro-batch's share: its summed next-token loss over (N T_dec) of the whole batch."""
    loss = F.cross_entropy(logits.float().flatten(0, 1), targets.flatten(), reduction="sum")
    return loss / (n_total * targets.shape[1])


def _gradient_saliency(weight: torch.Tensor) -> torch.Tensor:
    return (weight.grad.double() * weight.detach().double()).abs()


def _magnitude(weight: torch.Tensor) -> torch.Tensor:
    return weight.detach().double().abs()


@dataclass(frozen=True)
class T5Criterion:
    name: str
    objective: Callable | None  # f of (logits, targets, N): a gradient criterion; None: no data, no gradient
    saliency: Callable | None  # per-weight saliency summed over each unit's weights; None: random


T5_CRITERIA: dict[str, T5Criterion] = {
    c.name: c
    for c in (
        T5Criterion("nirvana", seq2seq_objective, _gradient_saliency),
        T5Criterion("taylor", lm_objective, _gradient_saliency),
        T5Criterion("magnitude", None, _magnitude),
        T5Criterion("random", None, None),
    )
}


def check_t5_criterion(criterion: str) -> T5Criterion:
    if criterion not in T5_CRITERIA:
        why = " (it needs per-projection input norms, collected for decoder-only layers only)" * (criterion == "wanda")
        raise InvalidInput(
            f"criterion {criterion!r} is not available on T5{why}; accepted on T5: {', '.join(T5_CRITERIA)}."
        )
    return T5_CRITERIA[criterion]


def _unit_sums(module: nn.Module, attention: bool, units: int, saliency: Callable) -> torch.Tensor:
    """One module's `[units]` scores: `saliency` summed over its rows, columns and relative bias column."""
    size = head_dim(module) if attention else 1
    total = torch.zeros(units, dtype=torch.float64)
    for lin in row_linears(module, attention).values():
        total += saliency(lin.weight).sum(dim=1).view(units, size).sum(dim=1).cpu()
    for lin in column_linears(module, attention).values():
        total += saliency(lin.weight).sum(dim=0).view(units, size).sum(dim=1).cpu()
    bias = relative_bias(module) if attention else None
    if bias is not None:
        total += saliency(bias.weight).sum(dim=0).cpu()  # [H]
    return total.float()


def _sums(model: nn.Module, saliency: Callable) -> dict[str, torch.Tensor]:
    return {
        kind: torch.stack(
            [_unit_sums(m, k.attention, unit_count(m, k.attention), saliency) for m in kind_modules(model, kind)]
        )
        for kind, k in KINDS.items()
    }


@torch.enable_grad()
def _gradient_scores(model, input_ids, objective, micro_batch: int, progress: Progress) -> dict[str, torch.Tensor]:
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
            tgt = targets[start : start + step].to(device)
            logits = model(input_ids=enc, decoder_input_ids=model._shift_right(tgt), use_cache=False).logits
            objective(logits, tgt, n).backward()
            if progress:
                progress(min(start + step, n) / n * 0.95, f"scoring: {min(start + step, n)}/{n} sequences")
        return _sums(model, _gradient_saliency)
    finally:
        for p, flag in requires.items():
            p.grad = None
            p.requires_grad_(flag)
        model.train(was_training)


def t5_scores(
    model: nn.Module,
    input_ids: torch.Tensor | None,
    micro_batch: int = 0,
    *,
    criterion: str = "nirvana",
    seed: int = 0,
    progress: Progress = None,
) -> dict[str, torch.Tensor]:
    """{kind: [layers, units]} scores of `criterion` on calibration windows `input_ids: [N, T]` (None: data-free)."""
    check_t5(model)
    c = check_t5_criterion(criterion)
    if c.objective is not None:
        if input_ids is None:
            raise InvalidInput(f"criterion {criterion!r} needs calibration windows.")
        return _gradient_scores(model, input_ids, c.objective, micro_batch, progress)
    if c.saliency is not None:
        return _sums(model, c.saliency)
    g = torch.Generator().manual_seed(seed)
    shapes = {kind: (len(kind_modules(model, kind)), unit_count(kind_modules(model, kind)[0], k.attention))
              for kind, k in KINDS.items()}  # fmt: skip
    return {kind: torch.rand(shape, generator=g) for kind, shape in shapes.items()}


def compute_t5_scores(
    model: nn.Module,
    criterion: str,
    batch=None,
    *,
    seed: int = 0,
    micro_batch: int = 0,
    use_cache: bool = True,
    progress: Progress = None,
) -> Scores:
    """`t5_scores` on a `CalibrationBatch` (or none), cached on disk by model, criterion, batch and seed.

    Before a gradient criterion runs, its planned peak (`nirvana.guard.memory.estimate_t5_scoring`, a
    conservative count from the parameters and both stacks' activations) is checked against the free memory
    and `OutOfMemory` raised if it cannot fit; an OOM while running is reported the same way. `micro_batch`
    0 scores the whole batch in one pass.
    """
    check_t5(model)
    c = check_t5_criterion(criterion)
    needs_data = c.objective is not None
    if is_sliced(model):
        raise InvalidInput("this T5 is already pruned (narrower than its dense widths); score the dense model.")
    if needs_data and batch is None:
        raise InvalidInput(f"criterion {criterion!r} needs a calibration batch.")
    calib = batch.describe() if needs_data else None
    seeded = c.objective is None and c.saliency is None

    def check_memory() -> None:
        n, t = batch.input_ids.shape
        check_scoring_memory(model, n, t, micro_batch=micro_batch, estimate=estimate_t5_scoring)

    def score(fingerprint: str, _plan) -> Scores:
        tensors = t5_scores(model, batch.input_ids if needs_data else None, micro_batch,
                            criterion=criterion, seed=seed, progress=progress)  # fmt: skip
        return Scores(tensors, criterion, fingerprint, calib, {"seed": seed}, family="t5")

    return cached_scores(
        model, f"t5-{criterion}", calib, {"seed": seed} if seeded else {}, score,
        memory=check_memory if needs_data else None, use_cache=use_cache, progress=progress,
    )  # fmt: skip
