"""Weight reconstruction after pruning (`--reconstruct`, any decoder-only method): Tyr-the-Pruner's least squares
(AMD-AGI/Tyr-the-Pruner, src/local_pruner.py `LocalPruner.prune` and the final re-solve of `local_prune_core`;
src/pruner.py `Pruner.prune` for the order), applied to the kept units any method chose.

Block by block, in order, on the calibration batch:
1. The block's inputs are the outputs of the blocks before it *as already pruned and reconstructed* (the
   reference's error accumulation); block 0's are the embeddings.
2. The dense block runs on those inputs once; every o_proj and down_proj input x (full width) is summed into
   H = sum x x^T (fp32). Inputs that never fire (diag H = 0) are dead: their rows of B = W^T are zeroed.
3. Damping: H += 0.01 * mean(diag H) * I; G = H B (with the damped H, so that keeping every column gives W back).
4. The kept input columns K (the query heads of kept KV groups, the kept neurons) are re-solved:
   W_K^T = H_KK^-1 G_K, the least-squares fit of the dense module's output W x from the kept inputs alone.
5. The pruned block (with the new weights) runs on the inputs: its outputs feed the next block.

Beyond the reference: where the pruned module has a bias (FLAP's compensation), the bias is solved with the
weights, as the coefficient of a constant input 1 (undamped), so that W_K x_K + b fits W x + b_dense.
A rotating method (SliceGPT) is refused: its modules output the sliced, rotated residual stream, not the dense
module's output. Example:
    >>> pruned = apply_plan(model, plan)
    >>> reconstruct(model, pruned, plan, batch)       # pruned's o_proj / down_proj re-solved in place
"""

from __future__ import annotations

import torch
import torch.nn as nn

from nirvana.data.calibration import CalibrationBatch
from nirvana.errors import InvalidInput
from nirvana.guard.memory import ArchSizes, MemoryEstimate, dtype_bytes, estimate_forward_by_layer
from nirvana.models.architectures import decoder_layers, layer_projections
from nirvana.models.capture import first_output, layer_inputs
from nirvana.models.shapes import model_shape
from nirvana.progress import Progress
from nirvana.pruning.plan import PruningPlan
from nirvana.pruning.slicing import group_rows

DAMP = 0.01  # the reference's damping: a fraction of the mean of diag H
MICRO_BATCH = 8  # sequences per forward through a block


def reconstruct_memory(config, **sizes) -> MemoryEstimate:
    """Planned peak (bytes above the dense weights) of `reconstruct`, for the sizes `check_scoring_memory` passes
    (samples, seq_len, micro_batch, dtype, ...): the pruned copy (at most the dense model's size), every
    calibration sequence's hidden states at one block (its inputs and its outputs), the two modules' H (fp32),
    the solve of the wider one in fp64 (H, its kept block, the identity; B and G), and one micro-batch through a
    block."""
    est = estimate_forward_by_layer(config, **{**sizes, "micro_batch": sizes.get("micro_batch") or MICRO_BATCH})
    samples, seq_len = sizes["samples"], sizes["seq_len"]
    est.step = "reconstruction"
    a = ArchSizes.from_config(config)
    act = dtype_bytes(sizes.get("dtype") or torch.float32)
    attention, width = a.num_heads * a.head_dim, max(a.intermediate_size, a.num_heads * a.head_dim)
    est.components["pruned copy of the model (at most the dense one)"] = a.total_params * act
    est.components["block inputs and outputs, all sequences"] = 2 * samples * seq_len * a.hidden_size * act
    est.components["H of o_proj and down_proj (fp32)"] = 4 * (a.intermediate_size**2 + attention**2)
    est.components["the solve (fp64)"] = 8 * (3 * width * width + 2 * width * a.hidden_size)
    return est


@torch.no_grad()
def solve_kept(weight: torch.Tensor, H: torch.Tensor, kept: torch.Tensor, *, damp: float = DAMP,
               bias: torch.Tensor | None = None, sums: torch.Tensor | None = None, count: int = 0):  # fmt: skip
    """(W_K, b) for the kept input columns `kept` of a dense `weight` [out, in], given H = sum x x^T [in, in].

    `bias`/`sums`/`count`: solve a bias too, the coefficient of a constant input (x_sum = `sums`, `count` tokens),
    towards the dense module's bias `bias` (None: no dense bias, 0). Returns b None when `sums` is None.
    """
    H = H.double().clone()
    B = weight.double().t().clone()  # [in, out]
    B[torch.diag(H) == 0, :] = 0  # dead inputs
    H += torch.eye(H.shape[0], dtype=H.dtype) * torch.diag(H).mean() * damp
    G = H @ B
    Hk, Gk = H[kept][:, kept], G[kept]
    if sums is None:
        return torch.linalg.solve(Hk, Gk).t().to(weight.dtype), None
    s = sums.double()
    dense_bias = torch.zeros(B.shape[1], dtype=torch.float64) if bias is None else bias.double()
    A = torch.zeros(len(kept) + 1, len(kept) + 1, dtype=torch.float64)
    A[:-1, :-1], A[:-1, -1], A[-1, :-1], A[-1, -1] = Hk, s[kept], s[kept], count
    rhs = torch.cat([Gk + s[kept, None] * dense_bias[None, :], (s @ B + count * dense_bias)[None, :]])
    sol = torch.linalg.solve(A, rhs)
    return sol[:-1].t().to(weight.dtype), sol[-1].to(weight.dtype)


