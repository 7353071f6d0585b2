"""The inputs of a decoder's layers, captured from the model's own forward: what a method that works layer by
layer on calibration activations starts from (reconstruction, Tyr-the-Pruner's supernet, SliceGPT's rotation).

`layer_inputs` returns the first layer's hidden states per micro-batch and, for every layer, the other
arguments the decoder passes it (attention masks, rotary tables). Those do not depend on the hidden states,
but they can differ between layers (Gemma-3's local and global layers get different masks and rotary
tables), so each layer's are recorded. The forward stops before the last layer runs. Example:
    >>> hidden, kwargs = layer_inputs(model, batch.input_ids, micro_batch=8)
    >>> for i, layer in enumerate(decoder_layers(model)):
    ...     hidden = [first_output(layer(h, **kw)) for h, kw in zip(hidden, kwargs[i])]
"""

from __future__ import annotations

import contextlib

import torch
import torch.nn as nn

from nirvana.models.architectures import decoder_layers
from nirvana.models.weights import input_device


class _Stop(Exception):
    """Raised by the last layer's pre-hook once every layer's arguments are recorded: the rest is not needed."""


def layer_inputs(model: nn.Module, ids: torch.Tensor, micro_batch: int) -> tuple[list, list]:
    """(hidden states [b, T, D] of the first decoder layer per micro-batch, [layer][micro-batch] -> that layer's
    keyword arguments without the hidden states), from one forward per micro-batch stopped at the last layer."""
    layers = decoder_layers(model)
    hidden, kwargs = [], [[] for _ in layers]

    def first(module, args, kw):
        hidden.append(args[0] if args else kw["hidden_states"])

    def record(i):
        def hook(module, args, kw):
            kwargs[i].append({k: v for k, v in kw.items() if k != "hidden_states"})
            if i == len(layers) - 1:
                raise _Stop
            return None

        return hook

    handles = [layers[0].register_forward_pre_hook(first, with_kwargs=True)]
    handles += [layer.register_forward_pre_hook(record(i), with_kwargs=True) for i, layer in enumerate(layers)]
    try:
        for chunk in ids.split(micro_batch):
            with contextlib.suppress(_Stop):
                model(input_ids=chunk.to(input_device(model)), use_cache=False)
    finally:  # hooks are global state: always removed
        for h in handles:
            h.remove()
    return hidden, kwargs


def first_output(out):
    """A decoder layer's hidden states, whether it returns a tensor or a tuple."""
    return out[0] if isinstance(out, tuple) else out


__all__ = ["first_output", "layer_inputs"]
