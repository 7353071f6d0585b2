"""Architecture knowledge as a data table keyed by `model_type`.

Everything the engine needs to know about a decoder-only family lives in one `Architecture`
row: where the decoder layers are and what the attention and MLP projections are called.
Adding a family that follows the Llama layout is one row, not a new code path.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch.nn as nn

from nirvana.errors import UnsupportedArchitecture


@dataclass(frozen=True)
class Architecture:
    """Where the prunable projections live in one model family.

    `layers` is a dotted path from the `*ForCausalLM` module to the `nn.ModuleList` of decoder
    layers. Projection names are relative to a layer's `attn` / `mlp` submodule.
    """

    layers: str = "model.layers"
    attn: str = "self_attn"
    q_proj: str = "q_proj"
    k_proj: str = "k_proj"
    v_proj: str = "v_proj"
    o_proj: str = "o_proj"
    mlp: str = "mlp"
    gate_proj: str = "gate_proj"
    up_proj: str = "up_proj"
    down_proj: str = "down_proj"
    tested: str = ""  # how this row was verified, shown by `nirvana info`


ARCHITECTURES: dict[str, Architecture] = {
    "llama": Architecture(tested="SmolLM2-135M (real weights) and tiny random LlamaConfig"),
    "mistral": Architecture(tested="tiny random MistralConfig"),
    "qwen2": Architecture(tested="tiny random Qwen2Config (q/k/v biases)"),
    "qwen3": Architecture(tested="tiny random Qwen3Config (q/k norms)"),
    "gemma": Architecture(tested="tiny random GemmaConfig"),
    "gemma2": Architecture(tested="tiny random Gemma2Config"),
    "gemma3_text": Architecture(tested="tiny random Gemma3TextConfig (head_dim != D / Hq)"),
    # Gemma-3 multimodal checkpoints: the text decoder sits under `model.language_model`.
    "gemma3": Architecture(
        layers="model.language_model.layers",
        tested="tiny random Gemma3Config with a vision tower (score, slice, save, reload)",
    ),
}


def supported_model_types() -> list[str]:
    return sorted(ARCHITECTURES)


def get_architecture(model_or_config) -> Architecture:
    """Return the table row for a model or config; raise `UnsupportedArchitecture` otherwise."""
    config = getattr(model_or_config, "config", model_or_config)
    model_type = getattr(config, "model_type", None)
    if model_type in ARCHITECTURES:
        return ARCHITECTURES[model_type]
    hint = ""
    if getattr(config, "is_encoder_decoder", False) or model_type in {"bert", "roberta", "t5", "bart", "deberta"}:
        hint = " It is not a decoder-only LM."
    raise UnsupportedArchitecture(
        f"model_type {model_type!r} is not supported.{hint} Supported: {', '.join(supported_model_types())}. "
        "To add a family with the Llama layout, add a row to nirvana.models.architectures.ARCHITECTURES."
    )


def _get(module: nn.Module, dotted: str) -> nn.Module:
    for part in dotted.split("."):
        module = getattr(module, part)
    return module


@dataclass
class LayerProjections:
    """The seven prunable `nn.Linear` modules of one decoder layer, plus their parents."""

    attn: nn.Module
    mlp: nn.Module
    q_proj: nn.Linear
    k_proj: nn.Linear
    v_proj: nn.Linear
    o_proj: nn.Linear
    gate_proj: nn.Linear
    up_proj: nn.Linear
    down_proj: nn.Linear

    def named_linears(self) -> dict[str, nn.Linear]:
        return {name: getattr(self, name) for name in LINEAR_NAMES}


LINEAR_NAMES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def decoder_layers(model: nn.Module) -> nn.ModuleList:
    """The `nn.ModuleList` of decoder layers, in order (replace an entry to swap one; FSDP shards them one by one)."""
    return _get(model, get_architecture(model).layers)


def layer_projections(model: nn.Module) -> list[LayerProjections]:
    """One `LayerProjections` per decoder layer, in order."""
    arch = get_architecture(model)
    out = []
    for layer in _get(model, arch.layers):
        attn, mlp = _get(layer, arch.attn), _get(layer, arch.mlp)
        out.append(
            LayerProjections(
                attn=attn,
                mlp=mlp,
                q_proj=_get(attn, arch.q_proj),
                k_proj=_get(attn, arch.k_proj),
                v_proj=_get(attn, arch.v_proj),
                o_proj=_get(attn, arch.o_proj),
                gate_proj=_get(mlp, arch.gate_proj),
                up_proj=_get(mlp, arch.up_proj),
                down_proj=_get(mlp, arch.down_proj),
            )
        )
    return out


def text_config(config):
    """The decoder's config (multimodal configs nest it under `text_config`)."""
    return getattr(config, "text_config", None) or config
