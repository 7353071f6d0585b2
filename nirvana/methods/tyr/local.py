"""Tyr-the-Pruner's local pruning of one module: which input groups go, and the kept weights re-solved.

AMD-AGI/Tyr-the-Pruner, src/local_pruner.py `LocalPruner.prune` / `local_prune_core` (docs/notes/tyr-reference.md
section 4), on B = W^T ([in, out]), whose rows are the module's input columns, in groups of `group_size` rows:

1. Dead inputs (diag H = 0) are zeroed in B; H is damped, H += damp * mean(diag H) * I; G = H B.
2. Groups whose rows of B are all zero count as removed already.
3. The groups still to remove go in `rounds` OBS rounds (the first `extra` rounds one more, `divmod`): each
   round scores every kept group by <W_g, G_g> + 1/2 <W_g, (Hinv_gg)^-1 W_g> with the current W and
   Hinv, removes the lowest, and updates W -= Hinv[:, P] Q W_P and Hinv -= Hinv[:, P] Q Hinv[P, :] with
   Q = (Hinv_PP)^-1, zeroing the rows of P.
4. The kept rows are re-solved from the damped H and G: W_K = H_KK^-1 G_K; removed rows are 0.

The reference picks single query heads of o_proj (group = head_dim columns); here a group is a whole KV group
(its g query heads, g x head_dim columns), as every method of this package slices under GQA. The reference
computes in float32 with explicit inverses; this computes in float64 with batched inverses and `solve`.
"""

from __future__ import annotations

import torch

from nirvana.errors import InvalidInput

DAMP = 0.01  # the reference's damping: a fraction of the mean of diag H
ZERO = 1e-12  # the reference's "already removed" threshold on sum |B_g|


def _block_inverse(Hinv: torch.Tensor, removed: torch.Tensor, size: int) -> torch.Tensor:
    """(Hinv_gg)^-1 of every group g, [groups, size, size]; removed groups (zero blocks) get the identity.

    One `inv` per group: the batched float64 inverse fails in this torch's MKL (`DLASWP` parameter 6, "pivots
    given to lu_solve") once `torch.set_num_threads` has been called, as `bench --threads` does."""
    eye = torch.eye(size, dtype=Hinv.dtype)
    return torch.stack([
        eye if gone else torch.linalg.inv(Hinv[g * size : (g + 1) * size, g * size : (g + 1) * size])
        for g, gone in enumerate(removed.tolist())
    ])  # fmt: skip


def group_scores(W: torch.Tensor, G: torch.Tensor, Hinv: torch.Tensor, removed: torch.Tensor, size: int):
    """<W_g, G_g> + 1/2 <W_g, (Hinv_gg)^-1 W_g> per group of `size` rows; removed groups +inf."""
    n, out = removed.numel(), W.shape[1]
    Wg, Gg = W.reshape(n, size, out), G.reshape(n, size, out)
    if size == 1:
        half = Wg[:, 0] ** 2 / (2 * torch.diagonal(Hinv).clamp_min(ZERO)[:, None])
        score = (Wg[:, 0] * Gg[:, 0]).sum(1) + half.sum(1)
    else:
        score = (Wg * (_block_inverse(Hinv, removed, size) @ Wg / 2 + Gg)).sum((1, 2))
    return score.masked_fill(removed, float("inf"))


def rows_of(groups: torch.Tensor, size: int) -> torch.Tensor:
    return (groups[:, None] * size + torch.arange(size)).reshape(-1)


@torch.no_grad()
def local_prune(weight: torch.Tensor, H: torch.Tensor, remove: int, group_size: int, rounds: int,
                *, damp: float = DAMP) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    """(kept group indices, new weight [out, in] with the removed groups' columns zero) of one module.

    `weight`: the dense module's [out, in]; `H`: sum x x^T of its inputs [in, in] (undamped); `remove`: how many
    groups of `group_size` input columns go, in `rounds` OBS rounds (the reference: 1 for heads, 16 for channels).
    Removing none returns the weight with dead inputs zeroed (the reference's sparsity-0 level).
    """
    out, width = weight.shape
    if width % group_size:
        raise InvalidInput(f"{width} input columns do not split into groups of {group_size}.")
    n = width // group_size
    if not 0 <= remove < n:
        raise InvalidInput(f"local pruning removes 0 to {n - 1} of {n} groups (one stays), got {remove}.")
    H = H.double()
    B = weight.detach().double().t().clone()
    B[torch.diagonal(H) == 0] = 0
    if remove == 0:
        return torch.arange(n), B.t().to(weight.dtype)
    H = H + torch.eye(width, dtype=H.dtype) * torch.diagonal(H).mean() * damp
    G = H @ B
    Hinv = torch.linalg.inv(H)
    W = B.clone()
    removed = W.reshape(n, group_size, out).abs().sum((1, 2)) <= ZERO
    if removed.any():
        dead = rows_of(torch.nonzero(removed).flatten(), group_size)
        Hinv[dead] = 0
        Hinv[:, dead] = 0
        W = Hinv @ G
    todo = remove - int(removed.sum())
    if todo > 0:
        steps = max(min(rounds, todo), 1)
        base, extra = divmod(todo, steps)
        for r in range(steps):
            picked = torch.argsort(group_scores(W, G, Hinv, removed, group_size), stable=True)[: base + (r < extra)]
            P = rows_of(picked, group_size)
            Q = torch.linalg.inv(Hinv[P][:, P])
            W -= Hinv[:, P] @ Q @ W[P]
            Hinv -= Hinv[:, P] @ Q @ Hinv[P]
            W[P], Hinv[P], Hinv[:, P] = 0, 0, 0
            removed[picked] = True
    kept = torch.nonzero(~removed).flatten()
    rows = rows_of(kept, group_size)
    new = torch.zeros_like(B)
    new[rows] = torch.linalg.solve(H[rows][:, rows], G[rows])
    return kept, new.t().to(weight.dtype)
