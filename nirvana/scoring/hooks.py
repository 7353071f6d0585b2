"""Gradient saliency |dF/dW * W| without weight gradients: dW is formed from hooks.

Autograd scoring (`nirvana.scoring.criteria.gradient_saliency`) gives every block weight a `.grad`
buffer. Here no weight requires grad; instead each projection saves its input `x: [n, T, in]`
in a forward hook and, when the gradient of its output `g: [n, T, out]` arrives in backward,
forms

    dW = einsum("bto,bti->oi", g, x)         # [out, in], fp32
    db = g.sum over (b, t)                   # [out]

and reduces `|dW * W|` (+ `|db * b|` for q/k/v/gate/up biases) to the unit-axis vector at once
(`nirvana.scoring.units.reduce_to_axis`), so only one `[out, in]` temporary exists at a time. That is
what lets scoring run on bitsandbytes 8-bit / 4-bit models (whose weights cannot take a
gradient; `W` is de-quantized for the product) and on accelerate-offloaded models (whose
weights live on `meta` outside their forward).

Micro-batches: |sum of dW| != sum of |dW|, so to equal the autograd result exactly, dW is
accumulated in fp32 per projection across micro-batches and reduced after the last one. With
a single batch (the default) no accumulator is ever allocated; with k > 1 micro-batches the
accumulators cost 4 bytes per block weight, like fp32 `.grad` buffers.

For backward to reach the first layer, the input embeddings' output is made to require grad
(a forward hook), which works for every family, including those that scale embeddings.
"""

from __future__ import annotations

import contextlib
import math

import torch
import torch.nn as nn

from nirvana.errors import InvalidInput
from nirvana.models.architectures import layer_projections
from nirvana.models.weights import (
    dense_weight,
    input_device,
    is_quantized_linear,
    offloaded_weight,
    refuse_cpu_repacked_4bit,
)
from nirvana.progress import Progress
from nirvana.scoring.objectives import forward_objective
from nirvana.scoring.units import reduce_to_axis

# Projections whose bias belongs to the unit axis (rows); o/down biases are per output feature.
_ROW_BIAS = ("q_proj", "k_proj", "v_proj", "gate_proj", "up_proj")


def _dense_bias(lin: nn.Module) -> torch.Tensor | None:
    bias = lin.bias
    if bias is None:
        return None
    if bias.device.type == "meta":
        real = offloaded_weight(lin, "bias")
        if real is not None:
            return real.detach().float()
    return bias.detach().float()


@contextlib.contextmanager
def _no_weight_grads(model: nn.Module):
    """No parameter requires grad; the embedding output does, so backward reaches layer 0."""
    saved = {p: p.requires_grad for p in model.parameters()}

    def embed_hook(_module, _args, output):
        return output.requires_grad_(True) if not output.requires_grad else output

    handle = model.get_input_embeddings().register_forward_hook(embed_hook)
    try:
        for p in model.parameters():
            if p.requires_grad:
                p.requires_grad_(False)
        yield
    finally:
        handle.remove()
        for p, flag in saved.items():
            if flag:
                p.requires_grad_(True)


