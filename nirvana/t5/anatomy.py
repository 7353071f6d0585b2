"""Where the prunable units of a T5 encoder-decoder live, as tables (T5ForConditionalGeneration).

A T5 block is a list of sublayers: the encoder's `[self-attention, FFN]`, the decoder's
`[self-attention, cross-attention, FFN]`. Attention has no grouped heads (g = 1): a unit is one head
h of one attention module, its q/k/v rows h d .. (h+1) d - 1 and the same columns of o, plus column
h of the relative position bias in the first block of each stack, which owns it. An FFN unit is one
neuron j: row j of `wi` (T5 v1.0, ReLU) or of `wi_0` and `wi_1` (v1.1 / FLAN-T5, gated GELU), and
column j of `wo`. Five kinds of units, each `[layers of its stack, units]`:

    enc_self [L_enc, H]   dec_self [L_dec, H]   cross [L_dec, H]   enc_ffn [L_enc, I]   dec_ffn [L_dec, I]

Scoring is `nirvana.t5.scoring`, slicing `nirvana.t5.slicing`; the allocation is every family's
(`nirvana.pruning.allocation`).
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import cache

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


LABELS = {
    "enc_self": "encoder self-attention heads",
    "dec_self": "decoder self-attention heads",
    "cross": "decoder cross-attention heads",
    "enc_ffn": "encoder FFN neurons",
    "dec_ffn": "decoder FFN neurons",
}


@cache
def _shipped():
    """The modeling file a pruned folder ships (`modeling_t5_sliced`), imported on first use: it imports
    transformers' T5 modeling (seconds), which `is_t5` and the CLI's argument checks must not wait for."""
    return importlib.import_module("nirvana.t5.modeling_t5_sliced")


@cache
def _kinds_table() -> dict[str, UnitKind]:
    return {kind: UnitKind(LABELS[kind], *where) for kind, where in _shipped().LAYOUT.items()}


class _Kinds(Mapping[str, UnitKind]):
    """{kind: UnitKind}, read from the shipped modeling file's table (`LAYOUT`) when first looked at."""

    def __getitem__(self, kind: str) -> UnitKind:
        return _kinds_table()[kind]

    def __iter__(self) -> Iterator[str]:
        return iter(_kinds_table())

    def __len__(self) -> int:
        return len(_kinds_table())


# Where each kind lives is the modeling file's table (`LAYOUT`), which a pruned folder ships.
KINDS: Mapping[str, UnitKind] = _Kinds()
ATTENTION_COLUMNS = ("o",)
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
    names = _shipped().ATTENTION_ROWS if attention else _shipped().FFN_ROWS
    return {n: getattr(module, n) for n in names if isinstance(getattr(module, n, None), nn.Linear)}


def column_linears(module: nn.Module, attention: bool) -> dict[str, nn.Linear]:
    names = ATTENTION_COLUMNS if attention else FFN_COLUMNS
    return {n: getattr(module, n) for n in names}


def relative_bias(module: nn.Module) -> nn.Embedding | None:
    """The relative position bias this attention module owns (the first block of each stack), or None."""
    if getattr(module, "has_relative_attention_bias", False):
        return getattr(module, RELATIVE_BIAS)
    return None


def t5_shape(model: nn.Module) -> dict:
    """The dense sizes a plan and the app describe: stacks, heads, FFN kind and width, parameter counts."""
    check_t5(model)
    c = model.config
    return {
        "model_type": c.model_type,
        "feed_forward_proj": c.feed_forward_proj,
        "gated": bool(getattr(c, "is_gated_act", False)),
        "d_model": c.d_model,
        "d_kv": c.d_kv,
        "num_heads": c.num_heads,
        "d_ff": c.d_ff,
        "encoder_layers": len(model.encoder.block),
        "decoder_layers": len(model.decoder.block),
        "vocab_size": c.vocab_size,
        "total_params": sum(p.numel() for p in model.parameters()),
        "block_weights": block_weights(model),
    }


def block_weights(model: nn.Module) -> int:
    """Weights of the blocks' prunable linears: q/k/v/o of the three attentions and wi*/wo of both FFNs."""
    total = 0
    for kind, k in KINDS.items():
        for module in kind_modules(model, kind):
            linears = {**row_linears(module, k.attention), **column_linears(module, k.attention)}
            total += sum(lin.weight.numel() for lin in linears.values())
    return total


def is_sliced(model: nn.Module) -> bool:
    """Whether this T5 was sliced (by `slice_t5`, or loaded from a pruned folder): its attention modules
    hold `kept_heads`, or a kind is narrower than the config's dense width."""
    c = model.config
    dense = {kind: c.num_heads if k.attention else c.d_ff for kind, k in KINDS.items()}
    if any(getattr(m, "kept_heads", None) is not None for kind, k in KINDS.items() if k.attention
           for m in kind_modules(model, kind)):  # fmt: skip
        return True
    return any(n != dense[kind] for kind, row in kept_units(model).items() for n in row)


def kept_units(model: nn.Module) -> dict[str, list[int]]:
    """{kind: units kept per layer} of a (sliced or dense) T5."""
    out = {}
    for kind, k in KINDS.items():
        modules = kind_modules(model, kind)
        if k.attention:
            out[kind] = [m.q.out_features // head_dim(m) for m in modules]
        else:
            out[kind] = [m.wo.in_features for m in modules]
    return out
