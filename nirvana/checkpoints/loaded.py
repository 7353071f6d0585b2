"""The result of loading: a model, its tokenizer and where they came from."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import torch

from nirvana.errors import CorruptCheckpoint, InvalidInput, PlanMismatch
from nirvana.pruning.plan import PruningPlan

PLAN_FILE = "plan.json"  # the pruning plan, beside the weights of a folder `save_pruned` writes


def read_plan(directory: Path) -> PruningPlan | None:
    """The plan saved in a pruned checkpoint's folder, None where there is none; a damaged one is
    `CorruptCheckpoint` (the folder is not what it says it is)."""
    path = Path(directory) / PLAN_FILE
    if not path.exists():
        return None
    try:
        return PruningPlan.load(path)
    except PlanMismatch as exc:
        raise CorruptCheckpoint(f"{str(path)!r} is damaged: {exc}") from exc


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