class _Collector:
    """Holds the forward/backward hooks of one scoring pass and their per-projection results."""

    def __init__(self, model: nn.Module, num_chunks: int):
        self.num_chunks = num_chunks
        self.chunk = 0  # index of the micro-batch being run
        self.names: dict[nn.Module, str] = {}
        self.accum: dict[nn.Module, tuple[torch.Tensor, torch.Tensor | None]] = {}  # (dW [out, in], db [out])
        self.vectors: dict[nn.Module, torch.Tensor] = {}  # unit-axis vector, CPU fp32
        self.projections = layer_projections(model)
        for proj in self.projections:
            for name, lin in proj.named_linears().items():
                self.names[lin] = name
                if is_quantized_linear(lin):
                    refuse_cpu_repacked_4bit(lin)

    @contextlib.contextmanager
    def hooks(self):
        handles = [lin.register_forward_hook(self._forward_hook) for lin in self.names]
        try:
            yield
        finally:  # hooks are global state: always removed
            for h in handles:
                h.remove()

    def _forward_hook(self, module, args, output):
        if not torch.is_tensor(output) or not output.requires_grad:
            return
        x = args[0].detach()  # (n, T, in); a reference, not a copy, kept until backward
        output.register_hook(lambda grad_out: self._on_grad(module, x, grad_out))

    def _on_grad(self, module, x: torch.Tensor, grad_out: torch.Tensor) -> None:
        g = grad_out.detach().float().reshape(-1, grad_out.shape[-1])  # (n*T, out)
        xs = x.to(g.device, torch.float32).reshape(-1, x.shape[-1])  # (n*T, in)
        dw = g.t() @ xs  # (out, in) == einsum("bto,bti->oi")
        db = g.sum(0) if module.bias is not None else None  # (out,)
        del g, xs
        if module in self.accum:
            prev_w, prev_b = self.accum.pop(module)
            dw = dw + prev_w.to(dw.device)
            db = db + prev_b.to(db.device) if db is not None else None
        if self.chunk < self.num_chunks - 1:
            self.accum[module] = (dw, db)
            return
        self.vectors[module] = self._reduce(module, dw, db)

    def _reduce(self, module, dw: torch.Tensor, db: torch.Tensor | None) -> torch.Tensor:
        name = self.names[module]
        w = dense_weight(module).to(dw.device)
        vec = reduce_to_axis(name, (dw * w).abs_())
        bias = _dense_bias(module)
        if db is not None and bias is not None and name in _ROW_BIAS:
            vec = vec + (db * bias.to(db.device)).abs()
        return vec.cpu()

    def layers(self) -> list[dict[str, torch.Tensor]]:
        missing = [self.names[lin] for lin in self.names if lin not in self.vectors]
        if missing:
            raise RuntimeError(f"no gradient reached {len(missing)} projections (first: {missing[0]}).")
        return [{name: self.vectors[lin] for name, lin in proj.named_linears().items()} for proj in self.projections]


def hook_saliency(
    model: nn.Module, input_ids: torch.Tensor, objective, micro_batch: int = 0, progress: Progress = None
) -> list[dict[str, torch.Tensor]]:
    """Per-layer unit-axis vectors of |dObjective/dW * W| (+ bias terms), from hooks, no `.grad`.

    Same contract and result as `nirvana.scoring.criteria.gradient_saliency`: `input_ids: [N, T]`,
    `objective(logits [n, T, V], ids [n, T], N) -> scalar` summing over micro-batches to the
    full-batch objective; returns one `{proj_name: vector}` per layer, vectors on CPU in fp32.
    """
    n = input_ids.shape[0]
    micro_batch = micro_batch or n
    num_chunks = math.ceil(n / micro_batch)
    device = input_device(model)
    collector = _Collector(model, num_chunks)
    with _no_weight_grads(model), collector.hooks():
        for i, start in enumerate(range(0, n, micro_batch)):
            collector.chunk = i
            chunk = input_ids[start : start + micro_batch].to(device)
            loss = forward_objective(model, chunk, objective, n)
            loss.backward()
            del loss
            if progress:
                done = min(start + micro_batch, n)
                progress(0.9 * done / n, f"forward+backward (hooks) {done}/{n}")
    return collector.layers()


METHODS = ("auto", "autograd", "hooks")


def needs_hooks(model: nn.Module) -> str | None:
    """Why autograd `.grad` scoring cannot work on `model` (quantized or offloaded weights), else None."""
    for proj in layer_projections(model):
        for name, lin in proj.named_linears().items():
            if is_quantized_linear(lin):
                return f"{name} is a bitsandbytes {type(lin).__name__} (its weights take no gradient)"
            if lin.weight.device.type == "meta":
                return f"{name} is offloaded by accelerate (its weight is on 'meta' outside forward)"
    return None


def resolve_method(model: nn.Module, method: str = "auto") -> str:
    """`auto` -> "hooks" for quantized or offloaded models, else "autograd" (the reference path)."""

    if method not in METHODS:
        raise InvalidInput(f"saliency method {method!r} is not supported; use one of {', '.join(METHODS)}.")
    reason = needs_hooks(model)
    if method == "auto":
        return "hooks" if reason else "autograd"
    if method == "autograd" and reason:
        raise InvalidInput(f"method 'autograd' cannot score this model: {reason}. Use method='hooks' (or 'auto').")
    return method
