"""Tiny random models of every supported family, for tests, demos and CPU smoke runs.

2 layers, GQA (4 query heads over 2 KV heads), a 64-token vocabulary. Built from configs, so
they need no download.
"""

from __future__ import annotations

import torch
import transformers as tf
from transformers import AutoModelForCausalLM

TINY_FAMILIES = ("llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "gemma3_text")


def tiny_config(family: str = "llama", **overrides):

    common = dict(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=48,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        max_position_embeddings=128,
        tie_word_embeddings=False,
    )
    configs = {
        "llama": lambda: tf.LlamaConfig(**common),
        "mistral": lambda: tf.MistralConfig(**common),
        "qwen2": lambda: tf.Qwen2Config(**common),
        "qwen3": lambda: tf.Qwen3Config(**common),
        "gemma": lambda: tf.GemmaConfig(**common),
        "gemma2": lambda: tf.Gemma2Config(**common, sliding_window=16),
        # head_dim 16 != hidden / heads = 8: catches code that assumes D / Hq.
        "gemma3_text": lambda: tf.Gemma3TextConfig(**{**common, "head_dim": 16}, sliding_window=16),
    }
    # The layer count goes to the constructor (it derives `layer_types` from it); the rest is set after.
    if "num_hidden_layers" in overrides:
        common["num_hidden_layers"] = overrides.pop("num_hidden_layers")
    config = configs[family]()
    for key, value in overrides.items():
        setattr(config, key, value)
    return config


# Tyr-the-Pruner settings a tiny model with a few dozen calibration tokens can take (its defaults read 131k)
TYR_SMALL = {"generations": 2, "offspring": 4, "stage_tokens": [32, 64], "survivors": [2, 1], "kl_topk": 16,
             "min_channels": 4}  # fmt: skip


def tiny_model(family: str = "llama", seed: int = 0, attn_implementation: str = "eager", **overrides):

    config = tiny_config(family, **overrides)
    config._attn_implementation = attn_implementation
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    # Random init gives biases of zero; make them non-trivial so bias slicing is exercised.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                p.normal_(0, 0.1)
    return model.eval()
