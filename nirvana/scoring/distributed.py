"""Gradient scores of one model sharded over several processes with FSDP2, equal to one process's.

    torchrun --nproc-per-node 8 -m nirvana score --model meta-llama/Llama-3.1-70B --distributed --out s.safetensors

Rank 0 loads the model; the other ranks build the architecture on the meta device (no weight
read, no memory: `load_model(..., weights=False)`). Every rank `fully_shard`s each decoder layer
and then the root (PyTorch FSDP2: each rank keeps 1/world of every layer's weights and gradients;
a layer's weights are gathered only while it runs); the meta ranks then allocate their shards and
all of them are filled from rank 0's full state dict, one tensor at a time
(`set_model_state_dict(..., broadcast_from_rank0=True)`), with the buffers broadcast, so a node
holds one copy of the weights in CPU memory, not one per process. Each rank takes its contiguous
share of the calibration batch. Each backward
reduce-scatters the gradients (FSDP's average of objectives scaled by the world size: their sum),
so after the last micro-batch every rank holds its rows of dF/dW for the whole batch, the
gradient one process would have.

The saliency |dF/dW * W| is elementwise, so each rank computes it on its own rows. The unit sums
(`nirvana.scoring.units`) are then completed across ranks: a row-owned vector (q/k/v/gate/up,
one entry per output row) is gathered from the rows each rank owns; a column-owned vector
(o/down, summed over output rows) is the all-reduced sum of each rank's partial column sums.
Every rank ends with the same [L, Hkv] and [L, I] scores; rank 0 writes them.

Only the gradient scorers need this: NIRVANA's criteria nirvana and taylor (`GRADIENT`), and
LLM-Pruner (`nirvana.methods.llm_pruner.importance.sharded_scorer`), each a `ShardedScorer` row: its objective, its
element salience, whether a channel's value is |sum| or sum of |.|, and how a layer's channel
vectors make its units. LLM-Pruner's second-order variants first accumulate each example's squared
gradient (the reference's `acc_grad`): every rank runs the same example, so FSDP's average of the
ranks' identical gradients is that example's gradient, and each rank squares the rows it owns.
The other criteria need no backward pass and run on one device or through `device_map`.

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
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
import torch.distributed as dist
from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor, Shard

from nirvana.data.calibration import CalibrationBatch
from nirvana.errors import InvalidInput
from nirvana.guard.memory import check_scoring_memory, estimate_scoring
from nirvana.models.architectures import decoder_layers, layer_projections
from nirvana.models.checkpointing import checkpoint_layers
from nirvana.models.fingerprint import model_fingerprint
from nirvana.models.shapes import model_shape
from nirvana.scoring.criteria import lm_loss_objective, nirvana_objective, only_block_weights_require_grad
from nirvana.scoring.scores import Scores
from nirvana.scoring.units import UNIT_AXIS, group_units

TORCHRUN_ENV = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")


def _first_order(weight: torch.Tensor, grad: torch.Tensor, acc: torch.Tensor | None) -> torch.Tensor:
    return grad * weight  # dF/dW * W


def _nirvana_units(vectors: dict[str, torch.Tensor], shape) -> tuple[torch.Tensor, torch.Tensor]:
    return group_units(vectors, shape.head_dim, shape.group_size)


@dataclass(frozen=True)
class ShardedScorer:
    """A gradient scorer as the sharded pass needs it (one row per criterion or method).

    `objective(logits [m, T, V], ids [m, T], n)`: the micro-batch's share of F over n sequences.
    `element(weight, grad, acc) -> [rows, in]`: each weight's salience (fp32; `acc` the squared
    gradients when `squared_grads`). `abs_first`: a channel is the sum of |salience| (else |sum|).
    `with_bias`: a row-owned bias's |g b| joins its row (NIRVANA's units; LLM-Pruner scores weights only).
    `units(vectors, shape) -> (attn [Hkv], mlp [I])`: one layer's channel vectors to its units.
    `settings`: what the score file records (`meta["method_settings"]`).
    """

    name: str
    objective: Callable
    element: Callable = _first_order
    abs_first: bool = True
    with_bias: bool = True
    units: Callable = _nirvana_units
    squared_grads: bool = False
    settings: dict = field(default_factory=dict)


GRADIENT = {  # NIRVANA's gradient criteria
    "nirvana": ShardedScorer("nirvana", nirvana_objective),
    "taylor": ShardedScorer("taylor", lm_loss_objective),
}


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


def gradient_scorer(criterion: str) -> ShardedScorer:
    """NIRVANA's `criterion` as a sharded scorer; a criterion without a backward pass is refused."""
    if criterion not in GRADIENT:
        raise InvalidInput(
            f"--distributed shards the backward pass of a gradient criterion ({', '.join(GRADIENT)}, or --method "
            f"llm-pruner); {criterion!r} needs none: score it without --distributed."
        )
    return GRADIENT[criterion]