class Gram:
    """H = sum x x^T, sum x and the token count of a module's inputs, accumulated by a forward pre-hook."""

    def __init__(self, width: int):
        self.H = torch.zeros(width, width, dtype=torch.float32)
        self.sums = torch.zeros(width, dtype=torch.float32)
        self.count = 0

    def __call__(self, module, args):
        x = args[0].detach().reshape(-1, args[0].shape[-1]).float().cpu()
        self.H += x.t() @ x
        self.sums += x.sum(0)
        self.count += x.shape[0]


@torch.no_grad()
def reconstruct(
    dense: nn.Module,
    pruned: nn.Module,
    plan: PruningPlan,
    batch: CalibrationBatch,
    *,
    micro_batch: int = MICRO_BATCH,
    damp: float = DAMP,
    progress: Progress = None,
) -> nn.Module:
    """Re-solve `pruned`'s o_proj and down_proj (in place) so that each fits the dense module's output on the
    calibration `batch`, block by block with the pruned earlier blocks' outputs as inputs (module docstring).
    `pruned` is `apply_plan(dense, plan)`'s (a baseline's biases included); returns it."""
    if batch is None:
        raise InvalidInput("reconstruction solves least squares on calibration activations: it needs a batch.")
    if getattr(pruned.config, "nirvana_sliced_hidden", None) is not None:
        raise InvalidInput(
            "reconstruction fits each pruned module to the dense module's output; a rotated model (SliceGPT) "
            "outputs the sliced, rotated residual stream instead. Drop --reconstruct."
        )
    shape = model_shape(dense)
    d, g = shape.head_dim, shape.group_size
    was_training = (dense.training, pruned.training)
    dense.eval(), pruned.eval()
    hidden, kwargs = layer_inputs(pruned, batch.input_ids, micro_batch or batch.input_ids.shape[0])
    dense_layers, pruned_layers = decoder_layers(dense), decoder_layers(pruned)
    dense_proj, pruned_proj = layer_projections(dense), layer_projections(pruned)
    for i, (layer_plan, dp, pp) in enumerate(zip(plan.layers, dense_proj, pruned_proj)):
        grams = {"o_proj": Gram(dp.o_proj.in_features), "down_proj": Gram(dp.down_proj.in_features)}
        handles = [dp.o_proj.register_forward_pre_hook(grams["o_proj"])]
        handles.append(dp.down_proj.register_forward_pre_hook(grams["down_proj"]))
        try:
            for h, kw in zip(hidden, kwargs[i]):
                dense_layers[i](h, **kw)
        finally:
            for handle in handles:
                handle.remove()
        kept = {
            "o_proj": group_rows(layer_plan.kept_kv_groups, g * d),
            "down_proj": torch.tensor(layer_plan.kept_neurons, dtype=torch.long),
        }
        for name, gram in grams.items():
            target, module = getattr(dp, name), getattr(pp, name)
            with_bias = module.bias is not None
            weight, bias = solve_kept(
                target.weight.detach().float().cpu(), gram.H, kept[name], damp=damp,
                bias=None if target.bias is None else target.bias.detach().float().cpu(),
                sums=gram.sums if with_bias else None, count=gram.count,
            )  # fmt: skip
            module.weight.copy_(weight.to(module.weight))
            if with_bias:
                module.bias.copy_(bias.to(module.bias))
        hidden = [first_output(pruned_layers[i](h, **kw)) for h, kw in zip(hidden, kwargs[i])]
        if progress:
            progress((i + 1) / len(plan.layers), f"reconstructed layer {i + 1}/{len(plan.layers)}")
    dense.train(was_training[0]), pruned.train(was_training[1])
    return pruned


__all__ = ["DAMP", "MICRO_BATCH", "Gram", "reconstruct", "reconstruct_memory", "solve_kept"]
