"""What a T5 with per-layer head counts needs at run time: each layer's slice of the shared position bias.

T5 computes the relative position bias once per stack, in the first block (`[1, H, q, k]`, one
column per head of the dense model), and every later block adds the same tensor to its scores;
a block with no bias of its own and no incoming one makes zeros of `module.n_heads` heads. Once
layers keep different heads, each must add only its own heads' columns. A sliced attention module
keeps `n_heads` at the stack's dense count (only the bias and the zeros read it; q/k/v/o are
reshaped by `-1`) and holds `kept_heads` (its heads' indices among the dense ones); the attention
function registered here as "nirvana_t5" selects those columns and runs T5's own eager attention
(with eager's additive masks, registered under the same name: transformers builds the masks per
attention implementation).

Standalone on purpose (torch and transformers only), so a pruned checkpoint can carry it.
"""

from __future__ import annotations

import torch
from transformers import AttentionInterface
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface
from transformers.models.t5.modeling_t5 import eager_attention_forward

ATTENTION = "nirvana_t5"


def sliced_t5_attention(module, query, key, value, attention_mask, position_bias=None, **kwargs):
    """T5's eager attention with the shared position bias cut to this module's `kept_heads`."""
    kept = getattr(module, "kept_heads", None)
    if kept is not None and position_bias is not None and position_bias.shape[1] != query.shape[1]:
        position_bias = position_bias.index_select(1, kept.to(position_bias.device))
    return eager_attention_forward(module, query, key, value, attention_mask, position_bias=position_bias, **kwargs)


AttentionInterface.register(ATTENTION, sliced_t5_attention)
AttentionMaskInterface.register(ATTENTION, ALL_MASK_ATTENTION_FUNCTIONS["eager"])  # eager's additive masks


def kept_heads_buffer(kept: list[int]) -> torch.Tensor:
    return torch.tensor(sorted(kept), dtype=torch.long)
