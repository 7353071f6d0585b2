"""A model's content fingerprint: which weights a cached score, plan or evaluation belongs to.

The fingerprint hashes the config (shapes, dtype) and a strided sample of every parameter, so
two checkpoints of one architecture never share cached scores, while hashing stays fast for
billion-parameter models (a few thousand values per tensor, not all of them). Weights that
accelerate offloaded (on `meta` outside forward) are sampled from their store.
"""

from __future__ import annotations

import hashlib
import json

import torch

from nirvana.models.weights import offloaded_weight

_VOLATILE = {"_name_or_path", "transformers_version", "_commit_hash", "architectures", "quantization_config"}
_SAMPLES = 2048


def model_fingerprint(model: torch.nn.Module) -> str:
    h = hashlib.sha256()
    cfg = {k: v for k, v in model.config.to_dict().items() if k not in _VOLATILE}
    h.update(json.dumps(cfg, sort_keys=True, default=str).encode())
    for name, p in model.state_dict().items():
        h.update(name.encode() + str(tuple(p.shape)).encode() + str(p.dtype).encode())
        if p.device.type == "meta":
            p = _offloaded(model, name)
        if p is None or p.numel() == 0:
            continue
        flat = p.detach().reshape(-1)
        step = max(1, flat.numel() // _SAMPLES)
        sample = flat[::step][:_SAMPLES].to("cpu")
        if sample.dtype == torch.bfloat16:
            sample = sample.float()
        h.update(sample.contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


def _offloaded(model: torch.nn.Module, name: str) -> torch.Tensor | None:
    """The stored tensor behind an accelerate-offloaded (meta) entry, so offloaded and resident
    loads of one checkpoint share a fingerprint; None when there is no stored copy."""

    prefix, _, attr = name.rpartition(".")
    try:
        module = model.get_submodule(prefix)
    except AttributeError:
        return None
    return offloaded_weight(module, attr)
