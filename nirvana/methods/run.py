"""Score, allocate and slice with a baseline method (LLM-Pruner, FLAP): the steps every caller shares.

    config = method_config("flap")
    scores = method_scores(model, "flap", config, batch)                # disk cache, memory guard
    plan = method_plan(scores, model_shape(model), 0.2, "flap", config)
    pruned = apply_method_plan(model, plan, scores)                    # sliced + FLAP's biases

NIRVANA goes through `nirvana.scoring.criteria.compute_scores` and `nirvana.pruning.allocation`.
"""

from __future__ import annotations

import functools

import torch.nn as nn

from nirvana.data.calibration import CalibrationBatch
from nirvana.errors import InvalidInput
from nirvana.guard.memory import check_scoring_memory, choose_micro_batch, oom_guard
from nirvana.methods import get_method, method_config
from nirvana.methods.base import MethodConfig, check_sparsity_value
from nirvana.models.shapes import ModelShape, model_shape
from nirvana.progress import Progress
from nirvana.pruning.plan import PruningPlan
from nirvana.pruning.slicing import add_output_biases, apply_plan, measure_plan
from nirvana.scoring.objectives import output_head
from nirvana.scoring.scores import Scores, cached_scores


def _baseline(name: str):
    method = get_method(name)
    if method.score is None and method.rotation is None:
        raise InvalidInput(f"method {name!r} is scored by nirvana.scoring.criteria (the pipeline's default path).")
    return method


def _scored(name: str):
    method = _baseline(name)
    if method.rotation is not None:
        raise InvalidInput(
            f"method {name!r} has no unit scores: it rotates the model on calibration data when it prunes, layer by "
            f"layer. Use `prune --method {name}` (its plan holds the kept hidden width)."
        )
    return method


def check_method(model: nn.Module, name: str, config: MethodConfig, sparsity: float) -> None:
    """Everything that can be refused before scoring: the sparsity, the model, the method's settings."""
    check_sparsity_value(sparsity)
    method = _baseline(name)
    shape = model_shape(model)
    if not shape.is_uniform:
        raise InvalidInput("this model is already pruned (layers differ in width); prune the dense model instead.")
    if method.check is not None:
        method.check(model, shape, sparsity, config)


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
    method = _scored(name)
    if batch is None:
        raise InvalidInput(f"method {name!r} needs a calibration batch.")
    batch.check_vocab(model.get_input_embeddings().num_embeddings)
    calib = batch.describe()
    n, t = batch.input_ids.shape

    def plan() -> int:
        """The micro-batch: as given, or (gradient methods, a sum over sequences) chosen from the memory plan."""
        estimate = _memory_estimate(model, method, config)
        mb = micro_batch
        if not mb and method.uses_gradients:  # any micro-batch gives the same scores
            mb = choose_micro_batch(model, n, t, estimate=estimate)
        check_scoring_memory(model, n, t, micro_batch=mb, estimate=estimate)
        return mb

    def score(fingerprint: str, mb: int) -> Scores:
        attn, mlp, extra = method.score(model, batch, config, mb, progress)
        meta = {"cache_hit": False, "method_settings": config.score_key(), "micro_batch": mb or n}
        return Scores(attn.float().cpu(), mlp.float().cpu(), name, fingerprint, calib, meta, extra)

    return cached_scores(
        model, name, calib, config.score_key(), score, memory=plan, use_cache=use_cache, progress=progress
    )


def _memory_estimate(model: nn.Module, method, config: MethodConfig):
    """The method's memory plan (`Method.memory`) with its settings; gradient methods take the LM loss a
    vocabulary chunk at a time where the head allows it."""
    estimate = functools.partial(method.memory, settings=config)
    if method.uses_gradients:
        estimate = functools.partial(estimate, chunked_logits=output_head(model) is not None)
    return estimate


