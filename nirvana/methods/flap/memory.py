"""FLAP's scoring memory: a no-grad pass through the decoder, one layer's activations at a time.

`flap_statistics` runs the decoder without the lm_head (no logits) under `torch.no_grad`, so
beside the weights only one layer's activations of the micro-batch are alive, plus FLAP's
running statistics (mean, fluctuation and squared norm per o_proj / down_proj input channel, fp32)
and, per sample, the `[T, C]` temporaries of their update; `channel_metrics` then forms one
`[out, in]` fp32 square of a weight at a time.
"""

from __future__ import annotations

from nirvana.guard.memory import ArchSizes, MemoryEstimate, estimate_forward_by_layer
from nirvana.methods.flap.config import FLAPConfig


def flap_memory(model_config, settings: FLAPConfig, **sizes) -> MemoryEstimate:
    """Planned peak (bytes above the weights) of `flap_scores` on `sizes` (samples, seq_len, micro_batch, ...)."""
    est = estimate_forward_by_layer(model_config, **sizes)
    a = ArchSizes.from_config(model_config)
    channels = a.num_heads * a.head_dim + a.intermediate_size  # o_proj and down_proj inputs of one layer
    est.components["channel statistics (fp32)"] = a.num_layers * 3 * channels * 4
    widest = max(a.num_heads * a.head_dim, a.intermediate_size)
    est.components["temporaries (fp32)"] = 3 * sizes["seq_len"] * widest * 4 + a.largest_projection * 4
    return est
