"""What a pruning method is, as one typed row: how units are scored, how the budget is allocated,
and what is done after slicing.

Every method scores the same units (KV groups `attn: [L, Hkv]`, MLP neurons `mlp: [L, I]`), turns
those scores into a `PruningPlan` at a target block sparsity, and is sliced by the same
`apply_plan`. What differs is the row: its scorer, its allocation, and an optional compensation
(FLAP adds a bias to o_proj / down_proj for what was removed). Each method's settings are a
`MethodConfig` dataclass that validates in `__post_init__` and round-trips through JSON, the way
peft's tuner configs do; the plan stores them (`PlanSettings.method_settings`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, fields

import torch
import torch.nn as nn

from nirvana.errors import InvalidInput
from nirvana.models.shapes import ModelShape
from nirvana.pruning.allocation import default_gamma, plan_stats
from nirvana.pruning.plan import LayerPlan, PlanSettings, PruningPlan

Biases = dict[int, dict[str, torch.Tensor]]  # layer_idx -> {"o_proj": [D], "down_proj": [D]}


@dataclass(frozen=True)
class MethodConfig:
    """Base of a method's settings. Subclasses add fields and validate them in `__post_init__`."""

    def to_dict(self) -> dict:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}

    @classmethod
    def from_dict(cls, data: dict | None, method: str = "") -> MethodConfig:
        """Build from JSON (`None` = defaults); unknown keys are refused with the accepted ones listed."""
        data = dict(data or {})
        names = [f.name for f in fields(cls)]
        unknown = sorted(set(data) - set(names))
        if unknown:
            raise InvalidInput(
                f"{', '.join(unknown)} {'is not a setting' if len(unknown) == 1 else 'are not settings'} of method "
                f"{method or cls.__name__!r}; accepted: {', '.join(names) or 'none'}."
            )
        for f in fields(cls):
            if isinstance(data.get(f.name), list):
                data[f.name] = tuple(data[f.name])
        return cls(**data)

    def score_key(self) -> dict:
        """The settings that change the scores (part of the score cache key); the rest only change allocation."""
        return {}

    def check(self, model: nn.Module, shape: ModelShape, sparsity: float) -> None:
        """Model-dependent checks (layer ranges, existing biases, reachable sparsity), before any scoring."""


@dataclass(frozen=True)
class Rotation:
    """The steps of a method that transforms the model on data instead of cutting scored units (SliceGPT).

    `plan(model, sparsity, config, calibration) -> PruningPlan`: the widths, from shapes alone.
    `apply(model, plan, batch, *, inplace, micro_batch, progress) -> model`: the transform, forward
    passes on the calibration batch.
    """

    plan: Callable
    apply: Callable


@dataclass(frozen=True)
class Method:
    """One pruning method: scorer, allocation and compensation, plus how people see it.

    `score(model, batch, config, micro_batch, progress) -> (attn [L, Hkv], mlp [L, I], extra)`.
    `allocate(scores, shape, sparsity, config) -> PruningPlan`.
    `compensate(dense_model, plan, scores, config) -> Biases | None`: run on the dense model before
    slicing (it reads the weights that slicing removes); the biases are added to the sliced copy.
    `memory(model_config, config, samples=N, seq_len=T, ...) -> MemoryEstimate`: what `score` adds
    on top of the weights (nirvana.guard.memory), checked before any scoring.
    """

    name: str
    label: str
    config: type[MethodConfig]
    score: Callable | None  # None: the method has its own path (NIRVANA goes through its criteria table)
    allocate: Callable | None
    compensate: Callable | None
    check: Callable | None  # (model, shape, sparsity, config) -> None; raises InvalidInput before any scoring
    needs_data: bool
    uses_gradients: bool  # a backward pass
    # (model_config, settings, *, samples, seq_len, micro_batch, dtype, device, quantization) -> MemoryEstimate:
    # the planned peak of `score` above the loaded weights, which the memory guard checks before scoring.
    memory: Callable
    color: str
    description: str  # one line: what it does differently from NIRVANA
    reference: str  # the repository and files it follows (docs/BASELINES.md)
    explain: str  # "how to read it": two sentences on what it does differently from NIRVANA (app, help, docs)
    rotation: Rotation | None = None  # set instead of score/allocate/compensate (SliceGPT)
    # (config) -> nirvana.scoring.distributed.ShardedScorer: `score` split for FSDP2 (--distributed); None: one process
    sharded: Callable | None = None


def check_sparsity_value(sparsity: float) -> None:
    if isinstance(sparsity, bool) or not isinstance(sparsity, (int, float)) or not 0 <= sparsity < 1:
        raise InvalidInput(
            f"sparsity must be a number in [0, 1) (fraction of block weights removed), got {sparsity!r}."
        )


def build_plan(
    scores,
    shape: ModelShape,
    sparsity: float,
    method: str,
    config: MethodConfig,
    kept_kv_groups: list[list[int]],
    kept_neurons: list[list[int]],
    *,
    allocation: str,
    stats: dict | None = None,
):
    """A `PruningPlan` from per-layer kept indices, with the method and its settings recorded.

    `gamma` does not apply to these methods; the plan carries the analytic gamma* so old readers
    of `settings.gamma` keep working, and its notes say that it was not used.
    """
    from_default = default_gamma(shape)
    settings = PlanSettings(
        sparsity,
        from_default,
        from_default,
        align=1,
        allocation=allocation,
        criterion=method,
        calibration=scores.calibration,
        method=method,
        method_settings=config.to_dict(),
    )
    layers = [LayerPlan(i, sorted(a), sorted(m)) for i, (a, m) in enumerate(zip(kept_kv_groups, kept_neurons))]
    all_stats = plan_stats(shape, layers)
    all_stats.update(stats or {})
    all_stats["notes"] = [*all_stats.get("notes", []), f"gamma does not apply to method {method!r} (not used)"]
    plan = PruningPlan(scores.fingerprint, shape.to_dict(), settings, layers, all_stats)
    plan.validate()
    return plan
