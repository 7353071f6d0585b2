"""The end-to-end steps, written once: calibrate -> score -> allocate -> slice -> report.

The CLI's `prune`, `score` and `gamma-search`, the app's Saliency, Calibration and Prune & compare
pages, and the searches and sweeps all go through these functions, so a pruned model means the
same thing everywhere:

    lm = load_model("smollm2-135m")
    result = prune(lm, PruneSettings(sparsity=0.5))        # scores cached on disk
    result.model, result.plan, result.report["achieved_block_sparsity"]

Sweeps and searches, which slice many plans from one set of scores, use `prune_and_measure`:
one allocation (~10 ms, no gradients), one sliced copy, one measurement, and the copy is freed.

The sweep primitives (`slice_at`, `prune_and_measure`, `plan_signature`, `planned_shape`) live
with the slicing code (`nirvana.pruning.slicing`), below the searches that use them.

Scoring goes through `score` everywhere (the benchmarks with `scoring(criterion)` settings and
the batch they hold) except in two places that call `compute_scores` (the layer below) themselves:
- `search/calibration.select_calibration` scores every candidate batch; this module calls it
  (`calibration_for`), so it cannot call `score` back (a lower layer never imports upward). It
  passes the same arguments, so it finds the same cached scores file.
- `bench/gpu.py` times scoring itself on a bare model (no tokenizer, no `LoadedModel`), uncached
  (`use_cache=False`), so a cache hit can never stand in for a measured time.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import torch.nn as nn

from nirvana.checkpoints.loaded import LoadedModel
from nirvana.data.calibration import CalibrationBatch, calibration_batch
from nirvana.errors import InvalidInput
from nirvana.guard.memory import check_scoring_memory
from nirvana.methods import METHODS, get_method, method_config
from nirvana.methods.nirvana import NIRVANA_FIELDS, NirvanaConfig
from nirvana.models.architectures import layer_projections
from nirvana.models.family import family_name
from nirvana.models.shapes import ModelShape, count_block_parameters, count_parameters, model_shape
from nirvana.progress import Progress
from nirvana.pruning.allocation import Allocation
from nirvana.pruning.plan import PruningPlan, load_plan
from nirvana.pruning.reconstruct import reconstruct, reconstruct_memory
from nirvana.scoring.criteria import DEFAULT_CRITERION
from nirvana.scoring.distributed import ShardedScorer
from nirvana.scoring.scores import Scores, check_scores_match
from nirvana.search.calibration import AnchorSpec, chosen_batch, select_calibration
from nirvana.t5 import steps as t5_steps

DEFAULT_CALIBRATION = "wikitext2-valid"
NIRVANA_DEFAULTS = NirvanaConfig()


@dataclass(frozen=True)
class PruneSettings:
    """What `prune` does: the criterion, its calibration data, and the allocation's settings.

    `gamma=None` is the analytic gamma* of the model; `select_calib=K > 0` chooses the
    calibration batch among K candidates (seeds 0..K-1 of `calib`) by KL to dense (cached).
    The flat fields are the CLI's flags; `allocation_settings` is sparsity, gamma, align and
    allocation as one `Allocation`, which `prune` resolves for the model once, before any scoring.
    """

    sparsity: float
    criterion: str = DEFAULT_CRITERION
    gamma: float | None = None
    align: int = 8
    allocation: str = "global"
    calib: str = DEFAULT_CALIBRATION
    samples: int = 32  # calibration sequences N
    seq_len: int = 128  # tokens per calibration sequence T
    seed: int = 0
    micro_batch: int = 0  # sequences per forward/backward (0 = chosen from the memory plan)
    checkpoint: bool | None = None  # activation checkpointing while scoring (None = chosen from the memory plan)
    select_calib: int = 0  # K candidate batches for KL-guided calibration (0 = off)
    use_cache: bool = True
    method: str = "nirvana"  # nirvana.methods.METHODS: nirvana, llm-pruner, flap, slicegpt
    method_settings: dict | None = None  # the method's config as JSON (LLMPrunerConfig, FLAPConfig, SliceGPTConfig)
    reconstruct: bool = False  # re-solve kept o_proj / down_proj columns by least squares (nirvana.pruning.reconstruct)

    def __post_init__(self) -> None:
        get_method(self.method).check_settings(self)  # unknown method, bad or foreign settings: InvalidInput
        # samples / seq_len / seed are checked where the batch is drawn (calibration_batch), with its messages.
        value = self.micro_batch
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise InvalidInput(f"micro_batch must be a non-negative integer, got {value!r}.")
        if not isinstance(self.reconstruct, bool):
            raise InvalidInput(f"reconstruct must be true or false, got {self.reconstruct!r}.")

    def allocation_fields_given(self) -> list[str]:
        """The fields of NIRVANA's settings (`NirvanaConfig`) set away from their defaults."""
        return [name for name in NIRVANA_FIELDS if getattr(self, name) != getattr(NIRVANA_DEFAULTS, name)]

    @property
    def allocation_settings(self) -> Allocation:
        """Sparsity, gamma, align and allocation kind as one value (checked when built; resolved in `prune`)."""
        return Allocation(self.sparsity, self.gamma, self.align, self.allocation)

    @property
    def needs_data(self) -> bool:
        """Calibration text is drawn: the method's scores read it, or the reconstruction fits on it."""
        return get_method(self.method).needs_data_for(self) or self.reconstruct

    @property
    def config(self):
        """The method's validated config (`nirvana.methods`): NIRVANA's from the fields above (`NirvanaConfig`),
        a baseline's from `method_settings`."""
        return get_method(self.method).config_from(self)


