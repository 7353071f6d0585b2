"""The prunable geometry of a model, read from its modules (so pruned models work too).

Notation follows METHOD.md: `L` layers, `D` hidden, `d` head_dim, `g` query heads per KV head,
per-layer `Hkv[l]` KV groups and `I[l]` MLP neurons. Dense models have equal widths in every
layer; pruned ones do not, so widths are lists.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch.nn as nn

from nirvana.models.architectures import decoder_layers, layer_projections, text_config


@dataclass(frozen=True)
class ModelShape:
    model_type: str
    num_layers: int  # L
    hidden_size: int  # D
    head_dim: int  # d
    group_size: int  # g = Hq / Hkv, the same in every layer (only whole KV groups are pruned)
    num_kv_heads: tuple[int, ...]  # Hkv per layer
    intermediate: tuple[int, ...]  # I per layer
    vocab_size: int
    tied_embeddings: bool
    total_params: int = 0  # unique parameters of the whole model, embeddings included
    attn_unit_bias: int = 0  # bias entries one KV group owns (q/k/v biases, e.g. Qwen-2)
    mlp_unit_bias: int = 0  # bias entries one neuron owns (gate/up biases)

    @property
    def num_heads(self) -> tuple[int, ...]:
        """Query heads per layer (Hq = g * Hkv)."""
        return tuple(self.group_size * h for h in self.num_kv_heads)

    @property
    def attn_unit_cost(self) -> int:
        """Weights in one KV group, in units of D: q and o carry g heads, k and v one (ca = 2(g+1)d)."""
        return 2 * (self.group_size + 1) * self.head_dim

    mlp_unit_cost = 3  # one neuron: a row of gate and up, a column of down (cm = 3)

    def layer_block_weights(self, layer_idx: int) -> int:
        """Weights of the seven projections of one layer (biases excluded)."""
        return self.hidden_size * (
            self.num_kv_heads[layer_idx] * self.attn_unit_cost + self.intermediate[layer_idx] * self.mlp_unit_cost
        )

    @property
    def block_weights(self) -> int:
        return sum(self.layer_block_weights(i) for i in range(self.num_layers))

    @property
    def is_uniform(self) -> bool:
        return len(set(self.num_kv_heads)) == 1 and len(set(self.intermediate)) == 1

    def unit_params(self) -> tuple[int, int]:
        """Parameters (weights + owned biases) removed with one KV group and with one neuron."""
        return (
            self.hidden_size * self.attn_unit_cost + self.attn_unit_bias,
            self.hidden_size * self.mlp_unit_cost + self.mlp_unit_bias,
        )

    @classmethod
    def from_dict(cls, data: dict) -> ModelShape:
        fields = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        fields["num_kv_heads"], fields["intermediate"] = tuple(data["num_kv_heads"]), tuple(data["intermediate"])
        return cls(**fields)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["num_kv_heads"], d["intermediate"] = list(self.num_kv_heads), list(self.intermediate)
        return d


def head_dim_of(config) -> int:
    """`config.head_dim` when present; never assume D / Hq (Gemma-3 breaks that)."""
    cfg = text_config(config)
    hd = getattr(cfg, "head_dim", None)
    return int(hd) if hd else cfg.hidden_size // cfg.num_attention_heads


def model_shape(model: nn.Module) -> ModelShape:
    """Read the per-layer widths from the actual Linear modules."""
    arch_layers = layer_projections(model)
    cfg = text_config(model.config)
    d = head_dim_of(cfg)
    g = cfg.num_attention_heads // cfg.num_key_value_heads
    kv = tuple(p.k_proj.out_features // d for p in arch_layers)
    inter = tuple(p.gate_proj.out_features for p in arch_layers)
    emb = model.get_input_embeddings()
    p0 = arch_layers[0]
    tied = bool(getattr(cfg, "tie_word_embeddings", False) or getattr(model.config, "tie_word_embeddings", False))
    return ModelShape(
        model_type=model.config.model_type,
        num_layers=len(arch_layers),
        hidden_size=cfg.hidden_size,
        head_dim=d,
        group_size=g,
        num_kv_heads=kv,
        intermediate=inter,
        vocab_size=emb.weight.shape[0],
        tied_embeddings=tied,
        total_params=count_parameters(model),
        attn_unit_bias=_bias_per_unit(p0.q_proj, g * d) + _bias_per_unit(p0.k_proj, d) + _bias_per_unit(p0.v_proj, d),
        mlp_unit_bias=_bias_per_unit(p0.gate_proj, 1) + _bias_per_unit(p0.up_proj, 1),
    )


def _bias_per_unit(lin, rows_per_unit: int) -> int:
    return rows_per_unit if lin.bias is not None else 0


def count_parameters(model: nn.Module) -> int:
    """Unique parameters (tied embeddings counted once)."""
    seen, total = set(), 0
    for p in model.parameters():
        if id(p) not in seen:
            seen.add(id(p))
            total += p.numel()
    return total


SHORTCUTS = (
    "attn_shortcut_Q",
    "mlp_shortcut_Q",
)  # SliceGPT's residual matrices (modeling_nirvana.ShortcutDecoderLayer)


def count_block_parameters(model: nn.Module) -> int:
    """Parameters (weights and biases) of the seven prunable projections of every layer, and the
    shortcut matrices of a SliceGPT model's layers (block parameters too: they live in the blocks)."""
    total = 0
    for proj in layer_projections(model):
        for lin in proj.named_linears().values():
            # in/out features, not weight.numel(): 4-bit weights are stored packed.
            total += lin.in_features * lin.out_features + (lin.bias.numel() if lin.bias is not None else 0)
    for layer in decoder_layers(model):
        total += sum(getattr(layer, name).numel() for name in SHORTCUTS if getattr(layer, name, None) is not None)
    return total
