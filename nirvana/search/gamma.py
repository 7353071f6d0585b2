"""Gamma search (beyond the paper): KL to dense on the anchor set over a grid of gamma values.

The paper fixes gamma analytically (gamma* = 3.36 for Llama-3.1-8B) or by hand (3.0 for
Llama-3.2-3B). Here, with scores already computed, every (sparsity, gamma) point is only an
allocation (~10 ms), a slice and one forward over the anchor set: no backward pass, no new
scores. The point with the lowest KL(P_dense || P_pruned) is reported per sparsity.
Points whose plans are identical (e.g. two gammas that round to the same unit counts) share
one KL measurement. Every point also carries its paired difference to gamma* (`vs_default`: the mean
and standard error over anchor sequences of KL(point) - KL(gamma*), each sequence measured under both
plans), so "the best gamma beats gamma*" is a claim with an error bar.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from nirvana.errors import InvalidInput
from nirvana.measure.kl import DenseReference, kl_per_sequence
from nirvana.measure.paired import paired_or_none
from nirvana.models.shapes import model_shape
from nirvana.progress import Progress
from nirvana.pruning.allocation import Allocation, default_gamma
from nirvana.pruning.slicing import prune_and_measure
from nirvana.scoring.scores import Scores

DEFAULT_GAMMAS = (0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)


@dataclass
class GammaPoint:
    sparsity: float
    gamma: float
    kl: float  # mean nats per anchor token
    achieved_block_sparsity: float
    kv_groups_pruned: int
    neurons_pruned: int
    notes: list[str] = field(default_factory=list)
    # KL(this point) - KL(gamma*) paired over anchor sequences: {"mean", "stderr", "n"}; None off gamma*'s grid
    vs_default: dict | None = None


@dataclass
class GammaSearch:
    """The KL curve over gamma (per sparsity) and the best gamma of each sparsity."""

    criterion: str
    fingerprint: str
    gamma_default: float
    allocation: str
    align: int
    anchor_tokens: int
    points: list[GammaPoint]

    def best(self, sparsity: float) -> GammaPoint:
        return min((p for p in self.points if p.sparsity == sparsity), key=lambda p: (p.kl, p.gamma))

    @property
    def sparsities(self) -> list[float]:
        return sorted({p.sparsity for p in self.points})

    def to_dict(self) -> dict:
        return {**asdict(self), "best": {str(s): asdict(self.best(s)) for s in self.sparsities}}


def gamma_grid(shape, gammas=None) -> list[float]:
    """The requested gammas, or the default grid plus the analytic gamma*, sorted and distinct."""
    values = [*DEFAULT_GAMMAS, round(default_gamma(shape), 4)] if gammas is None else list(gammas)
    if not values or any(not isinstance(g, (int, float)) or not g > 0 for g in values):
        raise InvalidInput(f"gammas must be positive numbers, got {values!r}.")
    return sorted(set(float(g) for g in values))


def gamma_search(
    model,
    scores: Scores,
    reference: DenseReference,
    *,
    gammas: list[float] | None = None,
    sparsities: tuple[float, ...] | list[float] = (0.2,),
    align: int = 8,
    allocation: str = "global",
    progress: Progress = None,
) -> GammaSearch:
    """KL to dense for every (sparsity, gamma) from the given, already-computed scores.

    Example:
        >>> result = gamma_search(model, scores, DenseReference(model, anchor.input_ids), sparsities=[0.2])
        >>> result.best(0.2).gamma
    """
    shape = model_shape(model)
    grid = gamma_grid(shape, gammas)
    star = round(default_gamma(shape), 4)  # gamma*'s grid value (`gamma_grid` adds it rounded so)
    points, measured = [], {}  # plan signature -> per-sequence KL: identical plans share one measurement
    total = len(grid) * len(sparsities)
    for s_idx, sparsity in enumerate(sparsities):
        per_sequence = {}
        for g_idx, gamma in enumerate(grid):
            step = s_idx * len(grid) + g_idx
            plan, per_sequence[gamma] = prune_and_measure(
                model,
                scores,
                lambda pruned: kl_per_sequence(pruned, reference),
                Allocation(sparsity, gamma, align, allocation),
                shape=shape,
                memo=measured,
            )
            kl = float(per_sequence[gamma].mean())
            points.append(
                GammaPoint(
                    sparsity,
                    gamma,
                    kl,
                    plan.stats["achieved_block_sparsity"],
                    plan.stats["kv_groups_pruned"],
                    plan.stats["neurons_pruned"],
                    list(plan.stats.get("notes", [])),
                )
            )
            if progress:
                progress((step + 1) / total, f"sparsity {sparsity:g}, gamma {gamma:g}: KL {kl:.5f}")
        if star in per_sequence:  # an anchor of one sequence has no error: paired_or_none gives None
            for point in points[-len(grid) :]:
                point.vs_default = paired_or_none(per_sequence[point.gamma].tolist(), per_sequence[star].tolist())
    return GammaSearch(
        scores.criterion, scores.fingerprint, default_gamma(shape), allocation, align, reference.num_tokens, points
    )