def scoring(criterion: str, **settings) -> PruneSettings:
    """Settings for `score` alone (a benchmark that slices many plans from one set of scores):
    the sparsity does not enter the scores or their cache key, so it is left at 0."""
    return PruneSettings(sparsity=0.0, criterion=criterion, **settings)


@dataclass
class PruneResult:
    """A pruned model (physically smaller), the plan that made it, and the measured report."""

    model: nn.Module
    plan: PruningPlan
    report: dict
    scores: Scores | None = None
    selection: dict | None = None  # KL-guided calibration: chosen seed, KL per candidate


def calibration_for(
    lm: LoadedModel, settings: PruneSettings, progress: Progress = None, allocation: Allocation | None = None
):
    """(batch or None, selection summary or None): the calibration data `settings` asks for.

    `allocation` (KL-guided selection only): `settings.allocation_settings` already resolved by the caller.
    """
    if not settings.needs_data:
        return None, None
    if settings.select_calib:
        selection = select_calibration(
            lm.model,
            lm.tokenizer,
            allocation or settings.allocation_settings,
            criterion=settings.criterion,
            candidates=settings.select_calib,
            pool=settings.calib,
            samples=settings.samples,
            seq_len=settings.seq_len,
            anchor=AnchorSpec(source=settings.calib),
            micro_batch=settings.micro_batch,
            use_cache=settings.use_cache,
            progress=progress,
        )
        summary = {
            "chosen_seed": selection.chosen_seed,
            "candidates": {c.seed: round(c.kl, 6) for c in selection.candidates},
            "from_cache": selection.from_cache,
        }
        return chosen_batch(lm.tokenizer, selection), summary
    batch = calibration_batch(
        lm.tokenizer,
        settings.calib,
        samples=settings.samples,
        seq_len=settings.seq_len,
        seed=settings.seed,
        fallback=settings.calib == DEFAULT_CALIBRATION,
    )
    if batch.fallback_reason and progress:
        progress(0.0, f"NOTE: calibrating on the embedded Python docs: {batch.fallback_reason}")
    return batch, None


def score(
    lm: LoadedModel,
    settings: PruneSettings,
    progress: Progress = None,
    *,
    batch: CalibrationBatch | None = None,
    allocation: Allocation | None = None,
) -> tuple[Scores, dict | None]:
    """The unit scores of `settings.criterion` on its calibration data (disk cache), and the selection.

    `batch`: score on this batch rather than the one `settings` draws (the app's cached or KL-chosen
    batch, the gamma search's candidate); a data-free criterion ignores it. The cache key is the
    same either way: model, criterion, batch content, seed, micro-batch.
    `allocation`: the resolved `settings.allocation_settings`, when the caller has it (see `calibration_for`).
    """
    return family_of(lm.model).score(lm, settings, progress, batch=batch, allocation=allocation)


def _score_decoder(
    lm: LoadedModel,
    settings: PruneSettings,
    progress: Progress = None,
    *,
    batch: CalibrationBatch | None = None,
    allocation: Allocation | None = None,
) -> tuple[Scores, dict | None]:
    """`score` on a decoder-only model: the method's checks, its calibration data, its scores."""
    method = get_method(settings.method)
    resolved = method.check(lm.model, model_shape(lm.model), settings)
    return _scored(lm, settings, method, progress, batch, allocation or resolved)[:2]


def _scored(lm: LoadedModel, settings: PruneSettings, method, progress: Progress, batch, allocation):
    """(scores, selection, batch): the method's scores on `batch`, or on the calibration data the settings draw
    (with the KL-guided selection's summary); `allocation`: the checks' resolved allocation, which the selection
    plans with."""
    if batch is None:
        batch, selection = calibration_for(lm, settings, progress, allocation)
    else:
        batch, selection = (batch if settings.needs_data else None), None
    return method.score(lm.model, settings, batch, progress), selection, batch


