"""A T5 with per-layer head and neuron counts, for nirvana and for stock transformers.

Written into every pruned T5 folder by NIRVANA Explorer (with `auto_map`), so that

    AutoModelForSeq2SeqLM.from_pretrained(folder, trust_remote_code=True)

rebuilds it where only torch and transformers are installed. Imports only those two.

Where the units live (`LAYOUT`): a T5 block is a list of sublayers, the encoder's `[self-attention,
FFN]` and the decoder's `[self-attention, cross-attention, FFN]`. `config.json` keeps the dense
model's global sizes (a stock config must stay valid) and adds, per attention kind, the kept
heads of every layer as indices among the dense ones (`nirvana_t5_kept_heads`) and, per FFN kind,
the kept neurons of every layer (`nirvana_t5_ffn_widths`).

The shared position bias: T5 computes the relative position bias once per stack, in the first
block (`[1, H, q, k]`, one column per head of the dense model), and every later block adds the
same tensor to its scores; a block with no bias of its own and no incoming one makes zeros of
`module.n_heads` heads. Once layers keep different heads, each must add only its own heads'
columns. A sliced attention module keeps `n_heads` at the stack's dense count (only the bias and
the zeros read it; q/k/v/o are reshaped by `-1`) and holds `kept_heads` (its heads' indices among
the dense ones); the attention function registered here as "nirvana_t5" selects those columns and
runs T5's own eager attention (with eager's additive masks, registered under the same name:
transformers builds the masks per attention implementation).
"""

from __future__ import annotations

import torch
from torch import nn
from transformers import AttentionInterface, T5ForConditionalGeneration
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface
from transformers.models.t5.modeling_t5 import eager_attention_forward

ATTENTION = "nirvana_t5"
HEADS_KEY = "nirvana_t5_kept_heads"  # {kind: [[kept head indices] per layer]} for the attention kinds
FFN_KEY = "nirvana_t5_ffn_widths"  # {kind: [kept neurons per layer]} for the FFN kinds

# kind: (stack, index of the sublayer in `block.layer`, its module's attribute, is attention)
LAYOUT = {
    "enc_self": ("encoder", 0, "SelfAttention", True),
    "dec_self": ("decoder", 0, "SelfAttention", True),
    "cross": ("decoder", 1, "EncDecAttention", True),
    "enc_ffn": ("encoder", 1, "DenseReluDense", False),
    "dec_ffn": ("decoder", 2, "DenseReluDense", False),
}
ATTENTION_ROWS = ("q", "k", "v")  # a head's rows; its columns are in "o"
FFN_ROWS = ("wi", "wi_0", "wi_1")  # whichever the FFN kind has (ReLU: wi; gated: wi_0, wi_1); columns in "wo"


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


def layout_modules(model: nn.Module, kind: str) -> list[nn.Module]:
    """The attention (or FFN) module of `kind` in every block of its stack, in layer order."""
    stack, sublayer, attr, _ = LAYOUT[kind]
    return [getattr(block.layer[sublayer], attr) for block in getattr(model, stack).block]


def _linear(old: nn.Linear, in_features: int, out_features: int) -> nn.Linear:
    w = old.weight
    return nn.Linear(in_features, out_features, bias=old.bias is not None, device=w.device, dtype=w.dtype)


def set_head_count(module: nn.Module, kept: list[int]) -> None:
    """Give an attention module q/k/v/o for the `kept` heads (new, uninitialised weights) and their indices."""
    d, width = module.key_value_proj_dim, len(kept) * module.key_value_proj_dim
    for name in ATTENTION_ROWS:
        setattr(module, name, _linear(getattr(module, name), module.d_model, width))
    module.o = _linear(module.o, width, module.d_model)
    module.inner_dim = width  # n_heads stays the stack's dense count (the shared bias)
    module.register_buffer("kept_heads", kept_heads_buffer(kept).to(module.o.weight.device), persistent=True)
    assert module.q.out_features == len(kept) * d


def set_ffn_width(module: nn.Module, width: int) -> None:
    """Give an FFN module `width` neurons (new, uninitialised weights)."""
    for name in FFN_ROWS:
        old = getattr(module, name, None)
        if isinstance(old, nn.Linear):
            setattr(module, name, _linear(old, old.in_features, width))
    module.wo = _linear(module.wo, width, module.wo.out_features)


def is_sliced_t5_config(config) -> bool:
    return bool(getattr(config, HEADS_KEY, None) and getattr(config, FFN_KEY, None))


def resize_t5_to_config(model: nn.Module) -> nn.Module:
    """Resize every layer of a dense-shaped T5 to the widths in its config; ValueError when they do not fit."""
    config = model.config
    heads, widths = getattr(config, HEADS_KEY, None) or {}, getattr(config, FFN_KEY, None) or {}
    for kind, (_, _, _, attention) in LAYOUT.items():
        rows = heads.get(kind) if attention else widths.get(kind)
        modules = layout_modules(model, kind)
        if rows is None or len(rows) != len(modules):
            raise ValueError(
                f"{HEADS_KEY if attention else FFN_KEY}[{kind!r}] needs one entry per layer ({len(modules)})"
            )
        for row, module in zip(rows, modules):
            if attention:
                if not row or len(set(row)) != len(row) or min(row) < 0 or max(row) >= module.n_heads:
                    raise ValueError(f"{kind} kept heads {row} are not distinct indices in [0, {module.n_heads})")
                set_head_count(module, [int(h) for h in row])
            else:
                if not isinstance(row, int) or row < 1:
                    raise ValueError(f"{kind} width {row!r} is not a positive number of neurons")
                set_ffn_width(module, row)
    model.set_attn_implementation(ATTENTION)
    return model


class SlicedT5ForConditionalGeneration(T5ForConditionalGeneration):
    """T5ForConditionalGeneration built at the per-layer widths of its config (`resize_t5_to_config`)."""

    def __init__(self, config):
        super().__init__(config)
        resize_t5_to_config(self)
