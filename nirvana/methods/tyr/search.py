"""Tyr-the-Pruner's search over per-module sparsities (search_sparsity_dist.py; docs/notes/tyr-reference.md
section 6): the level grid, the mutation that keeps each module type's budget, the stages' minibatches and the
sparse KL to the dense model.

A state is one level per module (every layer's attention, then every layer's MLP); level 0 is the centre.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Grid:
    """One module's levels: `removed(level)` units of `units` for level in [-lo, hi], `step` units apart around
    `centre`. At most `half` levels on each side, never below 0 removed nor above `units - 1` (one unit stays:
    a layer keeps at least one KV group and one neuron to be sliced; the reference also allows removing all)."""

    units: int
    centre: int
    step: int
    half: int

    @property
    def lo(self) -> int:
        return min(self.centre // self.step, self.half)

    @property
    def hi(self) -> int:
        return min((self.units - 1 - self.centre) // self.step, self.half)

    @property
    def levels(self) -> range:
        return range(-self.lo, self.hi + 1)

    def removed(self, level: int) -> int:
        return self.centre + level * self.step


def mutate(state: Sequence[int], types: Sequence[str], bounds: Sequence[tuple[int, int]], rng: random.Random):
    """One offspring: min(randint(1, 4), randint(1, 4)) flips, each moving one module a level down (denser) and one
    module of the same type a level up; every module of a type has the same step, so the type's budget is kept.
    The draws are the reference's, in its order: a module until its level can go down, then one until it has the
    same type and its level can go up (the same module may come twice: a no-op flip). Beyond the reference, a
    module is only drawn to go down when a module of its type can go up (where none can, the reference's loop
    never ends), and a state with no such module is returned unchanged."""
    child, n = list(state), len(state)

    def can(i: int, step: int) -> bool:
        return bounds[i][0] <= child[i] + step <= bounds[i][1]

    for _ in range(min(rng.randint(1, 4), rng.randint(1, 4))):
        open_types = {types[i] for i in range(n) if can(i, +1)}
        if not any(can(i, -1) and types[i] in open_types for i in range(n)):
            break
        while True:
            down = rng.randint(0, n - 1)
            if can(down, -1) and types[down] in open_types:
                break
        while True:
            up = rng.randint(0, n - 1)
            if types[up] == types[down] and can(up, +1):
                break
        child[down] -= 1
        child[up] += 1
    return child


def offspring(parent: Sequence[int], count: int, types, bounds, rng: random.Random, *, tries: int = 10000):
    """Up to `count` distinct mutants of `parent` (fewer when the grid has fewer: a small model's)."""
    out: list[list[int]] = []
    for _ in range(tries):
        if len(out) == count:
            break
        child = mutate(parent, types, bounds, rng)
        if child not in out:
            out.append(child)
    return out


def minibatch(lengths: Sequence[int], tokens: int, rng: random.Random) -> list[tuple[int, int]]:
    """[(sequence, tokens used)]: distinct random sequences until `tokens` are reached, the last one cut (the
    reference's `selection`: a uniform draw, again while it hits a sequence already taken). A budget above the
    batch's tokens takes every sequence once."""
    chosen, seen, used = [], set(), 0
    while used < tokens and len(seen) < len(lengths):
        j = rng.randint(0, len(lengths) - 1)
        if j in seen:
            continue
        seen.add(j)
        take = min(lengths[j], tokens - used)
        chosen.append((j, take))
        used += take
    return chosen


@torch.no_grad()
def dense_topk(logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The dense model's top-k logits and their ids, [B, T, k] each (float32, int32)."""
    values, ids = logits.float().topk(min(k, logits.shape[-1]), dim=-1)
    return values, ids.int()


@torch.no_grad()
def sparse_kl_sum(values: torch.Tensor, ids: torch.Tensor, logits: torch.Tensor) -> tuple[float, int]:
    """(sum of KL(dense || pruned) over positions, positions) on the dense top-k support: both distributions are
    renormalised over the k dense ids, the tail is dropped, the last position is not scored (src/metric_utils.py
    `compute_sparse_kl_div`). `values`, `ids`: [B, T, k]; `logits`: the pruned model's [B, T, V]."""
    q = logits.float().gather(-1, ids.long())[:, :-1].log_softmax(-1)
    p = values[:, :-1].log_softmax(-1)
    return float((p.exp() * (p - q)).sum()), p.shape[0] * p.shape[1]
