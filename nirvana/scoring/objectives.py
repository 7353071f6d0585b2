"""The scalar objectives gradient criteria differentiate, and the NIRVANA one without the `[n, T, V]` logits.

`nirvana_objective` (F = mean over (N, V) of max over T of z) and `lm_loss_objective` (next-token
cross-entropy) take one micro-batch's logits; both are scaled so that micro-batches add up to the
full-batch value, which makes micro-batching exact.

The vocabulary in chunks, from the last hidden state:

F = mean over (N, V) of max over T of z needs, per sequence and vocabulary entry, only the largest
logit over the positions and where it is. `MaxOverPositions` computes that one vocabulary chunk at
a time (`z_c = h @ W_c^T` in the model's dtype, then fp32, the model's final soft-cap when it has
one), keeping only the chunk's maxima and their positions; its backward sends each entry's gradient
to the position of its maximum:

    dF/dh[n, t] = sum over v with argmax_t z[n, :, v] = t of dF/dmax[n, v] * cap'(z) * W[v]

one chunk at a time again. So the largest logits tensor alive is `[n, T, chunk]` instead of
`[n, T, V]` plus its fp32 copies and gradient (V = 49,152 for SmolLM2, 151,936 for Qwen2.5); the chunk
(`nirvana.guard.memory.vocab_chunk`: at most 8,192 entries, fewer for large passes) keeps it near 8 MiB.
The lm_head takes no gradient (it is never pruned); the gradient reaches the decoder through `h`.

Same value and same gradient as the full-logits objective, except on exact ties of the maximum
over positions: `amax` splits the gradient between tied positions, this gives it to the first
(fp32 logits of different positions tie almost never; the tests compare scores on every family).

The next-token cross-entropy (loss-Taylor, LLM-Pruner) the same way: `CrossEntropyByChunks` keeps a
running log-sum-exp per position over the chunks (the online softmax: a running maximum m and
sum s, rescaled by exp(m_old - m_new)) and the target's logit, so the loss is lse - z_target; its
backward recomputes each chunk's logits and sends (softmax - one-hot) @ W_c to `h`. Alive at once:
one `[n, T, chunk]` block and a few `[n, T]` fp32 vectors, instead of the logits, their fp32 copy,
the log-softmax and its gradient.

`forward_objective(model, ids, objective, total)` is what the scorers call: the chunked form where
`CHUNKED` has one for the objective and the model's head is a plain linear map of the decoder's
output (every row of `nirvana.models.architectures`), else `objective(model(ids).logits, ...)`.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from nirvana.guard.memory import VOCAB_CHUNK, vocab_chunk  # the memory plan counts the same chunks
from nirvana.models.architectures import text_config
from nirvana.models.weights import is_quantized_linear


def nirvana_objective(logits: torch.Tensor, input_ids: torch.Tensor, total_samples: int) -> torch.Tensor:
    """f = mean over (N, V) of max over T of z; `logits: [n, T, V]` is one micro-batch of N."""
    per_vocab = logits.float().amax(dim=1)  # (n, V): max over positions
    return per_vocab.sum() / (total_samples * per_vocab.shape[-1])


def lm_loss_objective(logits: torch.Tensor, input_ids: torch.Tensor, total_samples: int) -> torch.Tensor:
    """Mean next-token cross-entropy over the batch, scaled so micro-batches add up to the full mean."""
    n = input_ids.shape[0]
    loss = F.cross_entropy(logits[:, :-1].float().reshape(-1, logits.shape[-1]), input_ids[:, 1:].reshape(-1))
    return loss * n / total_samples


def _capped(z: torch.Tensor, cap: float | None) -> torch.Tensor:
    return z if cap is None else torch.tanh(z / cap) * cap


class MaxOverPositions(torch.autograd.Function):
    """sum over (n, v) of max over t of cap(h[n, t] . W[v] + b[v]), computed a vocabulary chunk at a time."""

    @staticmethod
    def forward(ctx, h, weight, bias, cap, chunk):
        maxima, where = [], []
        for start in range(0, weight.shape[0], chunk):
            w = weight[start : start + chunk]
            b = None if bias is None else bias[start : start + chunk]
            z = _capped(nn.functional.linear(h, w, b).float(), cap)  # (n, T, C)
            value, index = z.max(dim=1)  # (n, C) each
            maxima.append(value)
            where.append(index)
            del z
        maxima, where = torch.cat(maxima, dim=1), torch.cat(where, dim=1)  # (n, V)
        ctx.save_for_backward(h, weight, maxima, where)
        ctx.cap, ctx.chunk = cap, chunk
        return maxima.sum()

    @staticmethod
    def backward(ctx, grad_total):
        h, weight, maxima, where = ctx.saved_tensors
        cap, chunk = ctx.cap, ctx.chunk
        n, t, _ = h.shape
        grad_h = torch.zeros(h.shape, dtype=torch.float32, device=h.device)
        for start in range(0, weight.shape[0], chunk):
            stop = min(start + chunk, weight.shape[0])
            g = grad_total.float().expand(n, stop - start)
            if cap is not None:  # d/dz of cap * tanh(z / cap) = 1 - tanh^2, and tanh = maximum / cap
                g = g * (1 - (maxima[:, start:stop] / cap) ** 2)
            spread = torch.zeros((n, t, stop - start), dtype=torch.float32, device=h.device)
            spread.scatter_(1, where[:, start:stop].unsqueeze(1), g.unsqueeze(1))  # (n, T, C): one non-zero per column
            grad_h += spread.to(h.dtype) @ weight[start:stop]
            del spread
        return grad_h.to(h.dtype), None, None, None, None


class CrossEntropyByChunks(torch.autograd.Function):
    """sum over (n, t) of -log softmax(cap(h[n, t] W^T + b))[targets[n, t]], a vocabulary chunk at a time."""

    @staticmethod
    def forward(ctx, h, weight, bias, targets, cap, chunk):
        n, t, _ = h.shape
        top = torch.full((n, t), float("-inf"), dtype=torch.float32, device=h.device)
        total = torch.zeros((n, t), dtype=torch.float32, device=h.device)
        target_logit = torch.zeros((n, t), dtype=torch.float32, device=h.device)
        for start in range(0, weight.shape[0], chunk):
            stop = min(start + chunk, weight.shape[0])
            b = None if bias is None else bias[start:stop]
            z = _capped(nn.functional.linear(h, weight[start:stop], b).float(), cap)  # (n, T, C)
            new_top = torch.maximum(top, z.amax(dim=-1))
            total = total * torch.exp(top - new_top) + torch.exp(z - new_top.unsqueeze(-1)).sum(dim=-1)
            top = new_top
            inside = (targets >= start) & (targets < stop)
            local = (targets - start).clamp(0, stop - start - 1).unsqueeze(-1)
            target_logit += torch.where(inside, z.gather(-1, local).squeeze(-1), 0.0)
            del z
        lse = top + torch.log(total)
        ctx.save_for_backward(h, weight, targets, lse)
        ctx.bias, ctx.cap, ctx.chunk = bias, cap, chunk
        return (lse - target_logit).sum()

    @staticmethod
    def backward(ctx, grad_total):
        h, weight, targets, lse = ctx.saved_tensors
        bias, cap, chunk = ctx.bias, ctx.cap, ctx.chunk
        grad_h = torch.zeros(h.shape, dtype=torch.float32, device=h.device)
        g = grad_total.float()
        for start in range(0, weight.shape[0], chunk):
            stop = min(start + chunk, weight.shape[0])
            b = None if bias is None else bias[start:stop]
            z = _capped(nn.functional.linear(h, weight[start:stop], b).float(), cap)
            dz = torch.exp(z - lse.unsqueeze(-1))  # softmax over the whole vocabulary, this chunk's columns
            inside = ((targets >= start) & (targets < stop)).float().unsqueeze(-1)
            local = (targets - start).clamp(0, stop - start - 1).unsqueeze(-1)
            dz.scatter_add_(-1, local, -inside)  # minus the one-hot of the target, where it lies in this chunk
            if cap is not None:  # through cap * tanh(z / cap): 1 - tanh^2, and tanh = z / cap
                dz = dz * (1 - (z / cap) ** 2)
            grad_h += (dz * g).to(h.dtype) @ weight[start:stop]
            del z, dz
        return grad_h.to(h.dtype), None, None, None, None, None


def output_head(model: nn.Module) -> tuple[nn.Module, nn.Module, float | None] | None:
    """(decoder returning the final hidden state, the lm_head linear, the final logit soft-cap), or None
    where the logits are not a plain linear map of the decoder's output (then the full logits are used)."""
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    decoder = getattr(model, "base_model", None)
    if not isinstance(head, nn.Linear) or is_quantized_linear(head) or decoder is None or decoder is model:
        return None
    if head.weight.device.type == "meta" or getattr(head, "_hf_hook", None) is not None:
        return None  # accelerate-offloaded head: its weight is only there inside its own forward
    cap = getattr(text_config(model.config), "final_logit_softcapping", None)
    return decoder, head, (float(cap) if cap else None)


