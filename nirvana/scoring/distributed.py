"""Gradient scores of one model sharded over several processes with FSDP2, equal to one process's.

    torchrun --nproc-per-node 8 -m nirvana score --model meta-llama/Llama-3.1-70B --distributed --out s.safetensors

Every rank loads the model, `fully_shard`s each decoder layer and then the root (PyTorch FSDP2:
each rank keeps 1/world of every layer's weights and gradients; a layer's weights are gathered
only while it runs), and takes its contiguous share of the calibration batch. Each backward
reduce-scatters the gradients (FSDP's average of objectives scaled by the world size: their sum),
so after the last micro-batch every rank holds its rows of dF/dW for the whole batch, the
gradient one process would have.

The saliency |dF/dW * W| is elementwise, so each rank computes it on its own rows. The unit sums
(`nirvana.scoring.units`) are then completed across ranks: a row-owned vector (q/k/v/gate/up,
one entry per output row) is gathered from the rows each rank owns; a column-owned vector
(o/down, summed over output rows) is the all-reduced sum of each rank's partial column sums.
Every rank ends with the same [L, Hkv] and [L, I] scores; rank 0 writes them.

Only the gradient criteria need this (nirvana, taylor): the others need no backward pass and run
on one device or through `device_map`.

`checkpoint=True` (`--activation-checkpointing`) recomputes each decoder layer's activations in
the backward pass instead of keeping them (`torch.utils.checkpoint`, non-reentrant, wrapped around
the layer's `forward` so FSDP2's hooks stay outside it, as transformers' own checkpointing does,
and in eval mode: dropout stays off, so the scores are the same): the activation memory of a
micro-batch drops from every layer's to about one layer's, for one more forward pass.
"""

from __future__ import annotations

import functools
import os
import time

import torch
import torch.distributed as dist
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor, Shard
from torch.utils.checkpoint import checkpoint as _checkpoint

from nirvana.data.calibration import CalibrationBatch
from nirvana.errors import InvalidInput
from nirvana.guard.memory import check_scoring_memory, estimate_scoring
from nirvana.models.architectures import decoder_layers, layer_projections
from nirvana.models.fingerprint import model_fingerprint
from nirvana.models.shapes import model_shape
from nirvana.scoring.criteria import _only_block_weights_require_grad, lm_loss_objective, nirvana_objective
from nirvana.scoring.scores import Scores
from nirvana.scoring.units import UNIT_AXIS, group_units

TORCHRUN_ENV = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")
OBJECTIVES = {"nirvana": nirvana_objective, "taylor": lm_loss_objective}  # the gradient criteria's F


def under_torchrun() -> bool:
    return all(k in os.environ for k in TORCHRUN_ENV)


def init_distributed() -> tuple[int, int]:
    """Join torchrun's process group (NCCL with CUDA, else gloo); (rank, world size)."""
    if not under_torchrun():
        missing = ", ".join(k for k in TORCHRUN_ENV if k not in os.environ)
        raise InvalidInput(
            f"--distributed runs under torchrun (missing {missing}): "
            "torchrun --nproc-per-node N -m nirvana score --distributed ...; drop --distributed for one process."
        )
    if not dist.is_initialized():
        backend = "nccl" if torch.cuda.is_available() else "gloo"
        if backend == "nccl":
            torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
        dist.init_process_group(backend)
    return dist.get_rank(), dist.get_world_size()


def check_world(model, criterion: str, samples: int, world: int) -> None:
    """Refuse what sharding cannot do: a non-gradient criterion, more ranks than layers or sequences."""
    if criterion not in OBJECTIVES:
        gradient = list(OBJECTIVES)
        raise InvalidInput(
            f"--distributed shards the backward pass of a gradient criterion ({', '.join(gradient)}); "
            f"{criterion!r} needs none: score it without --distributed."
        )
    layers = model_shape(model).num_layers
    if world > layers:
        raise InvalidInput(
            f"world size {world} is larger than the model's {layers} decoder layers: each rank should own at least "
            f"a layer's share of the weights; use --nproc-per-node {layers} or fewer."
        )
    if samples % world:
        raise InvalidInput(
            f"the calibration batch of {samples} sequences does not split evenly over {world} ranks (every rank "
            f"runs the same number of forward/backward passes); use --samples {samples - samples % world or world}."
        )


def _full_vector(local: torch.Tensor, length: int, mesh) -> torch.Tensor:
    """The whole `[length]` vector from the rows this rank owns (FSDP's Shard(0) split, uneven at the end)."""
    return DTensor.from_local(local, mesh, [Shard(0)], shape=(length,), stride=(1,)).full_tensor()


