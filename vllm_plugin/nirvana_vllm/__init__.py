"""vLLM model classes for the folders `python -m nirvana prune --out DIR` writes (`DIR/model`).

A pruned layer keeps its own KV groups, each with its G query heads, and its own MLP width; vLLM's stock
classes build every layer at the config's global widths. These classes build each decoder layer from a copy
of the config carrying that layer's widths (`widths.layer_config`); everything else is vLLM's own layer.
vLLM sizes each layer's KV cache from its own head count, so nothing is padded.

vLLM calls `register` in every process it starts (the `vllm.general_plugins` entry point); the classes are
registered by name ("module:Class") and imported only when a folder asks for them, through
`--hf-overrides '{"architectures": ["NirvanaLlamaForCausalLM"]}'` (what `python -m nirvana serve` passes:
the folder's config.json keeps its stock architecture for every other tool).

`ARCHITECTURES` (model_type -> the name to ask for) is the table `nirvana.export.serve` reads too; a test
checks that the two agree.
"""

ARCHITECTURES = {
    "llama": "NirvanaLlamaForCausalLM",
    "mistral": "NirvanaMistralForCausalLM",
    "qwen2": "NirvanaQwen2ForCausalLM",
    "gemma3_text": "NirvanaGemma3ForCausalLM",
}
CLASSES = {
    "NirvanaLlamaForCausalLM": "nirvana_vllm.llama:NirvanaLlamaForCausalLM",
    "NirvanaMistralForCausalLM": "nirvana_vllm.llama:NirvanaLlamaForCausalLM",  # Mistral is Llama's layer in vLLM
    "NirvanaQwen2ForCausalLM": "nirvana_vllm.llama:NirvanaLlamaForCausalLM",  # vLLM's Qwen2 ignores head_dim
    "NirvanaGemma3ForCausalLM": "nirvana_vllm.gemma3:NirvanaGemma3ForCausalLM",
}


def register() -> None:
    """Register the classes with vLLM (idempotent: vLLM calls it in each of its processes)."""
    from vllm import ModelRegistry

    known = set(ModelRegistry.get_supported_archs())
    for name, where in CLASSES.items():
        if name not in known:
            ModelRegistry.register_model(name, where)
