"""LLM-Pruner's settings (horseee/LLM-Pruner `llama3.py` / `hf_prune.py` arguments), typed and validated."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch.nn as nn

from nirvana.errors import InvalidInput
from nirvana.methods.base import MethodConfig
from nirvana.models.shapes import ModelShape

# `--taylor`: how W and its gradient G make an element's salience (TaylorImportance in
# LLMPruner/pruner/hf_llama_pruner.py), and `--grouping_strategy`: how a group's vectors combine.
TAYLOR_VARIANTS = ("param_first", "param_second", "param_mix", "vectorize")
SECOND_ORDER = ("param_second", "param_mix")  # these accumulate per-example squared gradients (acc_grad)
GROUP_REDUCTIONS = ("sum", "mean", "max", "prod")
# How a KV group is credited with its query heads' importance: "group" = the heads HF's repeat_kv
# gives it (query head h reads KV head h // g, the heads the reference removes with it);
# "strided" = the reference's alignment `imp.view(len // min, min).sum(0)`, which adds query
# channel c to KV channel c mod (Hkv d), i.e. heads m, m + Hkv, ... (docs/BASELINES.md).
QUERY_CREDITS = ("group", "strided")


def default_layer_range(num_layers: int) -> tuple[int, int]:
    """[start, end) of the pruned layers: the reference's 4..30 of 32 layers, scaled (4..28 of 30).

    The reference scripts leave the first 4 and the last 2 of 32 layers (Llama-7B, Llama-3-8B) and
    4 / 2 of 28 (Llama-3.2-3B); that is 1/8 at the start and 1/16 at the end, at least one each.
    """
    return max(1, round(num_layers / 8)), num_layers - max(1, round(num_layers / 16))


@dataclass(frozen=True)
class LLMPrunerConfig(MethodConfig):
    """`taylor`: salience variant (reference default for Llama-3: param_first). `group_reduction`: how
    the coupled projections' vectors add up (reference default: sum). `attn_layers` / `mlp_layers`:
    [start, end) of the layers whose KV groups / neurons are pruned (None: `default_layer_range`).
    `pruning_ratio`: the per-layer channel ratio; None solves it from the target sparsity, to within
    `tolerance` of block sparsity. `query_credit`: see QUERY_CREDITS.
    """

    taylor: str = "param_first"
    group_reduction: str = "sum"
    attn_layers: tuple[int, int] | None = None
    mlp_layers: tuple[int, int] | None = None
    pruning_ratio: float | None = None
    tolerance: float = 0.01
    query_credit: str = "group"

    def __post_init__(self) -> None:
        for name, value, accepted in (
            ("taylor", self.taylor, TAYLOR_VARIANTS),
            ("group_reduction", self.group_reduction, GROUP_REDUCTIONS),
            ("query_credit", self.query_credit, QUERY_CREDITS),
        ):
            if value not in accepted:
                raise InvalidInput(f"llm-pruner {name} must be one of {', '.join(accepted)}, got {value!r}.")
        for name in ("attn_layers", "mlp_layers"):
            value = getattr(self, name)
            ok = value is None or (
                isinstance(value, tuple)
                and len(value) == 2
                and all(isinstance(v, int) and not isinstance(v, bool) for v in value)
            )
            if not ok:
                raise InvalidInput(f"llm-pruner {name} must be [start, end] (two integers) or null, got {value!r}.")
        r = self.pruning_ratio
        if r is not None and (isinstance(r, bool) or not isinstance(r, (int, float)) or not 0 <= r < 1):
            raise InvalidInput(f"llm-pruner pruning_ratio must be a number in [0, 1) or null (solved), got {r!r}.")
        t = self.tolerance
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t) or not 0 < t <= 0.1:
            raise InvalidInput(f"llm-pruner tolerance must be a number in (0, 0.1] (of block sparsity), got {t!r}.")

    def score_key(self) -> dict:
        return {"taylor": self.taylor, "group_reduction": self.group_reduction, "query_credit": self.query_credit}

    def layer_ranges(self, num_layers: int) -> tuple[tuple[int, int], tuple[int, int]]:
        default = default_layer_range(num_layers)
        return self.attn_layers or default, self.mlp_layers or default

    def check(self, model: nn.Module, shape: ModelShape, sparsity: float) -> None:
        """Layer ranges inside [1, L - 1] (the first and last layers are never pruned), and the target reachable."""
        from_ranges = self.layer_ranges(shape.num_layers)
        last = shape.num_layers - 1
        for name, (start, end) in zip(("attn_layers", "mlp_layers"), from_ranges):
            if not 1 <= start <= end <= last:
                raise InvalidInput(
                    f"llm-pruner {name} [{start}, {end}) is outside what this {shape.num_layers}-layer model allows: "
                    f"1 <= start <= end <= {last} (the first and last layers are never pruned); the default is "
                    f"{list(default_layer_range(shape.num_layers))}."
                )
