"""Reload pruned T5 models (safetensors only; never pickle); `save_pruned` writes them.

The encoder-decoder counterpart of `nirvana.checkpoints.pruned`. A pruned T5 folder holds the
sliced weights, the tokenizer, `plan.json` (a T5's `PruningPlan`) and a `config.json` whose global sizes
stay the dense model's, with the kept heads and FFN widths of every layer added
(`nirvana_t5_kept_heads`, `nirvana_t5_ffn_widths`), plus `modeling_t5_sliced.py` and `auto_map`
for stock transformers. `load_t5_pruned` builds the dense skeleton without allocating weights,
resizes it with the same code the folder ships (`resize_t5_to_config`), and assigns the tensors.
"""

from __future__ import annotations

import time
from pathlib import Path

import torch
from accelerate import init_empty_weights
from transformers import AutoTokenizer, T5ForConditionalGeneration

from nirvana.checkpoints.loaded import LoadedModel, read_plan
from nirvana.errors import CorruptCheckpoint
from nirvana.models.modeling_t5_sliced import resize_t5_to_config


def load_t5_pruned(directory: Path, config, state: dict[str, torch.Tensor], *, dtype=None, device: str = "cpu"):
    """Rebuild a pruned T5 from its folder's config and tensors (read by the caller); a `LoadedModel`."""
    start = time.perf_counter()
    with init_empty_weights(include_buffers=False):
        model = T5ForConditionalGeneration(config)
    try:
        resize_t5_to_config(model)
    except ValueError as exc:
        raise CorruptCheckpoint(f"config.json in {str(directory)!r} does not describe its layers: {exc}") from exc
    try:
        result = model.load_state_dict(state, strict=False, assign=True)
    except RuntimeError as exc:
        mismatch = next((line.strip() for line in str(exc).splitlines() if "size mismatch" in line), str(exc)[:300])
        raise CorruptCheckpoint(
            f"weights in {str(directory)!r} do not match the widths in its config.json: {mismatch}; re-save the model."
        ) from exc
    if result.unexpected_keys:
        raise CorruptCheckpoint(f"unexpected tensors in {str(directory)!r}: {result.unexpected_keys[:5]}")
    model.tie_weights()
    missing = [n for n, p in model.named_parameters() if p.device.type == "meta"]
    if missing:
        raise CorruptCheckpoint(f"{str(directory)!r} is missing tensors: {missing[:5]}")
    if dtype is not None:
        model.to(dtype)
    model.to(device).eval()
    plan = read_plan(directory)
    tokenizer = AutoTokenizer.from_pretrained(directory)
    return LoadedModel(model, tokenizer, str(directory), "pruned", time.perf_counter() - start, [], plan)
