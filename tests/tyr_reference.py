"""Small transcription of the pure parts of Tyr-the-Pruner (AMD-AGI/Tyr-the-Pruner, NeurIPS 2025).

Written from reading the reference code (see docs/notes/tyr-reference.md for the line-by-line
description); it is our own code, not a copy. It only depends on torch/numpy and is meant as an
oracle for tests: it reproduces what the reference *does*, including its quirks, not what the
paper says.

Conventions: ``W`` is an ``nn.Linear`` weight ``[out, in]``. The reference internally works on the
transpose ``B = W.T`` (``[in, out]``), whose *rows* are the prunable input columns; this module does
the same internally and returns weights in ``[out, in]`` again.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

import torch

# ---------------------------------------------------------------------------------------------
# Supernet level grid
# ---------------------------------------------------------------------------------------------


def level_step(weights_diff: int, numel: int) -> float:
    """Sparsity difference between adjacent levels: ``weights_diff / numel`` of the pruned matrix.

    Transcribes the ``weights_diff_{mha,mlp} / handle.W.numel()`` term of ``Pruner._prune_group``
    (src/pruner.py L159-L166). ``numel`` is the element count of o_proj / down_proj.
    """
    return weights_diff / numel


def clamp_weights_diff(
    weights_diff_mha: int, weights_diff_mlp: int, hidden_size: int, head_size: int
) -> tuple[int, int]:
    """Lower bounds on the level step: one head for attention, 32 channels for the MLP.

    Transcribes prune_to_supernet.py ``main`` L112-L113:
    ``weights_diff_mlp = max(arg, 32 * hidden)``, ``weights_diff_mha = max(arg, head_size * hidden)``.
    """
    return max(weights_diff_mha, int(head_size * hidden_size)), max(weights_diff_mlp, 32 * hidden_size)


def level_sparsities(
    center: float,
    step: float,
    num_levels: int,
    *,
    weights_diff: int | None = None,
    numel: int | None = None,
) -> list[tuple[int, float]]:
    """Level grid of one supernet layer: ``[(level, sparsity), ...]`` for levels ``-lo .. hi``.

    Transcribes ``Pruner._prune_group`` (src/pruner.py L158-L166) together with the file naming of
    L170-L173 (level ``l`` is stored as ``<layer>/<l>.pth``)::

        lo = min(int(center // step), num_levels // 2)
        hi = min(int((1 - center) // step), num_levels // 2)
        sparsity(l) = center + l * step        for l in range(-lo, hi + 1)

    so levels never go below sparsity 0 or above 1 (floor division), but 0.0 and 1.0 themselves
    are included when they fall exactly on the grid. If ``weights_diff`` and ``numel`` are given,
    ``center + l * weights_diff / numel`` is evaluated in the reference's exact operation order
    (bit-identical floats); otherwise ``step`` is used.
    """
    half = int(num_levels // 2)
    if weights_diff is not None and numel is not None:
        step = weights_diff / numel
    lo = min(int(center // step), half)
    hi = min(int((1 - center) // step), half)
    out = []
    for lvl in range(-lo, hi + 1):
        sp = (
            center + lvl * weights_diff / numel
            if weights_diff is not None and numel is not None
            else center + lvl * step
        )
        out.append((lvl, sp))
    return out


def recenter(prev_centers: Sequence[float], levels: Sequence[int], prev_weights_diff: int, numel: int) -> list[float]:
    """New per-layer centres for the next coarse-to-fine iteration.

    Transcribes prune_to_supernet.py L117-L137: ``(c * numel + level * prev_weights_diff) / numel``,
    where ``prev_weights_diff`` is the (clamped) step stored in the previous supernet's metadata.pth
    and ``level`` the level chosen by the previous search for that layer.
    """
    return [(c * numel + lvl * prev_weights_diff) / numel for c, lvl in zip(prev_centers, levels, strict=True)]


def groups_to_keep(num_groups: int, sparsity: float) -> int:
    """Number of groups kept at a sparsity: ``int(num_groups * (1 - sparsity))`` (truncation).

    Transcribes ``LocalPruner.step`` (src/local_pruner.py L95).
    """
    return int(num_groups * (1 - sparsity))


# ---------------------------------------------------------------------------------------------
# Local pruning (OBS rounds + least-squares re-solve)
# ---------------------------------------------------------------------------------------------


def hessian(x: torch.Tensor) -> torch.Tensor:
    """``H = sum_t x_t x_t^T`` in float32, no normalisation. Transcribes ``LocalPruner.update`` (L52-L61)."""
    x = x.reshape(-1, x.shape[-1]).float()
    return x.t() @ x


def _group_rows(groups: torch.Tensor, group_size: int) -> torch.Tensor:
    """Row indices (of B = W.T) covered by the given group ids."""
    offs = torch.arange(group_size, device=groups.device)
    return (groups.reshape(-1, 1) * group_size + offs).reshape(-1)


def _resolve(H: torch.Tensor, G: torch.Tensor, removed: torch.Tensor, group_size: int) -> torch.Tensor:
    """Final re-solve on the kept rows: ``B_K = inv(H_KK) @ G_K``, removed rows 0 (L210-L217)."""
    keep = ~torch.repeat_interleave(removed, group_size)
    out = torch.zeros_like(G)
    out[keep] = torch.linalg.inv(H[keep][:, keep]) @ G[keep]
    return out


def _scores(
    W: torch.Tensor, G: torch.Tensor, Hinv: torch.Tensor, removed: torch.Tensor, group_size: int
) -> torch.Tensor:
    """Group score ``<W_g, G_g> + 1/2 <W_g, inv(Hinv_gg) W_g>``; removed groups get +1e20 (L178-L192)."""
    n_in, n_out = W.shape
    n_groups = n_in // group_size
    if group_size > 1:
        M = torch.zeros_like(W)
        for g in range(n_groups):
            if removed[g]:
                continue
            s = slice(g * group_size, (g + 1) * group_size)
            M[s] = torch.linalg.inv(Hinv[s, s]) @ W[s] / 2.0 + G[s]
    else:
        den = (removed.to(W.dtype) + torch.diagonal(Hinv)).clamp_min(1e-12)
        M = (W / 2.0) / den[:, None] + G
    val = (W * M).reshape(n_groups, group_size, n_out).sum(dim=(1, 2))
    return val + 1e20 * removed.to(val.dtype)


def local_prune_core(
    B: torch.Tensor, H: torch.Tensor, G: torch.Tensor, num_groups: int, num_keep: int, rounds: int
) -> torch.Tensor:
    """Transcribes ``LocalPruner.local_prune_core`` (src/local_pruner.py L134-L220), on B = W.T ``[in, out]``.

    ``H`` is the damped Hessian and ``G = H @ B``. Returns the pruned/reconstructed ``B``.
    Steps: explicit ``inv(H)``; groups whose |B_g| sums to <= 1e-12 count as already removed;
    ``rounds' = max(min(rounds, to_remove), 1)`` OBS rounds removing ``divmod`` shares (first
    ``extra`` rounds one more); each round picks the lowest-score groups, applies the block OBS
    update to B and to ``Hinv``, then the kept rows are re-solved exactly from H and G.
    """
    n_in, n_out = B.shape
    gs = int(n_in / num_groups)
    Hinv = torch.linalg.inv(H)
    W = B.clone()
    removed = W.reshape(num_groups, gs, n_out).abs().sum(dim=(1, 2)) <= 1e-12
    n_zero = int(removed.sum())
    if n_zero > 0:
        z = _group_rows(torch.nonzero(removed).flatten(), gs)
        Hinv[z, :] = 0
        Hinv[:, z] = 0
        W = Hinv @ G
        if num_groups - num_keep - n_zero <= 0:
            W[z, :] = 0
            return W
    todo = num_groups - num_keep - n_zero
    if todo <= 0:
        return _resolve(H, G, removed, gs)
    n_rounds = max(int(min(rounds, todo)), 1)
    base, extra = divmod(todo, n_rounds)
    for r in range(n_rounds):
        k = base + (1 if r < extra else 0)
        picked = torch.argsort(_scores(W, G, Hinv, removed, gs))[:k]
        idx = _group_rows(picked, gs)
        P = torch.linalg.inv(Hinv[idx][:, idx])
        W = W - Hinv[:, idx] @ P @ W[idx]
        W[idx] = 0
        Hinv = Hinv - Hinv[:, idx] @ P @ Hinv[idx]
        Hinv[idx, :] = 0
        Hinv[:, idx] = 0
        removed[picked] = True
    return _resolve(H, G, removed, gs)


def local_prune(
    W: torch.Tensor,
    H: torch.Tensor,
    groups_to_remove: int,
    group_size: int,
    rounds: int,
    damp: float = 0.01,
    *,
    shortcut: bool = True,
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """Prune ``groups_to_remove`` groups of ``group_size`` input columns of ``W [out, in]`` and reconstruct.

    Transcribes ``LocalPruner.prune`` + ``LocalPruner.step`` + ``local_prune_core``
    (src/local_pruner.py L123-L131, L71-L99, L134-L220) for one level:

    1. ``B = W.float().T``; rows of B whose input never fires (``diag(H) == 0``) are zeroed;
    2. damping ``H += I * mean(diag(H)) * damp`` (reference: ``damp = 1e-2``, relative, applied once);
    3. ``G = H_damped @ B``;
    4. the level shortcuts of ``step``: removing nothing returns B unchanged (the reference keys this on
       ``sparsity == 0.0``), removing everything returns zeros (``sparsity == 1.0``); set
       ``shortcut=False`` to push those cases through the core instead (then 0 removed gives
       ``inv(H) @ H @ B``, i.e. B up to round-off);
    5. otherwise ``local_prune_core`` with ``num_keep = num_groups - groups_to_remove``.

    ``H`` is the raw ``sum x x^T`` (not damped). Reference settings: o_proj ``group_size = head_dim``
    and ``rounds = 1``; down_proj ``group_size = 1`` and ``rounds = 16``. The reference computes in
    float32 (``dtype``). Returns ``[out, in]`` in ``dtype``.
    """
    _n_out, n_in = W.shape
    assert n_in % group_size == 0
    num_groups = n_in // group_size
    H = H.to(dtype).clone()
    B = W.to(dtype).t().clone()
    B[torch.diagonal(H) == 0, :] = 0
    H = H + torch.eye(n_in, dtype=dtype) * torch.mean(torch.diagonal(H)) * damp
    G = H @ B
    if shortcut and groups_to_remove <= 0:
        return B.t().clone()
    if shortcut and groups_to_remove >= num_groups:
        return torch.zeros_like(B).t()
    return local_prune_core(B, H, G, num_groups, num_groups - groups_to_remove, rounds).t()


# ---------------------------------------------------------------------------------------------
# Evolutionary search
# ---------------------------------------------------------------------------------------------


def mutate(
    state: Sequence[int],
    module_types: Sequence[str],
    num_levels: int,
    rng: random.Random,
    *,
    level_bounds: Sequence[tuple[int, int]] | None = None,
    max_level: int = 99999,
) -> list[int]:
    """One offspring of ``state``: 1-4 (min of two draws) level-transfers inside one module type.

    Transcribes the mutation loop of ``main`` in search_sparsity_dist.py (L254-L279). For each flip:
    draw a position uniformly until its level can go down by one (level-1 exists, ``|level-1| <=
    max_level``); then draw a position uniformly until it has the *same module type* and its level
    can go up by one; apply ``-1`` / ``+1``. Both draws may hit the same position (a no-op flip).
    Since all layers of one type have the same size and step, each type's parameter budget is kept.

    The reference identifies the type by index parity in the sorted list of layer names
    (``(target_id + incr_id) % 2 == 0``; sorted names alternate ``...mlp.down_proj``,
    ``...self_attn.o_proj``) and level existence by the ``<level>.pth`` file; here ``module_types``
    and ``level_bounds`` (inclusive ``(lo, hi)`` per position, default ``±(num_levels // 2)``) stand in.
    RNG calls are made in the reference's order with ``rng.randint`` (the reference uses the global
    ``random`` module seeded with 0).
    """
    n = len(state)
    half = int(num_levels // 2)
    bounds = list(level_bounds) if level_bounds is not None else [(-half, half)] * n
    child = list(state)
    num_flips = min(rng.randint(1, 4), rng.randint(1, 4))
    for _ in range(num_flips):
        while True:
            d = rng.randint(0, n - 1)
            lvl = child[d]
            if abs(lvl - 1) > max_level:
                continue
            if bounds[d][0] <= lvl - 1 <= bounds[d][1]:
                break
        while True:
            i = rng.randint(0, n - 1)
            lvl = child[i]
            if abs(lvl + 1) > max_level or module_types[i] != module_types[d]:
                continue
            if bounds[i][0] <= lvl + 1 <= bounds[i][1]:
                break
        child[d] -= 1
        child[i] += 1
    return child


def make_offspring(
    parent: Sequence[int],
    count: int,
    module_types: Sequence[str],
    num_levels: int,
    rng: random.Random,
    *,
    level_bounds: Sequence[tuple[int, int]] | None = None,
    max_level: int = 99999,
    max_total_deviation: int = 99999,
) -> list[list[int]]:
    """``count`` distinct mutants of ``parent`` (search_sparsity_dist.py L252-L286).

    Duplicates among the offspring are redrawn; the parent itself may appear (all flips no-ops).
    Candidates with ``sum(|level|) > max_total_deviation`` are redrawn.
    """
    out: list[list[int]] = []
    while len(out) < count:
        child = mutate(parent, module_types, num_levels, rng, level_bounds=level_bounds, max_level=max_level)
        if child in out or sum(map(abs, child)) > max_total_deviation:
            continue
        out.append(child)
    return out


def sample_minibatch(seq_lengths: Sequence[int], num_tokens: int, rng: random.Random) -> list[tuple[int, int]]:
    """Sequences drawn for one selection stage: ``[(seq_index, tokens_used), ...]`` summing to ``num_tokens``.

    Transcribes ``selection`` (search_sparsity_dist.py L60-L80): distinct random sequences until the
    budget is reached; the last one is truncated to its first ``num_tokens - used`` tokens.
    """
    chosen: list[tuple[int, int]] = []
    seen: set[int] = set()
    used = 0
    while used < num_tokens:
        j = rng.randint(0, len(seq_lengths) - 1)
        if j in seen:
            continue
        seen.add(j)
        take = min(seq_lengths[j], num_tokens - used)
        chosen.append((j, take))
        used += take
    return chosen


def sparse_kl(dense_logits, pruned_logits, topk: int) -> float:
    """Sparse KL fitness exactly as ``compute_sparse_kl_div`` (src/metric_utils.py L93-L122) computes it.

    ``dense_logits`` / ``pruned_logits``: one tensor ``[batch, T, V]`` (or ``[T, V]``) or a list of
    such tensors, one per sequence. Per sequence:

    * keep the dense model's top-``topk`` logit values and their vocabulary ids (the reference
      computes these once, on the dense model, search_sparsity_dist.py L208);
    * gather the pruned logits at those same ids;
    * drop the last position (``[:, :-1]``);
    * ``log_softmax`` over the k kept entries for both (each renormalised on the dense top-k
      support; the tail outside top-k is discarded, there is no tail bucket);
    * ``KL(dense || pruned) = sum p (log p - log q)``, divided by the number of positions
      (``F.kl_div(..., log_target=True, reduction="batchmean")``).

    Sequences are combined by a running mean weighted by ``positions * k`` (token-weighted).
    """
    if isinstance(dense_logits, torch.Tensor):
        dense_logits, pruned_logits = [dense_logits], [pruned_logits]
    running = 0.0
    seen = 0
    for d, p in zip(dense_logits, pruned_logits, strict=True):
        if d.dim() == 2:
            d, p = d.unsqueeze(0), p.unsqueeze(0)
        vals, ids = d.topk(k=topk, dim=-1)
        q = p.gather(dim=-1, index=ids.long())[:, :-1, :]
        t = vals[:, :-1, :]
        logq = q.reshape(-1, topk).log_softmax(dim=-1)
        logp = t.reshape(-1, topk).log_softmax(dim=-1)
        kl = (logp.exp() * (logp - logq)).sum() / logp.shape[0]
        n = t.numel()
        running = n / (seen + n) * kl + seen / (seen + n) * running
        seen += n
    return float(running)
