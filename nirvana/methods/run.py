"""The steps of a baseline method (LLM-Pruner, FLAP, SliceGPT) by name and config, for the callers that hold
one config and many sparsities (the benchmarks, the sweeps, the app's comparisons). Each is the method's own
step (`nirvana.methods.base.Method`); `nirvana.pipeline.prune` runs the same steps from `PruneSettings`.

    config = method_config("flap")
    scores = method_scores(model, "flap", config, batch)                # disk cache, memory guard
    plan = method_plan(scores, model_shape(model), 0.2, "flap", config)
    pruned = apply_method_plan(model, plan, scores)                    # sliced + FLAP's biases
"""

from __future__ import annotations

import torch.nn as nn

from nirvana.data.calibration import CalibrationBatch
from nirvana.methods import get_method, method_config
from nirvana.methods.base import MethodConfig
from nirvana.models.shapes import ModelShape, model_shape
from nirvana.progress import Progress
from nirvana.pruning.plan import PruningPlan
from nirvana.pruning.slicing import measure_plan
from nirvana.scoring.scores import Scores


def check_method(model: nn.Module, name: str, config: MethodConfig, sparsity: float) -> None:
    """Everything that can be refused before scoring: the sparsity, the model, the method's settings."""
    get_method(name).check_config(model, model_shape(model), sparsity, config)


def method_scores(
    model: nn.Module,
    name: str,
    config: MethodConfig,
    batch: CalibrationBatch,
    *,
    micro_batch: int = 0,
    use_cache: bool = True,
    progress: Progress = None,
) -> Scores:
    """The method's unit scores on `batch` (cached under its name and the settings that change them)."""
    return get_method(name).scores(
        model, config, batch, micro_batch=micro_batch, use_cache=use_cache, progress=progress
    )


def method_plan(scores: Scores, shape: ModelShape, sparsity: float, name: str, config: MethodConfig) -> PruningPlan:
    """The method's allocation of `scores` at a target block sparsity."""
    return get_method(name).allocate(scores, shape, sparsity, config)


def data_plan(model: nn.Module, name: str, config: MethodConfig, sparsity: float, batch: CalibrationBatch | None,
              *, progress: Progress = None):  # fmt: skip
    """The plan of a method without unit scores at `sparsity`: SliceGPT's widths (from shapes alone), Tyr's search
    (on `batch`)."""
    return get_method(name).plan_on_data(model, sparsity, config, batch, progress=progress)


def apply_method_plan(
    model: nn.Module,
    plan: PruningPlan,
    scores: Scores | None = None,
    *,
    inplace: bool = False,
    batch: CalibrationBatch | None = None,
    micro_batch: int = 0,
    progress: Progress = None,
):
    """Slice `model` to `plan` the way the plan's method does (FLAP adds its compensation biases, computed on the
    dense weights from the scores' statistics; SliceGPT rotates on `batch`)."""
    method = get_method(plan.settings.method)
    method_config(method.name, plan.settings.method_settings)  # bad settings in the plan: InvalidInput
    return method.apply(
        model, plan, scores=scores, batch=batch, inplace=inplace, micro_batch=micro_batch, progress=progress
    )


def method_prune_and_measure(
    model: nn.Module, scores: Scores, measure, sparsity: float, name: str, config, *, shape=None, memo=None
):
    """(plan, measure(pruned copy)): one sweep point of a baseline, its copy freed afterwards
    (`nirvana.pruning.slicing.prune_and_measure` is NIRVANA's). With `memo` (plan signature ->
    result), a plan already measured is not sliced again."""
    plan = method_plan(scores, shape or model_shape(model), sparsity, name, config)
    return plan, measure_plan(plan, lambda: apply_method_plan(model, plan, scores), measure, memo)


def data_prune_and_measure(
    model: nn.Module, batch: CalibrationBatch, measure, sparsity: float, name: str, config, *, memo=None
):
    """(plan, measure(pruned copy)): one sweep point of a method without unit scores, planned and applied afresh on
    `batch` (SliceGPT: rotated layer by layer; Tyr: searched, then reconstructed), its copy freed afterwards."""
    plan = data_plan(model, name, config, sparsity, batch)
    return plan, measure_plan(plan, lambda: apply_method_plan(model, plan, batch=batch), measure, memo)