def check_world(model, scorer: ShardedScorer | str, samples: int, world: int) -> None:
    """Refuse what sharding cannot do: a non-gradient criterion, more ranks than layers or sequences."""
    if isinstance(scorer, str):
        gradient_scorer(scorer)
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


def _any_rank(flag: bool, device) -> bool:
    value = torch.tensor([int(flag)], device=device)  # NCCL reduces CUDA tensors only
    dist.all_reduce(value, op=dist.ReduceOp.MAX)
    return bool(value.item())


def _full_vector(local: torch.Tensor, length: int, mesh) -> torch.Tensor:
    """The whole `[length]` vector from the rows this rank owns (FSDP's Shard(0) split, uneven at the end)."""
    return DTensor.from_local(local, mesh, [Shard(0)], shape=(length,), stride=(1,)).full_tensor()


def _axis_vector(name: str, lin, scorer: ShardedScorer, acc: torch.Tensor | None = None) -> torch.Tensor:
    """This projection's unit-axis vector of the scorer's salience (+ the bias term of a row-owned
    projection when the scorer counts biases), whole on every rank."""
    weight, grad = lin.weight, lin.weight.grad
    salience = scorer.element(weight.to_local().detach().float(), grad.to_local().float(), acc)  # [rows here, in]
    if scorer.abs_first:
        salience = salience.abs()
    out_features, mesh = weight.shape[0], weight.device_mesh
    if UNIT_AXIS[name] == "row":
        vec = _full_vector(salience.sum(dim=1), out_features, mesh)  # [out]: whole rows live on one rank
        if not scorer.abs_first:
            vec = vec.abs()
        if scorer.with_bias and lin.bias is not None:
            bias = scorer.element(lin.bias.to_local().detach().float(), lin.bias.grad.to_local().float(), None)
            vec = vec + _full_vector(bias.abs(), out_features, mesh)
        return vec.cpu()
    partial = salience.sum(dim=0)  # [in]: this rank's rows' share of each column sum
    dist.all_reduce(partial, op=dist.ReduceOp.SUM)
    return (partial if scorer.abs_first else partial.abs()).cpu()


def _squared_gradients(model, linears, ids: torch.Tensor, device, progress=None) -> dict:
    """{linear: sum over examples of (dL_j/dW)^2 / N} on this rank's rows (LLM-Pruner's `acc_grad`).
    Every rank runs every example (the same one at a time), so FSDP's average is that example's gradient."""
    n = len(ids)
    acc = {lin: torch.zeros_like(lin.weight.to_local(), dtype=torch.float32) for lin in linears}
    for j in range(n):
        model.zero_grad(set_to_none=True)
        example = ids[j : j + 1].to(device)
        lm_loss_objective(model(input_ids=example, use_cache=False).logits, example, 1).backward()
        for lin in linears:
            acc[lin] += lin.weight.grad.to_local().float().pow(2) / n
        if progress:
            progress(0.45 * (j + 1) / n, f"rank {dist.get_rank()}: per-example gradients {j + 1}/{n}")
    model.zero_grad(set_to_none=True)
    return acc


def is_meta(model) -> bool:
    """A model built without its weights (`load_model(..., weights=False)`): its shards come from rank 0."""
    return any(p.is_meta for p in model.parameters())


def _fill_from_rank0(model, full: dict | None, device) -> None:
    """After `fully_shard` on every rank: each rank's shards filled from rank 0's full state dict (one
    tensor at a time, `broadcast_from_rank0`), and the buffers (rotary frequencies, not in the state
    dict) broadcast. A rank built on the meta device first allocates its shards (`to_empty`)."""
    if is_meta(model):
        model.to_empty(device=device)
    options = StateDictOptions(full_state_dict=True, broadcast_from_rank0=True)
    set_model_state_dict(model, full if dist.get_rank() == 0 else {}, options=options)
    for buffer in model.buffers():  # through the rank's device: NCCL broadcasts CUDA tensors only
        shared = buffer.data.to(device)
        dist.broadcast(shared, src=0)
        buffer.data.copy_(shared)


