"""FLAP's scores: the fluctuation metric per channel, standardized, averaged per unit.

lib/prune.py `prune_flap` with structure AL-AM:

    WIFV  = fluc * sum over rows of W^2         (o_proj: W [D, Hq d]; down_proj: W [D, I])
    attention metric = WIFV(o_proj) ** 2 ;  MLP metric = WIFV(down_proj)
    standardize each layer's vector: (x - mean) / std            (torch.std, unbiased)
    attention: mean over each head's channels                    (reshape(L, -1, 128).mean(2))

For GQA the attention unit is a KV group: the mean runs over the g d channels of its query heads
(the o_proj columns that go with it), equal to the mean of its heads' scores. The reference's
hard-coded 128 is the model's own head_dim.
"""

from __future__ import annotations

import torch

from nirvana.methods.flap.config import FLAPConfig
from nirvana.methods.flap.statistics import ChannelStats, flap_statistics
from nirvana.models.architectures import layer_projections
from nirvana.models.shapes import model_shape
from nirvana.models.weights import dense_weight
from nirvana.progress import Progress

# metric(stats, W [out, in]) -> [in]; lib/prune.py `metrics`.
METRIC_FUNCTIONS = {
    "IFV": lambda st, w: st.fluc,
    "WIFV": lambda st, w: st.fluc * w.pow(2).sum(0),
    "WIFN": lambda st, w: (w.abs() * st.norm2.sqrt()[None, :]).mean(0),
}


def standardize(x: torch.Tensor) -> torch.Tensor:
    """Per row: (x - mean) / std, as the reference's `standarlization` (std with Bessel's correction)."""
    return (x - x.mean(dim=1, keepdim=True)) / x.std(dim=1, keepdim=True)


def channel_metrics(
    model, layer_stats: list[dict[str, ChannelStats]], metric: str
) -> tuple[torch.Tensor, torch.Tensor]:
    """(attention metric [L, Hq d], MLP metric [L, I]), before standardization."""
    fn = METRIC_FUNCTIONS[metric]
    attn, mlp = [], []
    for proj, st in zip(layer_projections(model), layer_stats):
        attn.append(fn(st["o_proj"], dense_weight(proj.o_proj)).pow(2).cpu())
        mlp.append(fn(st["down_proj"], dense_weight(proj.down_proj)).cpu())
    return torch.stack(attn), torch.stack(mlp)


def flap_scores(model, batch, config: FLAPConfig, micro_batch: int = 0, progress: Progress = None):
    """(attn [L, Hkv], mlp [L, I], extra with the mean inputs the bias compensation needs)."""
    shape = model_shape(model)
    layer_stats = flap_statistics(model, batch.input_ids, micro_batch, progress)
    attn_metric, mlp_metric = channel_metrics(model, layer_stats, config.metric)
    g, d, hkv = shape.group_size, shape.head_dim, shape.num_kv_heads[0]
    attn = standardize(attn_metric).reshape(shape.num_layers, hkv, g * d).mean(dim=2)  # (L, Hkv)
    mlp = standardize(mlp_metric)  # (L, I)
    extra = {
        "attn_mean_inp": torch.stack([st["o_proj"].mean.cpu() for st in layer_stats]),  # (L, Hq d)
        "mlp_mean_inp": torch.stack([st["down_proj"].mean.cpu() for st in layer_stats]),  # (L, I)
    }
    return attn, mlp, extra
