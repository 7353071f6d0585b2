"""Gemma-3 (text) with per-layer widths.

vLLM's `Gemma3Model` builds its layers through `make_layers(..., lambda prefix: Gemma3DecoderLayer(config,
...))`, reading the class from its module when each layer is made, and it is wrapped for torch.compile, so a
subclass cannot replace its constructor. While this model is constructed, that name builds each layer from a
copy of the config with the layer's own widths (`widths.layer_config`), and is put back afterwards; layers
cannot be rebuilt later (vLLM registers each attention layer's name once). The sliding and full layers keep
their own attention from `layer_types`, as in the stock class. FLAP's output biases are refused before this
(`nirvana.export.serve`): Gemma-3's layer has no bias switch for o_proj or down_proj alone.
"""

from __future__ import annotations

import threading

from vllm.config import VllmConfig
from vllm.model_executor.models import gemma3

from nirvana_vllm.widths import layer_config, layer_index

_BUILDING = threading.Lock()  # the module name is swapped for one construction at a time


class NirvanaGemma3ForCausalLM(gemma3.Gemma3ForCausalLM):
    def __init__(self, *, vllm_config: VllmConfig, prefix: str = ""):
        stock = gemma3.Gemma3DecoderLayer

        def at_own_widths(config, cache_config, quant_config, prefix=""):
            return stock(layer_config(config, layer_index(prefix)), cache_config, quant_config, prefix=prefix)

        with _BUILDING:
            gemma3.Gemma3DecoderLayer = at_own_widths
            try:
                super().__init__(vllm_config=vllm_config, prefix=prefix)
            finally:
                gemma3.Gemma3DecoderLayer = stock
