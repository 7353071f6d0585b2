"""Where the prunable units of a T5 encoder-decoder live, as tables (T5ForConditionalGeneration).

A T5 block is a list of sublayers: the encoder's `[self-attention, FFN]`, the decoder's
`[self-attention, cross-attention, FFN]`. Attention has no grouped heads (g = 1): a unit is one head
h of one attention module, its q/k/v rows h d .. (h+1) d - 1 and the same columns of o, plus column
h of the relative position bias in the first block of each stack, which owns it. An FFN unit is one
neuron j: row j of `wi` (T5 v1.0, ReLU) or of `wi_0` and `wi_1` (v1.1 / FLAN-T5, gated GELU), and
column j of `wo`. Five kinds of units, each `[layers of its stack, units]`:

    enc_self [L_enc, H]   dec_self [L_dec, H]   cross [L_dec, H]   enc_ffn [L_enc, I]   dec_ffn [L_dec, I]

This is the anatomy only (issue 26's first step): scoring is `nirvana.scoring.seq2seq`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch.nn as nn

from nirvana.errors import UnsupportedArchitecture


@dataclass(frozen=True)
class UnitKind:
    """One kind of prunable unit: which stack, which sublayer of each block, which module there."""

    label: str
    stack: str  # "encoder" or "decoder"
    sublayer: int  # index in `block.layer`
    module: str  # attribute of that sublayer
    attention: bool


KINDS: dict[str, UnitKind] = {
    "enc_self": UnitKind("encoder self-attention heads", "encoder", 0, "SelfAttention", True),
    "dec_self": UnitKind("decoder self-attention heads", "decoder", 0, "SelfAttention", True),
    "cross": UnitKind("decoder cross-attention heads", "decoder", 1, "EncDecAttention", True),
    "enc_ffn": UnitKind("encoder FFN neurons", "encoder", 1, "DenseReluDense", False),
    "dec_ffn": UnitKind("decoder FFN neurons", "decoder", 2, "DenseReluDense", False),
}
ATTENTION_ROWS = ("q", "k", "v")  # a head's rows; its columns are in "o"
ATTENTION_COLUMNS = ("o",)
FFN_ROWS = ("wi", "wi_0", "wi_1")  # whichever the FFN kind has (ReLU: wi; gated: wi_0, wi_1)
FFN_COLUMNS = ("wo",)
RELATIVE_BIAS = "relative_attention_bias"  # nn.Embedding(num_buckets, H): column h belongs to head h


def is_t5(model_or_config) -> bool:
    config = getattr(model_or_config, "config", model_or_config)
    return getattr(config, "model_type", None) in ("t5", "mt5")


def check_t5(model: nn.Module) -> None:
    if not is_t5(model):
        kind = getattr(getattr(model, "config", None), "model_type", None)
        raise UnsupportedArchitecture(
            f"model_type {kind!r} is not a T5 encoder-decoder; decoder-only models go through "
            "nirvana.models.architectures."
        )


def kind_modules(model: nn.Module, kind: str) -> list[nn.Module]:
    """The attention (or FFN) module of `kind` in every block of its stack, in layer order."""
    check_t5(model)
    k = KINDS[kind]
    stack = getattr(model, k.stack)
    return [getattr(block.layer[k.sublayer], k.module) for block in stack.block]


def unit_count(module: nn.Module, attention: bool) -> int:
    """Heads of an attention module, or neurons of an FFN."""
    if attention:
        return module.n_heads
    return module.wo.in_features


def head_dim(module: nn.Module) -> int:
    return module.key_value_proj_dim


def row_linears(module: nn.Module, attention: bool) -> dict[str, nn.Linear]:
    names = ATTENTION_ROWS if attention else FFN_ROWS
    return {n: getattr(module, n) for n in names if isinstance(getattr(module, n, None), nn.Linear)}


def column_linears(module: nn.Module, attention: bool) -> dict[str, nn.Linear]:
    names = ATTENTION_COLUMNS if attention else FFN_COLUMNS
    return {n: getattr(module, n) for n in names}


def relative_bias(module: nn.Module) -> nn.Embedding | None:
    """The relative position bias this attention module owns (the first block of each stack), or None."""
    if getattr(module, "has_relative_attention_bias", False):
        return getattr(module, RELATIVE_BIAS)
    return None