def method_plan(scores: Scores, shape: ModelShape, sparsity: float, name: str, config: MethodConfig) -> PruningPlan:
    """The method's allocation of `scores` at a target block sparsity."""
    check_sparsity_value(sparsity)
    if scores.criterion != name:
        raise InvalidInput(f"these scores were computed by {scores.criterion!r}, not by method {name!r}; rescore.")
    L, hkv, inter = shape.num_layers, shape.num_kv_heads[0], shape.intermediate[0]
    if tuple(scores.attn.shape) != (L, hkv) or tuple(scores.mlp.shape) != (L, inter):
        raise InvalidInput(
            f"scores have shapes attn {tuple(scores.attn.shape)}, mlp {tuple(scores.mlp.shape)} "
            f"but the model needs ({L}, {hkv}) and ({L}, {inter}); were they computed for another model?"
        )
    return _scored(name).allocate(scores, shape, sparsity, config)


def rotation_plan(model: nn.Module, name: str, config: MethodConfig, sparsity: float, batch: CalibrationBatch | None):
    """The plan of a rotating method (SliceGPT): its widths for the target, from shapes alone."""
    check_method(model, name, config, sparsity)
    return get_method(name).rotation.plan(model, sparsity, config, None if batch is None else batch.describe())


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
    """Slice `model` to `plan` and run the plan's method's compensation (FLAP: o_proj / down_proj biases).

    The compensation reads the dense weights, so it runs before slicing; FLAP's needs the scores'
    mean inputs (`Scores.extra`), i.e. the score file the plan was made from. A rotating method
    (SliceGPT) transforms the model on `batch` instead, after the memory check.
    """
    name = plan.settings.method
    method = get_method(name)
    config = method_config(name, plan.settings.method_settings)
    if method.rotation is not None:
        if batch is None:
            raise InvalidInput(f"method {name!r} rotates by the PCA of calibration activations: it needs a batch.")
        n, t = batch.input_ids.shape
        check_scoring_memory(model, n, t, micro_batch=micro_batch, estimate=_memory_estimate(model, method, config))
        with oom_guard(f"rotating ({name})"):
            return method.rotation.apply(
                model, plan, batch, inplace=inplace, micro_batch=micro_batch, progress=progress
            )
    biases = None
    if method.compensate is not None:
        needed = ("attn_mean_inp", "mlp_mean_inp")
        if scores is None or any(k not in scores.extra for k in needed):
            raise InvalidInput(
                f"a {method.label} plan adds biases computed from its calibration statistics; pass the score file it "
                f"was made from (`score --method {name} --out F`, then `prune --plan P --scores F`), or prune again."
            )
        biases = method.compensate(model, plan, scores, config)
    pruned = apply_plan(model, plan, inplace=inplace)
    if biases:
        add_output_biases(pruned, biases)
    return pruned


def method_prune_and_measure(
    model: nn.Module, scores: Scores, measure, sparsity: float, name: str, config, *, shape=None, memo=None
):
    """(plan, measure(pruned copy)): one sweep point of a baseline, its copy freed afterwards
    (`nirvana.pruning.slicing.prune_and_measure` is NIRVANA's). With `memo` (plan signature ->
    result), a plan already measured is not sliced again."""
    plan = method_plan(scores, shape or model_shape(model), sparsity, name, config)
    return plan, measure_plan(plan, lambda: apply_method_plan(model, plan, scores), measure, memo)


def rotation_prune_and_measure(
    model: nn.Module, batch: CalibrationBatch, measure, sparsity: float, name: str, config, *, memo=None
):
    """(plan, measure(rotated copy)): one sweep point of a rotating method (SliceGPT), rotated afresh on `batch`
    (each width is its own forward pass, layer by layer), its copy freed afterwards."""
    plan = rotation_plan(model, name, config, sparsity, batch)
    return plan, measure_plan(plan, lambda: apply_method_plan(model, plan, batch=batch), measure, memo)
