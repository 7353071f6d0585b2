"""Per-layer widths for a structurally pruned checkpoint, for stock `transformers`.

Written into every pruned model folder by NIRVANA Explorer. Imports only torch and
transformers. Each class subclasses its family's own `*ForCausalLM` and, after the stock
`__init__`, replaces every decoder layer's q/k/v/o and gate/up/down projections with
`nn.Linear` modules of the widths stored in `config.json` (`nirvana_layer_shapes`, or the
reference implementation's `modified_head_num` + `modified_intermediate_dimension`), so that

    AutoModelForCausalLM.from_pretrained(folder, trust_remote_code=True)

loads the safetensors as they are. Only whole KV groups (a K/V head and its query heads) and
whole MLP neurons were removed, so `head_dim` and the query heads per KV head are unchanged and
the stock attention forward infers the head counts from the projection widths.

A SliceGPT checkpoint (`config.nirvana_sliced_hidden`) also has a thinner residual stream: the
embeddings, every projection's hidden side and the LM head are narrower than `hidden_size`, the
norms carry no weight (it was folded into the projections that read them), and each decoder layer
multiplies its residual by two real matrices (`attn_shortcut_Q`, `mlp_shortcut_Q`) that carry it
between the differently rotated bases (`ShortcutDecoderLayer`).
"""

from __future__ import annotations

import torch
from torch import nn
from transformers import (
    Gemma2ForCausalLM,
    Gemma3ForCausalLM,
    Gemma3ForConditionalGeneration,
    GemmaForCausalLM,
    LlamaForCausalLM,
    MistralForCausalLM,
    Qwen2ForCausalLM,
    Qwen3ForCausalLM,
)
from transformers.modeling_layers import GradientCheckpointingLayer

LAYER_PATHS = ("model.layers", "model.language_model.layers")


