"""LLM-Pruner's importance: first- (or second-) order Taylor salience of coupled groups.

Follows `TaylorImportance.__call__` in LLMPruner/pruner/hf_llama_pruner.py and the calibration
loop of `llama3.py`:

    loss = LM loss of the calibration examples (labels = inputs), one backward  -> G = dL/dW
    param_second / param_mix: first, per example j, A += (dL_j/dW)^2 / N        (acc_grad)
    salience S:  param_first W G,  param_second W A W,  param_mix W G - 0.5 W A W,  vectorize W G
    per channel: |S| summed over the other axis ("param_*"), or |sum of S| ("vectorize")
    rows of q/k/v/gate/up, columns of o/down

A group is everything coupled to one layer's k_proj channels (q, k, v, o) or gate_proj channels
(gate, up, down). Its vectors are aligned to the k (or gate) channels, combined with
`group_reduction`, and, for attention, summed over each head's `head_dim` channels
(`consecutive_groups`). Biases are not scored (the reference reads `layer.weight` only).
"""

from __future__ import annotations

import torch

from nirvana.methods.llm_pruner.config import SECOND_ORDER, LLMPrunerConfig
from nirvana.models.architectures import layer_projections
from nirvana.models.shapes import model_shape
from nirvana.models.weights import input_device
from nirvana.progress import Progress
from nirvana.scoring.criteria import lm_loss_objective, only_block_weights_require_grad
from nirvana.scoring.distributed import ShardedScorer
from nirvana.scoring.objectives import forward_objective
from nirvana.scoring.units import UNIT_AXIS

REDUCTIONS = {
    "sum": lambda x: x.sum(0),
    "mean": lambda x: x.mean(0),
    "max": lambda x: x.max(0).values,
    "prod": lambda x: x.prod(0),
}


def salience(weight: torch.Tensor, grad: torch.Tensor, acc: torch.Tensor | None, taylor: str) -> torch.Tensor:
    """Element salience `[out, in]` of one weight for a Taylor variant (fp32)."""
    first = weight * grad
    if taylor == "param_second":
        return weight * acc * weight
    if taylor == "param_mix":
        return first - 0.5 * weight * acc * weight
    return first


def channel_vector(name: str, s: torch.Tensor, taylor: str) -> torch.Tensor:
    """Salience `[out, in]` -> one value per channel the group prunes (rows, or columns of o/down)."""
    dim = 1 if UNIT_AXIS[name] == "row" else 0
    return s.sum(dim).abs() if taylor == "vectorize" else s.abs().sum(dim)


def group_scores(vectors: dict[str, torch.Tensor], shape, config: LLMPrunerConfig) -> tuple[torch.Tensor, torch.Tensor]:
    """One layer's channel vectors -> (attn `[Hkv]`, mlp `[I]`)."""
    hkv, g, d = len(vectors["k_proj"]) // shape.head_dim, shape.group_size, shape.head_dim
    reduce = REDUCTIONS[config.group_reduction]

    def align(q: torch.Tensor) -> torch.Tensor:  # (Hq d,) -> (Hkv d,)
        if config.query_credit == "strided":
            return q.view(g, hkv * d).sum(0)  # the reference's imp.view(len // min, min).sum(0)
        return q.view(hkv, g, d).sum(1).reshape(-1)  # KV group m gets query heads m g .. m g + g - 1

    attn_channels = torch.stack(
        [vectors["k_proj"], vectors["v_proj"], align(vectors["q_proj"]), align(vectors["o_proj"])]
    )
    attn = reduce(attn_channels).view(hkv, d).sum(1)  # consecutive_groups = head_dim
    mlp = reduce(torch.stack([vectors["gate_proj"], vectors["up_proj"], vectors["down_proj"]]))
    return attn, mlp


def taylor_scores(model, batch, config: LLMPrunerConfig, micro_batch: int = 0, progress: Progress = None):
    """(attn [L, Hkv], mlp [L, I], {}) from the LM loss on `batch.input_ids: [N, T]`."""
    ids = batch.input_ids
    n = ids.shape[0]
    micro_batch = micro_batch or n
    device = input_device(model)
    shape = model_shape(model)
    linears = [(name, lin) for proj in layer_projections(model) for name, lin in proj.named_linears().items()]
    with only_block_weights_require_grad(model):
        acc = None
        if config.taylor in SECOND_ORDER:
            # llama3.py: one example at a time, grad^2 / N accumulated into acc_grad.
            acc = {lin: torch.zeros_like(lin.weight, dtype=torch.float32) for _, lin in linears}
            for j in range(n):
                model.zero_grad(set_to_none=True)
                example = ids[j : j + 1].to(device)
                forward_objective(model, example, lm_loss_objective, 1).backward()
                for _, lin in linears:
                    acc[lin] += lin.weight.grad.float().pow(2) / n
                if progress:
                    progress(0.45 * (j + 1) / n, f"per-example gradients {j + 1}/{n}")
            model.zero_grad(set_to_none=True)
        for start in range(0, n, micro_batch):
            chunk = ids[start : start + micro_batch].to(device)
            forward_objective(model, chunk, lm_loss_objective, n).backward()
            if progress:
                done = min(start + micro_batch, n)
                progress(0.45 + 0.45 * done / n if acc else 0.9 * done / n, f"forward+backward {done}/{n}")
        layers = []
        for proj in layer_projections(model):
            vectors = {}
            for name, lin in proj.named_linears().items():
                w = lin.weight.detach().float()
                s = salience(w, lin.weight.grad.float(), acc[lin] if acc else None, config.taylor)
                vectors[name] = channel_vector(name, s, config.taylor).cpu()
            layers.append(group_scores(vectors, shape, config))
    attn, mlp = zip(*layers)
    return torch.stack(attn), torch.stack(mlp), {}


def sharded_scorer(config: LLMPrunerConfig) -> ShardedScorer:
    """`taylor_scores` as FSDP2 runs it (`--distributed`): the same salience on each rank's rows, the
    same channel sums completed across ranks, the same groups (tested equal to one process)."""
    return ShardedScorer(
        "llm-pruner",
        lm_loss_objective,
        element=lambda w, g, acc: salience(w, g, acc, config.taylor),
        abs_first=config.taylor != "vectorize",
        with_bias=False,  # the reference reads layer.weight only
        units=lambda vectors, shape: group_scores(vectors, shape, config),
        squared_grads=config.taylor in SECOND_ORDER,
        settings=config.score_key(),
    )
