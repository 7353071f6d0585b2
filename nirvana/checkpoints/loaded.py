"""The result of loading: a model, its tokenizer and where they came from."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from nirvana.errors import InvalidInput
from nirvana.pruning.plan import PruningPlan


@dataclass
class LoadedModel:
    """A model, its tokenizer and where they came from."""

    model: torch.nn.Module
    tokenizer: object
    name: str
    source: str  # "registry:<name>", "hub", "local", "pruned"
    load_seconds: float
    notes: list[str] = field(default_factory=list)
    plan: PruningPlan | None = None  # the pruning plan, for directories written by save_pruned
    import_seconds: float = 0.0  # one-time Python import of the model's transformers modules (not in load_seconds)

    def __post_init__(self) -> None:
        if isinstance(self.plan, dict):  # a plan as JSON (plan.json, PruningPlan.to_dict())
            self.plan = PruningPlan.from_dict(self.plan)
        if self.plan is not None and not isinstance(self.plan, PruningPlan):
            raise InvalidInput(f"LoadedModel.plan must be a PruningPlan or None, got {type(self.plan).__name__}.")
