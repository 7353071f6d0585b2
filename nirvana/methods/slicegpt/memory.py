"""SliceGPT's memory: one layer's forward at a time, the signals of the whole batch, one covariance.

`rotate_and_slice` keeps the current layer's inputs and outputs for all N sequences ([N, T, D]
each, model dtype) and their fp64 rotated copies while a projection is rotated, a [D, D] fp64
covariance and its eigenvectors, and the fp64 copy of the largest matrix it rotates (the
embedding [V, D]). It works on a copy of the model (the caller's stays dense): one more set of
the non-block weights (the block weights are replaced, not copied).
"""

from __future__ import annotations

import torch

from nirvana.guard.memory import ArchSizes, MemoryEstimate, dtype_bytes, estimate_forward_by_layer
from nirvana.methods.slicegpt.config import SliceGPTConfig


def slicegpt_memory(model_config, settings: SliceGPTConfig, **sizes) -> MemoryEstimate:
    """Planned peak (bytes above the weights) of `apply_slicegpt` on `sizes` (samples, seq_len, micro_batch, ...)."""
    est = estimate_forward_by_layer(model_config, **sizes)
    a = ArchSizes.from_config(model_config)
    tokens = sizes["samples"] * sizes["seq_len"]
    act = dtype_bytes(sizes.get("dtype") or torch.float32)
    est.components["layer inputs and outputs, all sequences"] = 3 * tokens * a.hidden_size * act
    est.components["fp64 signal copy"] = tokens * a.hidden_size * 8
    est.components["covariance and eigenvectors (fp64)"] = 3 * a.hidden_size * a.hidden_size * 8
    est.components["fp64 embedding rotation"] = 2 * a.vocab_size * a.hidden_size * 8
    est.components["copy of embeddings and head"] = 2 * a.vocab_size * a.hidden_size * act
    return est
