"""Analytic FLOPs per token from a `ModelShape`, and the ideal speed-up they imply.

Counts multiply-adds as 2 FLOPs and only matmuls: the seven projections of every layer
(biases, norms, rotary, activations and softmax are left out), the lm_head, and attention's
two matmuls against a context of `context` cached positions:

    per token = 2 * block_weights + 2 * V * D + 4 * context * d * sum_l Hq[l]
                (projections)      (lm_head)   (q.k scores and p.v values)

The ideal speed-up of a pruned model is dense FLOPs / pruned FLOPs: what a perfectly
compute-bound run would gain. Prefill and decode have their own ideal (see `phase_flops`).

Every function takes a `ModelShape` (a plan's shape: heads and neurons, the hidden size D) or the
model itself. From a model the matmuls are read off its modules (each projection's in x out
features, the shortcut matrices of a SliceGPT layer, the LM head's width), so a model whose
residual stream was sliced is counted at its real widths; for any other model both agree.
"""

from __future__ import annotations

import torch.nn as nn

from nirvana.models.architectures import decoder_layers, layer_projections
from nirvana.models.shapes import ModelShape, model_shape

DEFAULT_CONTEXT = 512  # the context length at which the headline figure is stated


def _matmul_weights(source: ModelShape | nn.Module) -> tuple[int, int, ModelShape]:
    """(block matmul weights, LM head weights, shape) of a shape, or of a model read from its modules."""
    if isinstance(source, ModelShape):
        return source.block_weights, source.vocab_size * source.hidden_size, source
    shape = model_shape(source)
    block = sum(
        lin.in_features * lin.out_features
        for p in layer_projections(source)
        for lin in (p.q_proj, p.k_proj, p.v_proj, p.o_proj, p.gate_proj, p.up_proj, p.down_proj)
    )
    # SliceGPT's shortcuts: [D'_in, D'_out] matrices each token is multiplied by on the residual path
    block += sum(
        getattr(layer, name).numel()
        for layer in decoder_layers(source)
        for name in ("attn_shortcut_Q", "mlp_shortcut_Q")
        if getattr(layer, name, None) is not None
    )
    head = source.get_output_embeddings()
    head_weights = head.in_features * head.out_features if head is not None else shape.vocab_size * shape.hidden_size
    return block, head_weights, shape


def flops_breakdown(source: ModelShape | nn.Module, context: float = DEFAULT_CONTEXT) -> dict[str, float]:
    """FLOPs of one token attending to `context` positions, by part (all matmuls)."""
    block, head, shape = _matmul_weights(source)
    projections = 2 * block
    lm_head = 2 * head
    attention = 4 * context * shape.head_dim * sum(shape.num_heads)
    return {
        "projections": float(projections),
        "lm_head": float(lm_head),
        "attention": float(attention),
        "total": float(projections + lm_head + attention),
        "context": context,
    }


def flops_per_token(shape: ModelShape | nn.Module, context: float = DEFAULT_CONTEXT) -> float:
    """Total matmul FLOPs for one token with lm_head, attending to `context` positions."""
    return flops_breakdown(shape, context)["total"]


def phase_flops(shape: ModelShape | nn.Module, prompt_len: int, new_tokens: int) -> dict[str, float]:
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


def ideal_speedup(
    dense: ModelShape | nn.Module, pruned: ModelShape | nn.Module, context: float = DEFAULT_CONTEXT
) -> float:
    """Dense FLOPs / pruned FLOPs per token at `context`: the compute-bound upper bound."""
    return flops_per_token(dense, context) / flops_per_token(pruned, context)


def summary(shape: ModelShape | nn.Module, context: float = DEFAULT_CONTEXT) -> dict:
    """Parameter count and FLOPs per token, the facts `eval --json` prints for any model."""
    block, _, facts = _matmul_weights(shape)
    parts = flops_breakdown(shape, context)
    return {
        "params": facts.total_params,
        "block_weights": block,
        "flops_per_token": parts["total"],
        "flops_context": context,
        "flops_breakdown": {k: v for k, v in parts.items() if k not in ("total", "context")},
    }
