"""The result of loading: a model, its tokenizer and where they came from."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from nirvana.errors import InvalidInput
from nirvana.pruning.plan import PruningPlan
from nirvana.pruning.seq2seq_plan import Seq2SeqPlan, is_seq2seq_plan


@dataclass
class LoadedModel:
    """A model, its tokenizer and where they came from."""

    model: torch.nn.Module
    tokenizer: object
    name: str
    source: str  # "registry:<name>", "hub", "local", "pruned"
    load_seconds: float
    notes: list[str] = field(default_factory=list)
    plan: PruningPlan | Seq2SeqPlan | None = None  # the pruning plan, for directories written by save_pruned
    import_seconds: float = 0.0  # one-time Python import of the model's transformers modules (not in load_seconds)

    def __post_init__(self) -> None:
        if isinstance(self.plan, dict):  # a plan as JSON (plan.json, PruningPlan.to_dict(), Seq2SeqPlan.to_dict())
            self.plan = (Seq2SeqPlan if is_seq2seq_plan(self.plan) else PruningPlan).from_dict(self.plan)
        if self.plan is not None and not isinstance(self.plan, (PruningPlan, Seq2SeqPlan)):
            raise InvalidInput(
                f"LoadedModel.plan must be a PruningPlan, a Seq2SeqPlan or None, got {type(self.plan).__name__}."
            )
