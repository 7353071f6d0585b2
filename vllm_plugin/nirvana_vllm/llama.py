"""Llama, Mistral and Qwen2 with per-layer widths: vLLM's `LlamaForCausalLM` with a decoder layer built from
its own widths (`widths.layer_config`).

Qwen2 runs through this class too: it is Llama's layer with q/k/v biases, and vLLM's own Qwen2 class derives
head_dim from hidden_size / heads, which a pruned layer no longer satisfies. FLAP's compensation: an o_proj
bias (`attention_bias`, with q/k/v's own bias kept apart by `qkv_bias`) and a down_proj bias (an MLP whose
down projection alone has one; gate and up have none in the checkpoint).
"""

from __future__ import annotations

from torch import nn
from vllm.config import VllmConfig
from vllm.model_executor.layers.activation import SiluAndMul
from vllm.model_executor.layers.linear import MergedColumnParallelLinear, RowParallelLinear
from vllm.model_executor.models.llama import LlamaDecoderLayer, LlamaForCausalLM

from nirvana_vllm.widths import layer_config, layer_index, output_biases


class DownBiasMLP(nn.Module):
    """The gated MLP with a bias on down_proj alone (FLAP's compensation)."""

    def __init__(self, hidden_size: int, intermediate_size: int, quant_config=None, prefix: str = ""):
        super().__init__()
        self.gate_up_proj = MergedColumnParallelLinear(
            hidden_size, [intermediate_size] * 2, bias=False, quant_config=quant_config, prefix=f"{prefix}.gate_up_proj"
        )
        self.down_proj = RowParallelLinear(
            intermediate_size, hidden_size, bias=True, quant_config=quant_config, prefix=f"{prefix}.down_proj"
        )
        self.act_fn = SiluAndMul()

    def forward(self, x):
        x, _ = self.gate_up_proj(x)
        x, _ = self.down_proj(self.act_fn(x))
        return x


class NirvanaLlamaDecoderLayer(LlamaDecoderLayer):
    """vLLM's Llama layer at this layer's own widths."""

    def __init__(self, vllm_config: VllmConfig, prefix: str = "", config=None, **kwargs):
        config = config or vllm_config.model_config.hf_config
        own = layer_config(config, layer_index(prefix))
        biases = output_biases(config)
        dense_bias = bool(getattr(config, "attention_bias", False))  # a Llama trained with q/k/v/o biases
        own.qkv_bias = dense_bias or config.model_type == "qwen2"
        own.attention_bias = dense_bias or "o_proj" in biases  # vLLM's Llama: bias_o_proj follows attention_bias
        super().__init__(vllm_config=vllm_config, prefix=prefix, config=own, **kwargs)
        if "down_proj" in biases:
            quant = self.get_quant_config(vllm_config)
            self.mlp = DownBiasMLP(config.hidden_size, own.intermediate_size, quant, prefix=f"{prefix}.mlp")


class NirvanaLlamaForCausalLM(LlamaForCausalLM):
    def __init__(self, *, vllm_config: VllmConfig, prefix: str = "", layer_type=NirvanaLlamaDecoderLayer):
        super().__init__(vllm_config=vllm_config, prefix=prefix, layer_type=layer_type)
