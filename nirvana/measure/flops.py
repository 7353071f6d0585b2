"""Analytic FLOPs per token from a `ModelShape`, and the ideal speed-up they imply.

Counts multiply-adds as 2 FLOPs and only matmuls: the seven projections of every layer
(biases, norms, rotary, activations and softmax are left out), the lm_head, and attention's
two matmuls against a context of `context` cached positions:

    per token = 2 * block_weights + 2 * V * D + 4 * context * d * sum_l Hq[l]
                (projections)      (lm_head)   (q.k scores and p.v values)

The ideal speed-up of a pruned model is dense FLOPs / pruned FLOPs: what a perfectly
compute-bound run would gain. Prefill and decode have their own ideal (see `phase_flops`).
"""

from __future__ import annotations

from nirvana.models.shapes import ModelShape

DEFAULT_CONTEXT = 512  # the context length at which the headline figure is stated


def flops_breakdown(shape: ModelShape, context: float = DEFAULT_CONTEXT) -> dict[str, float]:
    """FLOPs of one token attending to `context` positions, by part (all matmuls)."""
    projections = 2 * shape.block_weights
    lm_head = 2 * shape.vocab_size * shape.hidden_size
    attention = 4 * context * shape.head_dim * sum(shape.num_heads)
    return {
        "projections": float(projections),
        "lm_head": float(lm_head),
        "attention": float(attention),
        "total": float(projections + lm_head + attention),
        "context": context,
    }


def flops_per_token(shape: ModelShape, context: float = DEFAULT_CONTEXT) -> float:
    """Total matmul FLOPs for one token with lm_head, attending to `context` positions."""
    return flops_breakdown(shape, context)["total"]


def phase_flops(shape: ModelShape, prompt_len: int, new_tokens: int) -> dict[str, float]:
    """FLOPs per token of the two phases that `nirvana.measure.speed` measures.

    Prefill: every prompt token goes through the projections and attends to (T+1)/2 positions on
    average (causal); the lm_head runs once per sequence (generate keeps only the last logits),
    so it adds V*D*2/T per token. Decode: each new token runs projections and lm_head, attending
    to T + (N-1)/2 positions on average.
    """
    pre = flops_breakdown(shape, (prompt_len + 1) / 2)
    prefill = pre["projections"] + pre["attention"] + pre["lm_head"] / prompt_len
    decode = flops_per_token(shape, prompt_len + (new_tokens - 1) / 2)
    return {"prefill": prefill, "decode": decode}


def ideal_speedup(dense: ModelShape, pruned: ModelShape, context: float = DEFAULT_CONTEXT) -> float:
    """Dense FLOPs / pruned FLOPs per token at `context`: the compute-bound upper bound."""
    return flops_per_token(dense, context) / flops_per_token(pruned, context)


def summary(shape: ModelShape, context: float = DEFAULT_CONTEXT) -> dict:
    """Parameter count and FLOPs per token, the facts `eval --json` prints for any model."""
    parts = flops_breakdown(shape, context)
    return {
        "params": shape.total_params,
        "block_weights": shape.block_weights,
        "flops_per_token": parts["total"],
        "flops_context": context,
        "flops_breakdown": {k: v for k, v in parts.items() if k not in ("total", "context")},
    }
