"""Pruned T5 folders reloaded (safetensors only; never pickle; `save_pruned` writes them), and what `info` says of a T5.

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
from nirvana.pruning.allocation import scope_default_gammas
from nirvana.t5.anatomy import KINDS, kept_units, t5_shape
from nirvana.t5.modeling_t5_sliced import resize_t5_to_config


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


def describe_t5(lm: LoadedModel) -> dict:
    """A T5's facts: both stacks, the FFN kind, the units of each of the five kinds, gamma* of each scope."""
    shape, kept = t5_shape(lm.model), kept_units(lm.model)
    dense = {kind: shape["num_heads"] if k.attention else shape["d_ff"] for kind, k in KINDS.items()}
    pruned = any(n != dense[kind] for kind, row in kept.items() for n in row) or lm.plan is not None
    return {
        "model": lm.name,
        "source": lm.source,
        "model_type": shape["model_type"],
        "architecture": "t5",
        "encoder_layers": shape["encoder_layers"],
        "decoder_layers": shape["decoder_layers"],
        "hidden_size": shape["d_model"],
        "heads": shape["num_heads"],
        "head_dim": shape["d_kv"],
        "d_ff": shape["d_ff"],
        "feed_forward_proj": shape["feed_forward_proj"],
        "gated": shape["gated"],
        "vocab_size": shape["vocab_size"],
        "parameters": shape["total_params"],
        "block_parameters": shape["block_weights"],
        "prunable_units": {kind: sum(row) for kind, row in kept.items()},
        "kept_per_layer": kept if pruned else None,
        "default_gamma": None if pruned else scope_default_gammas(shape),
        "pruned": pruned,
        "dtype": str(next(lm.model.parameters()).dtype).replace("torch.", ""),
        "device": str(next(lm.model.parameters()).device),
        "model_load_seconds": round(lm.load_seconds, 3),
        "import_seconds": round(lm.import_seconds, 3),
    }
