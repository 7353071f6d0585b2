"""Activation checkpointing of the decoder layers: each layer's activations recomputed in the backward pass.

Non-reentrant `torch.utils.checkpoint` around every decoder layer's `forward`, in any mode (the model
stays in eval mode: no dropout, the same values). The backward pass then keeps each layer's input
hidden state instead of all its activations, and recomputes one layer at a time: about one more
forward pass for a fraction of the memory. Run the model with `use_cache=False` (the scorers do): a
recompute would write a KV cache twice.
"""

from __future__ import annotations

import contextlib
import functools

import torch.nn as nn
from torch.utils.checkpoint import checkpoint as _checkpoint

from nirvana.models.architectures import decoder_layers


def checkpoint_layers(model: nn.Module) -> None:
    """Wrap every decoder layer's forward for good (a model that is used once, e.g. sharded by FSDP)."""
    for layer in decoder_layers(model):
        forward = layer.forward
        layer.forward = functools.wraps(forward)(functools.partial(_checkpoint, forward, use_reentrant=False))


@contextlib.contextmanager
def checkpointed(model: nn.Module, enabled: bool = True):
    """`checkpoint_layers` for the duration of the block; the layers' own forwards are restored after."""
    if not enabled:
        yield model
        return
    layers = list(decoder_layers(model))
    saved = [layer.__dict__.get("forward") for layer in layers]  # an instance attribute, or None (the class's)
    checkpoint_layers(model)
    try:
        yield model
    finally:
        for layer, forward in zip(layers, saved):
            if forward is None:
                del layer.forward
            else:
                layer.forward = forward
