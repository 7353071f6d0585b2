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
"""

from __future__ import annotations

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
        "config.json has no per-layer widths (nirvana_layer_shapes, or modified_head_num and "
        "modified_intermediate_dimension): this is not a pruned checkpoint."
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


def resize_to_config(model: nn.Module) -> None:
    """Give every decoder layer the projection widths stored in `model.config`."""
    text = model.config.get_text_config()
    head_dim = getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads
    group = text.num_attention_heads // text.num_key_value_heads
    hidden = text.hidden_size
    layers = _decoder_layers(model)
    widths = layer_widths(model.config)
    biased = set(getattr(model.config, "nirvana_output_biases", None) or ())
    if len(widths) != len(layers):
        raise ValueError(f"config.json lists {len(widths)} layer widths for {len(layers)} decoder layers.")
    for layer, (kv_heads, neurons) in zip(layers, widths):
        attn, mlp = layer.self_attn, layer.mlp
        q_out, kv_out = kv_heads * group * head_dim, kv_heads * head_dim
        attn.q_proj = _linear(attn.q_proj, hidden, q_out)
        attn.k_proj = _linear(attn.k_proj, hidden, kv_out)
        attn.v_proj = _linear(attn.v_proj, hidden, kv_out)
        attn.o_proj = _linear(attn.o_proj, q_out, hidden, "o_proj" in biased)
        mlp.gate_proj = _linear(mlp.gate_proj, hidden, neurons)
        mlp.up_proj = _linear(mlp.up_proj, hidden, neurons)
        mlp.down_proj = _linear(mlp.down_proj, neurons, hidden, "down_proj" in biased)
        for name, value in (("num_heads", kv_heads * group), ("num_key_value_heads", kv_heads)):
            if hasattr(attn, name):
                setattr(attn, name, value)
        if hasattr(mlp, "intermediate_size"):
            mlp.intermediate_size = neurons


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
