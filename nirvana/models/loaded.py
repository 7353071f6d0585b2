"""The result of loading: a model, its tokenizer and where they came from."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass
class LoadedModel:
    """A model, its tokenizer and where they came from."""

    model: torch.nn.Module
    tokenizer: object
    name: str
    source: str  # "registry:<name>", "hub", "local", "pruned"
    load_seconds: float
    notes: list[str] = field(default_factory=list)
    plan: dict | None = None  # the pruning plan, for directories written by save_pruned
    import_seconds: float = 0.0  # one-time Python import of the model's transformers modules (not in load_seconds)
