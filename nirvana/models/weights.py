"""Reading a projection's real weight: de-quantized bitsandbytes layers, accelerate-offloaded tensors.

Scoring needs `W` as fp32 whatever the storage; slicing needs the real tensor of an offloaded
parameter (its module attribute sits on `meta` outside its forward).
"""

from __future__ import annotations

import torch
import torch.nn as nn

from nirvana.errors import InvalidInput


def is_quantized_linear(lin: nn.Module) -> bool:
    """True for bitsandbytes 8-bit / 4-bit layers (weights that cannot take a gradient)."""
    return type(lin).__name__ in {"Linear8bitLt", "Linear4bit", "LinearNF4", "LinearFP4"}


def offloaded_weight(lin: nn.Module, name: str) -> torch.Tensor | None:
    """The real tensor of an accelerate-offloaded parameter (its module attribute is on `meta`)."""
    hook = getattr(lin, "_hf_hook", None)
    weights_map = getattr(hook, "weights_map", None)
    if weights_map is None:
        return None
    try:
        return weights_map[name]
    except KeyError:
        return None


def real_parameter(module: nn.Module, name: str) -> torch.Tensor | None:
    """`module.<name>` detached; for accelerate-offloaded modules (parameter on `meta`) the stored
    tensor, moved to the module's execution device. Used by slicing and scoring of offloaded models."""
    param = getattr(module, name, None)
    if param is None:
        return None
    if param.device.type != "meta":
        return param.detach()
    real = offloaded_weight(module, name)
    if real is None:
        raise InvalidInput(f"{type(module).__name__}.{name} is on 'meta' with no offloaded copy; reload the model.")
    device = getattr(getattr(module, "_hf_hook", None), "execution_device", None)
    return real.detach().to(device) if device is not None else real.detach()


def dense_weight(lin: nn.Module) -> torch.Tensor:
    """`W: [out, in]` as fp32 on the weight's device, de-quantizing bitsandbytes layers.

    8-bit (LLM.int8, row-wise absmax): W = CB * SCB[:, None] / 127; CB/SCB sit on the weight
    before the first forward and in `lin.state` after it. 4-bit: `bnb.functional.dequantize_4bit`.
    """
    weight = lin.weight
    kind = type(lin).__name__
    if kind == "Linear8bitLt":
        state = getattr(lin, "state", None)
        scb = getattr(weight, "SCB", None)
        if scb is None and state is not None:
            scb = state.SCB
        if scb is None or weight.dtype != torch.int8:  # has_fp16_weights: a plain float weight
            return weight.detach().float()
        cb = weight.data if state is None or state.CB is None else state.CB
        return cb.float() * (scb.float()[:, None] / 127.0)
    if kind in {"Linear4bit", "LinearNF4", "LinearFP4"}:
        # here, not at the top: bitsandbytes is optional (8-bit/4-bit models only)
        import bitsandbytes.functional as bnbf

        refuse_cpu_repacked_4bit(lin)
        return bnbf.dequantize_4bit(weight.data, weight.quant_state).float().reshape(lin.out_features, -1)
    if weight.device.type == "meta":
        real = offloaded_weight(lin, "weight")
        if real is not None:
            return real.detach().float()
    return weight.detach().float()


def refuse_cpu_repacked_4bit(lin: nn.Module) -> None:
    """Refuse 4-bit layers that bitsandbytes has repacked for CPU inference.

    bitsandbytes repacks 4-bit weights on the first no-grad CPU forward; after that a backward
    is silently wrong (ENVIRONMENT.md), and its own inverse (`_convert_weight_packed_for_cpu_inverse`,
    "best-effort") did not restore the original quantization state here (forward differed by 0.25 on a
    tiny model). So scoring asks for a fresh instance instead of returning wrong scores.
    """
    qs = getattr(lin.weight, "quant_state", None)
    if qs is not None and getattr(qs, "packing_format_for_cpu", False):
        raise InvalidInput(
            "this 4-bit model has run no-grad inference on the CPU, which makes bitsandbytes repack its weights; "
            "gradients through it would be wrong. Load a fresh instance of the model for scoring "
            "(score first, then generate or evaluate)."
        )


def input_device(model: nn.Module) -> torch.device:
    """Where input ids must go: the embedding's device (its execution device when offloaded)."""
    emb = model.get_input_embeddings()
    device = emb.weight.device
    if device.type == "meta":
        hook = getattr(emb, "_hf_hook", None)
        device = torch.device(getattr(hook, "execution_device", None) or "cpu")
    return device
