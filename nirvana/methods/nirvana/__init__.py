"""NIRVANA (arXiv 2509.14230) as a method on the same protocol as the baselines. Its scoring and
allocation are the library's own (`nirvana.scoring.criteria`, `nirvana.pruning.allocation`), with
the top-level settings (criterion, gamma, align, allocation, KL-guided calibration): the criteria
stay selectable inside it as the ablations they are."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import ClassVar

import torch.nn as nn

from nirvana.errors import InvalidInput
from nirvana.guard.memory import MemoryEstimate, estimate_scoring
from nirvana.methods.base import Method, MethodConfig
from nirvana.models.shapes import ModelShape
from nirvana.pruning.allocation import Allocation, allocate
from nirvana.pruning.plan import ALLOCATIONS, SCOPES, PruningPlan, check_align, check_gamma
from nirvana.pruning.slicing import apply_plan
from nirvana.scoring.criteria import CRITERIA, DEFAULT_CRITERION, compute_scores
from nirvana.scoring.distributed import gradient_scorer
from nirvana.scoring.scores import Scores, check_scores_match


@dataclass(frozen=True)
class NirvanaConfig(MethodConfig):
    """NIRVANA's settings: the saliency `criterion` (the paper's `nirvana`; the others in `CRITERIA` are its
    ablations), the allocation (`gamma`: None = the model's gamma*; `align`; `allocation`: "global" or "uniform",
    a T5's scopes "global" or "per-stack") and KL-guided calibration (`select_calib` candidate batches, 0 = off).

    `PruneSettings` builds it from its flat fields (the CLI's flags); a baseline refuses those fields unless they
    keep these defaults. A plan and a benchmark row record these settings in their own columns (criterion, gamma,
    align, allocation), so `recorded()` is empty: NIRVANA's `method_settings` stay `{}` in every file.
    """

    criterion: str = DEFAULT_CRITERION
    gamma: float | None = None
    align: int = 8
    allocation: str = "global"
    select_calib: int = 0

    def __post_init__(self) -> None:
        if self.criterion not in CRITERIA:
            raise InvalidInput(f"unknown criterion {self.criterion!r}; accepted: {', '.join(CRITERIA)}.")
        if self.gamma is not None:
            check_gamma(self.gamma, None)
        check_align(self.align)
        if self.allocation not in (*ALLOCATIONS, *SCOPES):
            raise InvalidInput(
                f"allocation must be one of {', '.join(ALLOCATIONS)} (a T5: {', '.join(SCOPES)}), got "
                f"{self.allocation!r}."
            )
        value = self.select_calib
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise InvalidInput(f"select_calib must be a non-negative integer, got {value!r}.")
        if value == 1:
            raise InvalidInput("select_calib needs at least 2 candidate batches to choose from (or 0 for off).")

    def recorded(self) -> dict:
        return {}

    def allocation_at(self, sparsity: float) -> Allocation:
        """The allocation of these settings at `sparsity` (checked; `resolve(shape)` fills gamma*)."""
        return Allocation(sparsity, self.gamma, self.align, self.allocation)


def nirvana_memory(model_config, settings: NirvanaConfig, **sizes) -> MemoryEstimate:
    """The saliency's backward pass on the autograd path (`nirvana.scoring.criteria.compute_scores` checks
    the path and criterion it resolves: hooks, or a forward-only criterion, plan less)."""
    return estimate_scoring(model_config, method="autograd", backward=True, **sizes)


@dataclass(frozen=True, kw_only=True)
class NirvanaMethod(Method):
    """Saliency of a criterion (`CRITERIA`), one global ranking per unit kind split by gamma, slicing."""

    has_allocation_settings: ClassVar[bool] = True

    def config_from(self, settings) -> NirvanaConfig:
        if settings.method_settings:
            raise InvalidInput(
                f"method nirvana takes its settings as the pruning settings' own fields ({', '.join(NIRVANA_FIELDS)}; "
                f"the CLI's flags), not as method_settings; got method_settings {settings.method_settings!r}."
            )
        return NirvanaConfig(**{name: getattr(settings, name) for name in NIRVANA_FIELDS})

    def needs_data_for(self, settings) -> bool:
        return CRITERIA[settings.criterion].needs_data

    def check(self, model: nn.Module, shape: ModelShape, settings) -> Allocation:
        return settings.config.allocation_at(settings.sparsity).resolve(shape)  # bad settings fail before scoring

    def check_config(self, model: nn.Module, shape: ModelShape, sparsity: float, config: MethodConfig) -> None:
        config.allocation_at(sparsity).resolve(shape)

    def check_target(self, sparsity: float, config: MethodConfig) -> None:
        config.allocation_at(sparsity)  # sparsity in [0, MAX_SPARSITY], gamma, align, allocation kind

    def score(self, model: nn.Module, settings, batch, progress=None) -> Scores:
        return self.scores(
            model, settings.config, batch, micro_batch=settings.micro_batch, use_cache=settings.use_cache,
            progress=progress, seed=settings.seed, checkpoint=settings.checkpoint,
        )  # fmt: skip

    def scores(
        self, model, config, batch, *, micro_batch=0, use_cache=True, progress=None, seed=0, checkpoint=None
    ) -> Scores:
        """The saliency of `config.criterion` (`nirvana.scoring.criteria.compute_scores`: disk cache, memory
        guard); `seed`: a data-free criterion's draw; `checkpoint`: activation checkpointing (None: planned)."""
        return compute_scores(
            model, config.criterion, batch, seed=seed, micro_batch=micro_batch, use_cache=use_cache,
            progress=progress, checkpoint=checkpoint,
        )  # fmt: skip

    def take_scores(self, scores: Scores, model: nn.Module) -> None:
        check_scores_match(scores, model)
        if scores.criterion not in CRITERIA:  # a baseline's scores: its own allocation reads them
            raise InvalidInput(
                f"these scores were computed by method {scores.criterion!r}; prune them with "
                f"--method {scores.criterion} (NIRVANA's allocation would read them as saliency)."
            )

    def plan(self, model: nn.Module, shape: ModelShape, settings, scores: Scores, batch, resolved=None, progress=None):
        return allocate(scores, shape, resolved or settings.config.allocation_at(settings.sparsity).resolve(shape))

    def allocate(self, scores: Scores, shape: ModelShape, sparsity: float, config: MethodConfig) -> PruningPlan:
        """One global ranking per unit kind at `sparsity`, split by the config's gamma (nirvana.pruning.allocation)."""
        return allocate(scores, shape, config.allocation_at(sparsity).resolve(shape))

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
    description="function-space saliency |dF/dW * W|; KV groups and neurons ranked across all layers, split by gamma",
    reference="the paper's own method (docs: docs/METHOD.md)",
)

NIRVANA_FIELDS = tuple(f.name for f in fields(NirvanaConfig))  # PruneSettings' fields that are NIRVANA's settings

__all__ = ["METHOD", "NIRVANA_FIELDS", "NirvanaConfig"]
