"""NIRVANA (arXiv 2509.14230) as a method on the same protocol as the baselines. Its scoring and
allocation are the library's own (`nirvana.scoring.criteria`, `nirvana.pruning.allocation`), with
the top-level settings (criterion, gamma, align, allocation, KL-guided calibration): the criteria
stay selectable inside it as the ablations they are."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch.nn as nn

from nirvana.errors import InvalidInput
from nirvana.guard.memory import MemoryEstimate, estimate_scoring
from nirvana.methods.base import Method, MethodConfig
from nirvana.models.shapes import ModelShape
from nirvana.pruning.allocation import Allocation, allocate
from nirvana.pruning.plan import PruningPlan
from nirvana.pruning.slicing import apply_plan
from nirvana.scoring.criteria import CRITERIA, compute_scores
from nirvana.scoring.distributed import gradient_scorer
from nirvana.scoring.scores import Scores, check_scores_match


@dataclass(frozen=True)
class NirvanaConfig(MethodConfig):
    """No settings of its own: criterion, gamma, align and allocation are `PruneSettings` fields."""


def nirvana_memory(model_config, settings: NirvanaConfig, **sizes) -> MemoryEstimate:
    """The saliency's backward pass on the autograd path (`nirvana.scoring.criteria.compute_scores` checks
    the path and criterion it resolves: hooks, or a forward-only criterion, plan less)."""
    return estimate_scoring(model_config, method="autograd", backward=True, **sizes)


@dataclass(frozen=True, kw_only=True)
class NirvanaMethod(Method):
    """Saliency of a criterion (`CRITERIA`), one global ranking per unit kind split by gamma, slicing."""

    has_allocation_settings: ClassVar[bool] = True

    def needs_data_for(self, settings) -> bool:
        return CRITERIA[settings.criterion].needs_data

    def check(self, model: nn.Module, shape: ModelShape, settings) -> Allocation:
        return settings.allocation_settings.resolve(shape)  # bad settings fail here, before scoring

    def check_config(self, model: nn.Module, shape: ModelShape, sparsity: float, config: MethodConfig) -> None:
        raise InvalidInput(f"method {self.name!r} is checked by its pruning settings (`PruneSettings`): use `check`.")

    def score(self, model: nn.Module, settings, batch, progress=None) -> Scores:
        return compute_scores(
            model,
            settings.criterion,
            batch,
            seed=settings.seed,
            micro_batch=settings.micro_batch,
            use_cache=settings.use_cache,
            progress=progress,
            checkpoint=settings.checkpoint,
        )

    def take_scores(self, scores: Scores, model: nn.Module) -> None:
        check_scores_match(scores, model)
        if scores.criterion not in CRITERIA:  # a baseline's scores: its own allocation reads them
            raise InvalidInput(
                f"these scores were computed by method {scores.criterion!r}; prune them with "
                f"--method {scores.criterion} (NIRVANA's allocation would read them as saliency)."
            )

    def plan(self, model: nn.Module, shape: ModelShape, settings, scores: Scores, batch, resolved=None) -> PruningPlan:
        return allocate(scores, shape, resolved or settings.allocation_settings.resolve(shape))

    def take_plan(self, plan: PruningPlan, model: nn.Module, batch) -> None:
        pass  # `apply_plan` checks the fingerprint

    def apply(self, model, plan, *, scores=None, batch=None, inplace=False, micro_batch=0, progress=None):
        return apply_plan(model, plan, inplace=inplace)

    def sharded_scoring(self, settings):
        return gradient_scorer(settings.criterion), None


METHOD = NirvanaMethod(
    name="nirvana",
    label="NIRVANA",
    config=NirvanaConfig,
    needs_data=True,
    uses_gradients=True,
    memory=nirvana_memory,
    color="#1f77b4",
    description="function-space saliency |dF/dW * W|; KV groups and neurons ranked across all layers, split by gamma",
    reference="the paper's own method (docs: docs/METHOD.md)",
    explain="The reference the other methods are read against: each unit's score is how much the model's output "
    "(its max logits, no labels) moves when the unit's weights go, |dF/dW * W|. KV groups and neurons are ranked "
    "across all layers at once and split by gamma, so how much each layer loses follows from the scores.",
)

__all__ = ["METHOD", "NirvanaConfig"]
