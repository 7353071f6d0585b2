"""NIRVANA (arXiv 2509.14230) as a method row. Its scoring and allocation are the library's own
(`nirvana.scoring.criteria`, `nirvana.pruning.allocation`), reached through the pipeline with the
top-level settings (criterion, gamma, align, allocation): the criteria stay selectable inside it
as the ablations they are. The row is here so that the CLI, the app and the docs list it beside
the baselines."""

from __future__ import annotations

from dataclasses import dataclass

from nirvana.guard.memory import MemoryEstimate, estimate_scoring
from nirvana.methods.base import Method, MethodConfig


@dataclass(frozen=True)
class NirvanaConfig(MethodConfig):
    """No settings of its own: criterion, gamma, align and allocation are `PruneSettings` fields."""


def nirvana_memory(model_config, settings: NirvanaConfig, **sizes) -> MemoryEstimate:
    """The saliency's backward pass on the autograd path (`nirvana.scoring.criteria.compute_scores` checks
    the path and criterion it resolves: hooks, or a forward-only criterion, plan less)."""
    return estimate_scoring(model_config, method="autograd", backward=True, **sizes)


METHOD = Method(
    name="nirvana",
    label="NIRVANA",
    config=NirvanaConfig,
    score=None,
    allocate=None,
    compensate=None,
    check=None,
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