def layer_widths(config) -> list[tuple[int, int]]:
    """(KV heads, MLP neurons) per decoder layer, from the config's per-layer keys."""
    text = config.get_text_config()
    shapes = getattr(config, "nirvana_layer_shapes", None)
    if shapes:
        return [(int(s["num_key_value_heads"]), int(s["intermediate_size"])) for s in shapes]
    heads = getattr(config, "modified_head_num", None)
    inter = getattr(config, "modified_intermediate_dimension", None)
    if heads and inter:
        group = text.num_attention_heads // text.num_key_value_heads
        return [(int(h) // group, int(i)) for h, i in zip(heads, inter)]
    raise ValueError(
        "config.json has no per-layer shapes (nirvana_layer_shapes, or modified_head_num and "
        "modified_intermediate_dimension): it is not a pruned checkpoint."
    )


def _decoder_layers(model: nn.Module) -> nn.ModuleList:
    for path in LAYER_PATHS:
        module = model
        for part in path.split("."):
            module = getattr(module, part, None)
            if module is None:
                break
        if isinstance(module, nn.ModuleList):
            return module
    raise ValueError(f"no decoder layers at {' or '.join(LAYER_PATHS)} in {type(model).__name__}.")


def _linear(old: nn.Linear, in_features: int, out_features: int, bias: bool = False) -> nn.Linear:
    """An empty Linear like `old` (device, dtype, bias) of a new shape; the checkpoint fills it.

    `bias=True` adds a bias the stock layer lacks (FLAP's compensation on o_proj / down_proj,
    listed in `config.nirvana_output_biases`)."""
    return nn.Linear(
        in_features, out_features, bias=bias or old.bias is not None, device=old.weight.device, dtype=old.weight.dtype
    )


def hidden_dims(config, num_layers: int) -> list[tuple[int, int, int, int]]:
    """(attention in, attention out, MLP in, MLP out) hidden widths per layer: all `hidden_size`,
    unless SliceGPT sliced the residual stream (`nirvana_sliced_hidden["layers"]`)."""
    sliced = getattr(config, "nirvana_sliced_hidden", None)
    if not sliced:
        hidden = config.get_text_config().hidden_size
        return [(hidden,) * 4] * num_layers
    dims = [tuple(int(x) for x in row) for row in sliced["layers"]]
    if len(dims) != num_layers:
        raise ValueError(f"config.json lists {len(dims)} sliced hidden widths for {num_layers} decoder layers.")
    return dims


def resize_to_config(model: nn.Module) -> None:
    """Give every decoder layer the projection widths stored in `model.config` (and, for a SliceGPT
    checkpoint, the sliced embeddings, shortcut layers, weightless norms and head)."""
    text = model.config.get_text_config()
    head_dim = getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads
    group = text.num_attention_heads // text.num_key_value_heads
    layers = _decoder_layers(model)
    widths = layer_widths(model.config)
    biased = set(getattr(model.config, "nirvana_output_biases", None) or ())
    if len(widths) != len(layers):
        raise ValueError(f"config.json lists {len(widths)} layer widths for {len(layers)} decoder layers.")
    dims = hidden_dims(model.config, len(layers))
    for layer, (kv_heads, neurons), (attn_in, attn_out, mlp_in, mlp_out) in zip(layers, widths, dims):
        attn, mlp = layer.self_attn, layer.mlp
        q_out, kv_out = kv_heads * group * head_dim, kv_heads * head_dim
        attn.q_proj = _linear(attn.q_proj, attn_in, q_out)
        attn.k_proj = _linear(attn.k_proj, attn_in, kv_out)
        attn.v_proj = _linear(attn.v_proj, attn_in, kv_out)
        attn.o_proj = _linear(attn.o_proj, q_out, attn_out, "o_proj" in biased)
        mlp.gate_proj = _linear(mlp.gate_proj, mlp_in, neurons)
        mlp.up_proj = _linear(mlp.up_proj, mlp_in, neurons)
        mlp.down_proj = _linear(mlp.down_proj, neurons, mlp_out, "down_proj" in biased)
        for name, value in (("num_heads", kv_heads * group), ("num_key_value_heads", kv_heads)):
            if hasattr(attn, name):
                setattr(attn, name, value)
        if hasattr(mlp, "intermediate_size"):
            mlp.intermediate_size = neurons
    if getattr(model.config, "nirvana_sliced_hidden", None):
        build_sliced_hidden(model, dims)


class HiddenRMSNorm(nn.Module):
    """RMS normalization without a weight, over a residual stream that may be sliced.

    SliceGPT's `RMSN`: the scale of the original norm was folded into the projections that read it,
    and the mean of squares divides by the dense width `mean_dim` whatever the input's width, so a
    rotated, unsliced stream is normalized exactly as before (an orthogonal Q keeps the norm).
    """

    def __init__(self, mean_dim: int, eps: float):
        super().__init__()
        self.mean_dim, self.eps = int(mean_dim), float(eps)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        x = x.float()  # as the stock RMSNorms: statistics in fp32
        variance = x.pow(2).sum(-1, keepdim=True) / self.mean_dim
        return (x * torch.rsqrt(variance + self.eps)).to(dtype)

    def extra_repr(self) -> str:
        return f"mean_dim={self.mean_dim}, eps={self.eps}"


class ShortcutDecoderLayer(GradientCheckpointingLayer):
    """A pre-norm decoder layer whose residual connections are real matrices.

    SliceGPT rotates the residual stream into a different basis before attention, between attention
    and MLP, and after the MLP, and keeps only its leading dimensions, so the skip connection of
    each half maps one basis (and width) to the next: `residual @ attn_shortcut_Q` ([attn_in, attn_out])
    and `residual @ mlp_shortcut_Q` ([mlp_in, mlp_out]). The attention and MLP modules are the
    family's own; only their hidden sides are narrower. A `GradientCheckpointingLayer`, as the
    families' own layers are, so `gradient_checkpointing_enable()` (LoRA recovery) reaches it.
    """

    def __init__(self, layer: nn.Module, dims: tuple[int, int, int, int], mean_dim: int, eps: float):
        super().__init__()
        attn_in, attn_out, mlp_in, mlp_out = dims
        device, dtype = layer.self_attn.o_proj.weight.device, layer.self_attn.o_proj.weight.dtype
        self.self_attn, self.mlp = layer.self_attn, layer.mlp
        self.input_layernorm = HiddenRMSNorm(mean_dim, eps)
        self.post_attention_layernorm = HiddenRMSNorm(mean_dim, eps)
        self.attn_shortcut_Q = nn.Parameter(torch.empty(attn_in, attn_out, device=device, dtype=dtype))
        self.mlp_shortcut_Q = nn.Parameter(torch.empty(mlp_in, mlp_out, device=device, dtype=dtype))
        if hasattr(layer, "attention_type"):  # Qwen-2 / Mistral pick the causal or sliding mask by it
            self.attention_type = layer.attention_type

    def forward(self, hidden_states: torch.Tensor, **kwargs) -> torch.Tensor:
        residual = hidden_states  # (B, T, attn_in)
        attn_out, _ = self.self_attn(hidden_states=self.input_layernorm(hidden_states), **kwargs)
        hidden_states = residual @ self.attn_shortcut_Q + attn_out  # (B, T, attn_out)
        residual = hidden_states
        return residual @ self.mlp_shortcut_Q + self.mlp(self.post_attention_layernorm(hidden_states))


def build_sliced_hidden(model: nn.Module, dims: list[tuple[int, int, int, int]]) -> None:
    """Replace the embeddings, decoder layers, final norm and LM head with SliceGPT's sliced,
    weightless-norm, shortcut-carrying versions (empty: the checkpoint, or the rotation, fills them)."""
    text = model.config.get_text_config()
    sliced = model.config.nirvana_sliced_hidden
    mean_dim, eps = int(sliced["hidden_size"]), float(sliced["eps"])
    layers = _decoder_layers(model)
    for idx, layer in enumerate(list(layers)):
        if not isinstance(layer, ShortcutDecoderLayer):
            layers[idx] = ShortcutDecoderLayer(layer, dims[idx], mean_dim, eps)
    embed = model.get_input_embeddings()
    if embed.embedding_dim != int(sliced["embedding"]):
        model.set_input_embeddings(
            nn.Embedding(
                embed.num_embeddings,
                int(sliced["embedding"]),
                padding_idx=embed.padding_idx,
                device=embed.weight.device,
                dtype=embed.weight.dtype,
            )
        )
    decoder = model.get_decoder()
    decoder.norm = HiddenRMSNorm(mean_dim, eps)
    head = model.get_output_embeddings()
    model.set_output_embeddings(
        nn.Linear(int(sliced["head"]), text.vocab_size, bias=False, device=head.weight.device, dtype=head.weight.dtype)
    )


class _PerLayerWidths:
    """Mixin: build the stock model, then resize its layers to the checkpoint's widths."""

    _auto_class = "AutoModelForCausalLM"  # save_pretrained copies this file and keeps auto_map

    def __init__(self, config, *args, **kwargs):
        super().__init__(config, *args, **kwargs)
        resize_to_config(self)


class NirvanaLlamaForCausalLM(_PerLayerWidths, LlamaForCausalLM):
    pass


class NirvanaMistralForCausalLM(_PerLayerWidths, MistralForCausalLM):
    pass


class NirvanaQwen2ForCausalLM(_PerLayerWidths, Qwen2ForCausalLM):
    pass


class NirvanaQwen3ForCausalLM(_PerLayerWidths, Qwen3ForCausalLM):
    pass


class NirvanaGemmaForCausalLM(_PerLayerWidths, GemmaForCausalLM):
    pass


class NirvanaGemma2ForCausalLM(_PerLayerWidths, Gemma2ForCausalLM):
    pass


class NirvanaGemma3ForCausalLM(_PerLayerWidths, Gemma3ForCausalLM):
    pass


class NirvanaGemma3ForConditionalGeneration(_PerLayerWidths, Gemma3ForConditionalGeneration):
    pass


# model_type -> the class name `auto_map` points at.
CLASS_FOR_MODEL_TYPE = {
    "llama": "NirvanaLlamaForCausalLM",
    "mistral": "NirvanaMistralForCausalLM",
    "qwen2": "NirvanaQwen2ForCausalLM",
    "qwen3": "NirvanaQwen3ForCausalLM",
    "gemma": "NirvanaGemmaForCausalLM",
    "gemma2": "NirvanaGemma2ForCausalLM",
    "gemma3_text": "NirvanaGemma3ForCausalLM",
    "gemma3": "NirvanaGemma3ForConditionalGeneration",
}
