"""FLAP's calibration statistics: per input channel of o_proj and down_proj, forward only.

Transcribes `BiasGPT.add_batch` (lib/layerwrapper.py) as FLAP calls it, one calibration sample
[1, T, C] at a time (lib/prune.py `prune_flap`), with k samples seen before this one:

    mean  <- mean * k / (k + 1) + mean_t(x) / (k + 1)                     (baseline_inp)
    fluc  <- 0                                                     if k = 0
             fluc * (k - 1) / k + sum_t (x - mean)^2 / (k + 1)     otherwise
    norm2 <- norm2 * k / (k + 1) + sum_t x^2 / (k + 1)                    (scaler_inp, WIFN)

`fluc` uses the *updated* mean twice: the reference's `old_baseline_inp` aliases the tensor that
`*=` / `+=` then change in place. FLAP runs the dense layers one at a time on stored inputs and
prunes only after all layers are scored, so the statistics equal those of one dense forward per
sample; here the decoder runs on micro-batches (no lm_head) and each sample is folded in order.
"""

from __future__ import annotations

import torch
import torch.nn as nn

from nirvana.errors import InvalidInput
from nirvana.models.architectures import layer_projections
from nirvana.models.weights import input_device
from nirvana.progress import Progress


class ChannelStats:
    """Running statistics of one projection's input channels `[C]` (fp32)."""

    def __init__(self, channels: int, device):
        self.samples = 0
        self.mean = torch.zeros(channels, device=device)
        self.fluc = torch.zeros(channels, device=device)
        self.norm2 = torch.zeros(channels, device=device)

    def add_sample(self, x: torch.Tensor) -> None:
        """`x: [T, C]`, one calibration sample."""
        x = x.float()
        k = self.samples
        self.mean = self.mean * (k / (k + 1)) + x.mean(0) / (k + 1)
        self.norm2 = self.norm2 * (k / (k + 1)) + x.pow(2).sum(0) / (k + 1)
        if k == 0:
            self.fluc = torch.zeros_like(self.mean)
        else:
            self.fluc = self.fluc * ((k - 1) / k) + (x - self.mean).pow(2).sum(0) / (k + 1)
        self.samples = k + 1


def _decoder(model: nn.Module) -> nn.Module:
    """The module that runs embeddings + decoder layers without the lm_head (logits are not needed)."""
    return getattr(model, "model", model)


def flap_statistics(
    model: nn.Module, input_ids: torch.Tensor, micro_batch: int = 0, progress: Progress = None
) -> list[dict[str, ChannelStats]]:
    """Per layer, {"o_proj": stats [Hq d], "down_proj": stats [I]} over `input_ids: [N, T]` in order."""
    n = input_ids.shape[0]
    if n < 2:
        raise InvalidInput("flap needs at least 2 calibration samples (its variance ignores the first one's spread).")
    micro_batch = micro_batch or n
    stats: dict[nn.Module, ChannelStats] = {}
    names: list[tuple[int, str, nn.Module]] = []
    for layer_idx, proj in enumerate(layer_projections(model)):
        for name in ("o_proj", "down_proj"):
            lin = getattr(proj, name)
            stats[lin] = ChannelStats(lin.in_features, lin.weight.device)
            names.append((layer_idx, name, lin))

    def hook(module, args, _out):
        x = args[0].detach()  # (n, T, C)
        for sample in x:
            stats[module].add_sample(sample)

    handles = [lin.register_forward_hook(hook) for _, _, lin in names]
    try:
        with torch.no_grad():
            for start in range(0, n, micro_batch):
                chunk = input_ids[start : start + micro_batch].to(input_device(model))
                _decoder(model)(input_ids=chunk, use_cache=False)
                if progress:
                    done = min(start + micro_batch, n)
                    progress(0.9 * done / n, f"forward {done}/{n} (no backward)")
    finally:  # hooks are global state: always removed
        for h in handles:
            h.remove()
    out: list[dict[str, ChannelStats]] = [{} for _ in range(len(names) // 2)]
    for layer_idx, name, lin in names:
        out[layer_idx][name] = stats[lin]
    return out