def sharded_scoring(settings: PruneSettings) -> tuple[ShardedScorer, Callable | None]:
    """(scorer, memory estimate) of `settings` scored with the model sharded (`--distributed`): NIRVANA's
    gradient criteria, or a method whose row says how (`Method.sharded`: LLM-Pruner); the rest are refused."""
    sharded = get_method(settings.method).sharded_scoring(settings)
    if sharded is None:
        baselines = [name for name, m in METHODS.items() if m.sharded is not None]
        raise InvalidInput(
            f"--distributed shards a backward pass; method {settings.method!r} has none to shard (it runs forward "
            f"passes on one process or through --device-map). Sharded: NIRVANA's gradient criteria and "
            f"{', '.join(baselines)}."
        )
    return sharded


def prune(
    lm: LoadedModel,
    settings: PruneSettings | None = None,
    *,
    scores: Scores | None = None,
    plan: PruningPlan | None = None,
    inplace: bool = False,
    progress: Progress = None,
    batch: CalibrationBatch | None = None,
) -> PruneResult:
    """Score (unless `scores` or `plan` is given), allocate, slice; return the model, plan and report.

    `inplace=True` slices `lm.model` itself (the CLI, which owns its model); the default slices a
    copy, so a shared dense model (the app's) is never touched. Bad settings fail before scoring.
    `batch`: the calibration batch a rotating method (SliceGPT) rotates on, instead of the one the
    settings describe (the app passes its session's batch; a plan with no settings needs it).

    Example:
        >>> result = prune(load_model("smollm2-135m"), PruneSettings(sparsity=0.2, criterion="taylor"))
        >>> result.report["achieved_block_sparsity"], result.plan.kept_neurons[:3]
    """
    if settings is None and plan is None:
        raise InvalidInput("prune needs settings (sparsity, criterion, ...) or an existing plan.")
    return family_of(lm.model).prune(
        lm, settings, scores=scores, plan=plan, inplace=inplace, progress=progress, batch=batch
    )


def _prune_decoder(lm, settings, *, scores=None, plan=None, inplace=False, progress=None, batch=None) -> PruneResult:
    """`prune` on a decoder-only model, the same steps for every method: check, score (unless given), plan, apply."""
    method = get_method(plan.settings.method if plan is not None else settings.method)
    if plan is not None:
        settings = method.settings_for_plan(plan, settings, batch, PruneSettings)
    shape = model_shape(lm.model)
    if settings is not None and settings.reconstruct:  # before any scoring: the copy and the solves must fit
        check_scoring_memory(lm.model, settings.samples, settings.seq_len, estimate=reconstruct_memory)
    timings: dict[str, float] = {}
    selection = None
    t = time.perf_counter()
    resolved = calibration = None
    if plan is None:
        resolved = method.check(lm.model, shape, settings)  # bad settings fail here, before data or scores
        if scores is not None:
            method.take_scores(scores, lm.model)
        elif method.has_unit_scores:
            scores, selection, calibration = _scored(lm, settings, method, progress, None, resolved)
        timings["score"] = time.perf_counter() - t
        t = time.perf_counter()
    else:
        timings["score"] = 0.0
    if method.applies_on_data and batch is None:
        batch, _ = calibration_for(lm, settings, progress)
    if plan is None:
        plan = method.plan(lm.model, shape, settings, scores, batch, resolved, progress=progress)
    else:
        method.take_plan(plan, lm.model, batch)
    timings["plan"] = time.perf_counter() - t
    t = time.perf_counter()
    micro_batch = settings.micro_batch if settings is not None else 0
    if settings is not None and settings.reconstruct:
        inplace = False  # reconstruction fits each pruned module to the dense one's output: the dense model stays
    pruned = method.apply(
        lm.model, plan, scores=scores, batch=batch, inplace=inplace, micro_batch=micro_batch, progress=progress
    )
    timings["slice"] = time.perf_counter() - t
    if settings is not None and settings.reconstruct:
        t = time.perf_counter()
        if calibration is None:
            calibration, _ = calibration_for(lm, settings, progress)
        reconstruct(lm.model, pruned, plan, calibration, progress=progress)
        timings["reconstruct"] = time.perf_counter() - t
    report = prune_report(lm.name, shape, plan, pruned, scores=scores, timings=timings, selection=selection)
    report.update(method.report_extra(pruned))
    report["reconstructed"] = bool(settings is not None and settings.reconstruct)
    if progress:
        progress(1.0, f"{method.verb} to {report['params_after'] / 1e6:.1f} M parameters")
    return PruneResult(pruned, plan, report, scores, selection)