def _axis_vector(name: str, lin) -> torch.Tensor:
    """This projection's unit-axis vector of |dF/dW * W| (+ the bias term of a row-owned projection)."""
    weight, grad = lin.weight, lin.weight.grad
    saliency = (grad.to_local().float() * weight.to_local().detach().float()).abs()  # [rows here, in]
    out_features, mesh = weight.shape[0], weight.device_mesh
    if UNIT_AXIS[name] == "row":
        vec = _full_vector(saliency.sum(dim=1), out_features, mesh)  # [out]
        if lin.bias is not None:
            bias = (lin.bias.grad.to_local().float() * lin.bias.to_local().detach().float()).abs()
            vec = vec + _full_vector(bias, out_features, mesh)
        return vec.cpu()
    partial = saliency.sum(dim=0)  # [in]: this rank's rows' share of each column sum
    dist.all_reduce(partial, op=dist.ReduceOp.SUM)
    return partial.cpu()


def checkpoint_layers(model) -> None:
    """Recompute every decoder layer's activations in the backward pass (non-reentrant), in any mode.
    Run the model with `use_cache=False` (the scoring does): a recompute would write the KV cache twice."""
    for layer in decoder_layers(model):
        forward = layer.forward
        layer.forward = functools.wraps(forward)(functools.partial(_checkpoint, forward, use_reentrant=False))


def sharded_gradient_scores(
    model,
    criterion: str,
    batch: CalibrationBatch,
    *,
    micro_batch: int = 0,
    progress=None,
    checkpoint: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(attn [L, Hkv], mlp [L, I]) of a gradient criterion with the model sharded over the process group.

    Call on every rank with the same model and batch; `model` is sharded in place (use it for
    nothing else afterwards). Equal to `compute_scores(model, criterion, batch)` on one process
    up to float summation order.
    """
    rank, world = dist.get_rank(), dist.get_world_size()
    n, t = batch.input_ids.shape
    check_world(model, criterion, n, world)
    batch.check_vocab(model.get_input_embeddings().num_embeddings)
    check_scoring_memory(
        model, n, t, micro_batch=micro_batch, estimate=functools.partial(estimate_scoring, world_size=world)
    )
    objective = OBJECTIVES[criterion]
    shape = model_shape(model)  # before sharding: the full widths
    device = torch.device(f"cuda:{torch.cuda.current_device()}") if torch.cuda.is_available() else torch.device("cpu")
    model.eval()  # on the CPU: `fully_shard` moves only this rank's shards to its device, never the whole model
    if checkpoint:
        checkpoint_layers(model)
    with _only_block_weights_require_grad(model):
        for layer in decoder_layers(model):
            fully_shard(layer)
        fully_shard(model)
        ids = torch.tensor_split(batch.input_ids, world)[rank]  # [n / world, T]: this rank's sequences
        step = micro_batch or len(ids)
        for start in range(0, len(ids), step):
            chunk = ids[start : start + step].to(device)
            logits = model(input_ids=chunk, use_cache=False).logits  # (m, T, V)
            # FSDP averages the ranks' gradients; x world makes that the sum, the whole batch's gradient
            # (a divide factor of 1 would say the same, but gloo has no pre-multiplied sum to do it with).
            (objective(logits, chunk, n) * world).backward()
            del logits
            if progress:
                progress(min(1.0, (start + step) / len(ids)) * 0.9, f"rank {rank}: forward+backward")
        layers = [
            {name: _axis_vector(name, lin) for name, lin in proj.named_linears().items()}
            for proj in layer_projections(model)
        ]
    attn, mlp = zip(*(group_units(v, shape.head_dim, shape.group_size) for v in layers))
    return torch.stack(attn), torch.stack(mlp)  # (L, Hkv), (L, I)


def distributed_scores(
    model, criterion: str, batch: CalibrationBatch, *, micro_batch: int = 0, progress=None, checkpoint: bool = False
):
    """`sharded_gradient_scores` as a `Scores` (fingerprint and calibration of the dense model, taken
    before sharding), on every rank; the caller's rank 0 writes it."""
    start = time.perf_counter()
    fingerprint = model_fingerprint(model)
    attn, mlp = sharded_gradient_scores(
        model, criterion, batch, micro_batch=micro_batch, progress=progress, checkpoint=checkpoint
    )
    meta = {
        "seconds": round(time.perf_counter() - start, 3),
        "cache_hit": False,
        "seed": None,
        "method": "autograd",
        "distributed": {
            "world_size": dist.get_world_size(),
            "backend": dist.get_backend(),
            "activation_checkpointing": checkpoint,
        },
    }
    return Scores(attn, mlp, criterion, fingerprint, batch.describe(), meta)