def chunked_nirvana_objective(
    h: torch.Tensor, head: nn.Linear, cap: float | None, input_ids: torch.Tensor, total_samples: int
) -> torch.Tensor:
    """The NIRVANA objective of one micro-batch from its final hidden state `h: [n, T, D]`."""
    bias = None if head.bias is None else head.bias.detach()
    chunk = vocab_chunk(h.shape[0] * h.shape[1], head.weight.shape[0], VOCAB_CHUNK)
    total = MaxOverPositions.apply(h, head.weight.detach(), bias, cap, chunk)
    return total / (total_samples * head.weight.shape[0])


def chunked_lm_loss_objective(
    h: torch.Tensor, head: nn.Linear, cap: float | None, input_ids: torch.Tensor, total_samples: int
) -> torch.Tensor:
    """`lm_loss_objective` of one micro-batch from its final hidden state `h: [n, T, D]`."""
    n, t = input_ids.shape
    bias = None if head.bias is None else head.bias.detach()
    chunk = vocab_chunk(n * t, head.weight.shape[0], VOCAB_CHUNK)
    targets = input_ids[:, 1:].to(h.device)
    total = CrossEntropyByChunks.apply(h[:, :-1], head.weight.detach(), bias, targets, cap, chunk)
    return total / (n * (t - 1)) * n / total_samples


# objective -> its form on the final hidden state (objectives without one get the full logits)
CHUNKED = {nirvana_objective: chunked_nirvana_objective, lm_loss_objective: chunked_lm_loss_objective}


def forward_objective(model: nn.Module, input_ids: torch.Tensor, objective, total_samples: int) -> torch.Tensor:
    """objective(logits of `input_ids`, input_ids, total_samples), without the full logits where it can."""
    chunked = CHUNKED.get(objective)
    head = output_head(model) if chunked is not None else None
    if head is None:
        logits = model(input_ids=input_ids, use_cache=False).logits
        return objective(logits, input_ids.to(logits.device), total_samples)
    decoder, lm_head, cap = head
    h = decoder(input_ids=input_ids, use_cache=False).last_hidden_state
    return chunked(h.to(lm_head.weight.device), lm_head, cap, input_ids, total_samples)