def load_scores(path) -> Scores:
    """A score file of any family (`score --out`): its JSON's `format` says which (`Scores.load`)."""
    return Scores.load(path)


def _calibrate(lm: LoadedModel, settings: PruneSettings, progress: Progress) -> Callable:
    """The calibration batch of `settings`, read when a family's step asks for it."""
    return lambda: calibration_for(lm, settings, progress)[0]


def _score_t5(lm: LoadedModel, settings: PruneSettings, progress: Progress = None, *, batch=None, allocation=None):
    """`score` on a T5: its five unit kinds (`allocation` is the decoder-only KL selection's; T5 has none)."""
    return t5_steps.score(lm, settings, _calibrate(lm, settings, progress), progress, batch), None


def _prune_t5(lm, settings, *, scores=None, plan=None, inplace=False, progress=None, batch=None) -> PruneResult:
    """`prune` for a T5 (`nirvana.t5.steps.prune`)."""
    pruned, plan, report, scores = t5_steps.prune(
        lm, settings, _calibrate(lm, settings, progress), scores=scores, plan=plan, inplace=inplace,
        progress=progress, batch=batch,
    )  # fmt: skip
    return PruneResult(pruned, plan, report, scores, None)


@dataclass(frozen=True)
class FamilySteps:
    """`score` and `prune` of one family of models (their units, scores and plans differ in kind)."""

    score: Callable
    prune: Callable


FAMILY_STEPS = {
    "decoder-only": FamilySteps(_score_decoder, _prune_decoder),
    "t5": FamilySteps(_score_t5, _prune_t5),
}


def family_of(model: nn.Module) -> FamilySteps:
    """The steps of `model`'s family (the keys of `nirvana.measure.family.MEASURES`)."""
    return FAMILY_STEPS[family_name(model)]


def prune_report(
    name: str,
    shape: ModelShape,
    plan: PruningPlan,
    pruned: nn.Module,
    *,
    scores: Scores | None = None,
    timings: dict[str, float] | None = None,
    selection: dict | None = None,
) -> dict:
    """What a prune did, counted on the sliced model: parameters, sparsity, settings, kept units."""
    params_after = count_parameters(pruned)
    report = {
        "model": name,
        "params_before": shape.total_params,
        "params_after": params_after,
        "block_params_before": plan.stats["block_weights_before"] + block_biases(shape),
        "block_params_after": count_block_parameters(pruned),
        "target_sparsity": plan.settings.sparsity,
        "achieved_block_sparsity": plan.stats["achieved_block_sparsity"],
        "total_param_reduction": 1 - params_after / shape.total_params,
        "method": plan.settings.method,
        "method_settings": plan.settings.method_settings,
        "gamma": plan.settings.gamma if get_method(plan.settings.method).has_allocation_settings else None,
        "gamma_default": plan.settings.gamma_default,
        "align": plan.settings.align,
        "allocation": plan.settings.allocation,
        "criterion": plan.settings.criterion,
        "calibration": plan.settings.calibration,
        "kept_kv_groups": plan.kept_kv_groups,
        "kept_neurons": plan.kept_neurons,
        "notes": plan.stats.get("notes", []),
        "added_bias_params": added_bias_params(plan, pruned),
        "achieved_block_param_sparsity": 1
        - count_block_parameters(pruned) / (plan.stats["block_weights_before"] + block_biases(shape)),
        "scores": None if scores is None else {k: scores.metadata()[k] for k in ("criterion", "fingerprint", "meta")},
        "timings": {k: round(v, 3) for k, v in (timings or {}).items()},
    }
    if selection is not None:
        report["calibration_selection"] = selection
    return report


def added_bias_params(plan: PruningPlan, pruned: nn.Module) -> int:
    """Bias entries a method's compensation added (FLAP: o_proj / down_proj, which it requires bias-free)."""
    config = method_config(plan.settings.method, plan.settings.method_settings)
    if not get_method(plan.settings.method).adds_biases(config):
        return 0
    return sum(
        lin.bias.numel()
        for proj in layer_projections(pruned)
        for lin in (proj.o_proj, proj.down_proj)
        if lin.bias is not None
    )


def block_biases(shape: ModelShape) -> int:
    """Bias parameters that belong to prunable units (q/k/v and gate/up biases), for dense `shape`."""
    return shape.num_layers * (
        shape.num_kv_heads[0] * shape.attn_unit_bias + shape.intermediate[0] * shape.mlp_unit_bias
    )


__all__ = [
    "PruneResult",
    "PruneSettings",
    "calibration_for",
    "check_scores_match",
    "load_plan",
    "load_scores",
    "prune",
    "prune_report",
    "score",
    "scoring",
]