def sharded_gradient_scores(
    model,
    criterion: ShardedScorer | str,
    batch: CalibrationBatch,
    *,
    micro_batch: int = 0,
    progress=None,
    checkpoint: bool = False,
    memory: Callable | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(attn [L, Hkv], mlp [L, I]) of a gradient scorer with the model sharded over the process group.

    `criterion`: a NIRVANA criterion name, or a `ShardedScorer` (LLM-Pruner's: `memory` is then its
    method's estimate). Call on every rank with the same model and batch; `model` is sharded in place
    (use it for nothing else afterwards). Equal to the one-process scores (`compute_scores`,
    `taylor_scores`) up to float summation order.
    """
    scorer = gradient_scorer(criterion) if isinstance(criterion, str) else criterion
    rank, world = dist.get_rank(), dist.get_world_size()
    n, t = batch.input_ids.shape
    check_world(model, scorer, n, world)
    batch.check_vocab(model.get_input_embeddings().num_embeddings)
    device = torch.device(f"cuda:{torch.cuda.current_device()}") if torch.cuda.is_available() else torch.device("cpu")
    estimate = functools.partial(memory or estimate_scoring, world_size=world, checkpoint=checkpoint)
    check_scoring_memory(model, n, t, micro_batch=micro_batch, estimate=estimate, device=str(device))
    from_rank0 = _any_rank(is_meta(model), device)  # some rank was built without weights: rank 0's are shared
    if from_rank0 and rank == 0 and is_meta(model):
        raise InvalidInput("rank 0 must hold the model's weights: the other ranks receive their shards from it.")
    full = model.state_dict() if from_rank0 and rank == 0 else None  # before sharding: whole tensors
    shape = model_shape(model)  # before sharding: the full widths
    model.eval()  # on the CPU: `fully_shard` moves only this rank's shards to its device, never the whole model
    if checkpoint:
        checkpoint_layers(model)
    with only_block_weights_require_grad(model):
        for layer in decoder_layers(model):
            fully_shard(layer)
        fully_shard(model)
        if from_rank0:
            _fill_from_rank0(model, full, device)
            del full
        linears = [dict(proj.named_linears()) for proj in layer_projections(model)]
        acc = None
        if scorer.squared_grads:
            every = [lin for layer in linears for lin in layer.values()]
            acc = _squared_gradients(model, every, batch.input_ids, device, progress)
        ids = torch.tensor_split(batch.input_ids, world)[rank]  # [n / world, T]: this rank's sequences
        step = micro_batch or len(ids)
        for start in range(0, len(ids), step):
            chunk = ids[start : start + step].to(device)
            logits = model(input_ids=chunk, use_cache=False).logits  # (m, T, V)
            # FSDP averages the ranks' gradients; x world makes that the sum, the whole batch's gradient
            # (a divide factor of 1 would say the same, but gloo has no pre-multiplied sum to do it with).
            (scorer.objective(logits, chunk, n) * world).backward()
            del logits
            if progress:
                done = min(1.0, (start + step) / len(ids))
                progress(0.45 + 0.45 * done if acc else 0.9 * done, f"rank {rank}: forward+backward")
        layers = [
            {name: _axis_vector(name, lin, scorer, acc[lin] if acc else None) for name, lin in layer.items()}
            for layer in linears
        ]
    attn, mlp = zip(*(scorer.units(v, shape) for v in layers))
    return torch.stack(attn), torch.stack(mlp)  # (L, Hkv), (L, I)


def distributed_scores(model, criterion: ShardedScorer | str, batch: CalibrationBatch, **options):
    """`sharded_gradient_scores` (the same `options`) as a `Scores` (fingerprint and calibration of the
    dense model, taken before sharding), on every rank; the caller's rank 0 writes it."""
    scorer = gradient_scorer(criterion) if isinstance(criterion, str) else criterion
    start = time.perf_counter()
    fingerprint = [model_fingerprint(model) if dist.get_rank() == 0 else None]  # rank 0 holds the weights
    dist.broadcast_object_list(fingerprint, src=0)
    fingerprint = fingerprint[0]
    attn, mlp = sharded_gradient_scores(model, scorer, batch, **options)
    checkpoint = options.get("checkpoint", False)
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
    if scorer.settings:
        meta["method_settings"] = scorer.settings
    return Scores({"attn": attn, "mlp": mlp}, scorer.name, fingerprint, batch.describe(), meta)
