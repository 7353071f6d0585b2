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

import functools
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields
from typing import ClassVar

import torch
import torch.nn as nn

from nirvana.errors import InvalidInput, PlanMismatch
from nirvana.guard.memory import check_scoring_memory, choose_micro_batch, oom_guard
from nirvana.models.fingerprint import model_fingerprint
from nirvana.models.shapes import ModelShape, model_shape
from nirvana.pruning.allocation import check_scores_fit, default_gamma, plan_stats
from nirvana.pruning.plan import PlanSettings, PruningPlan
from nirvana.pruning.slicing import add_output_biases, apply_plan
from nirvana.scoring.objectives import output_head
from nirvana.scoring.scores import Scores, cached_scores, check_scores_match

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

    def recorded(self) -> dict:
        """What a plan's and a benchmark row's `method_settings` hold: every field, defaults filled in."""
        return self.to_dict()

    def score_key(self) -> dict:
        """The settings that change the scores (part of the score cache key); the rest only change allocation."""
        return {}

    def check(self, model: nn.Module, shape: ModelShape, sparsity: float) -> None:
        """Model-dependent checks (layer ranges, existing biases, reachable sparsity), before any scoring."""


@dataclass(frozen=True, kw_only=True)
class Method:
    """One pruning method: the steps `nirvana.pipeline.prune` runs, in this order, for every method.

    `check_settings(settings)`: refuse settings that are not the method's (`PruneSettings.__post_init__`).
    `check(model, shape, settings)`: refuse the model or the target before any data is drawn or scored; returns
    what the checks resolved, which `plan` gets back (NIRVANA: the `Allocation` with gamma* filled), or None.
    `score(model, settings, batch, progress) -> Scores`: unit scores on the batch (disk cache, memory guard).
    `take_scores(scores, model)`: refuse scores given from outside that this method cannot plan from.
    `plan(model, shape, settings, scores, batch, resolved) -> PruningPlan`: the kept units (or widths) at the target.
    `take_plan(plan, model, batch)`: refuse a given plan this model or batch cannot apply.
    `apply(model, plan, *, scores, batch, inplace, micro_batch, progress) -> model`: the pruned model.

    A method that transforms weights on data (SliceGPT's rotation, FLAP's compensation) does it in
    `apply`, from what its plan and scores carry. Two class facts say which steps read what: `has_unit_scores`
    (`plan` reads the scores `score` computes; a rotation plans from shapes) and `applies_on_data` (`apply` needs
    the calibration batch); `settings_for_plan(plan, settings, batch, make)` gives the settings a given plan is
    applied with (a rotation's must name its calibration batch). `memory(model_config, settings, *, samples, seq_len,
    micro_batch, dtype, device, quantization) -> MemoryEstimate` is the planned peak of `score` above
    the loaded weights, checked before any scoring. `sharded(config) -> ShardedScorer` (or None) is
    `score` split for FSDP2 (`--distributed`). `description` and `reference` are what the CLI's help and
    docs/BASELINES.md say of it; its colour (`nirvana.charts.METHOD_COLORS`) and "how to read it" text
    (`ui.methods.EXPLAIN`) live with the charts and the app.
    """

    name: str
    label: str
    config: type[MethodConfig]
    needs_data: bool
    uses_gradients: bool  # a backward pass
    memory: Callable
    description: str  # one line: what it does differently from NIRVANA (help texts, docs/BASELINES.md)
    reference: str  # the repository and files it follows (docs/BASELINES.md)
    sharded: Callable | None = None
    checker: Callable | None = None  # (model, shape, sparsity, config) -> None; raises InvalidInput before any scoring
    rotates: ClassVar[bool] = False  # plans from shapes and transforms the model on calibration data
    has_unit_scores: ClassVar[bool] = True  # `plan` reads the scores `score` computes (a rotation plans from shapes)
    applies_on_data: ClassVar[bool] = False  # `apply` needs the calibration batch (a rotation is computed from it)
    has_allocation_settings: ClassVar[bool] = False  # gamma, align, allocation and criterion are its settings
    no_reconstruct: ClassVar[str] = ""  # why `--reconstruct` does not apply to it ("" = it does)
    verb: ClassVar[str] = "pruned"  # the progress line's "pruned to 98.1 M parameters"

    def config_from(self, settings) -> MethodConfig:
        """This method's validated config from `PruneSettings` (a baseline's: its `method_settings`)."""
        return method_config_of(self, settings.method_settings)

    def check_settings(self, settings) -> None:
        """The settings are this method's: its config validates, and the allocation's fields (criterion, gamma,
        align, allocation, select_calib: `PruneSettings.allocation_fields_given`) are refused unless it has them."""
        self.config_from(settings)
        if settings.reconstruct and self.no_reconstruct:
            raise InvalidInput(f"method {self.name!r} {self.no_reconstruct}. Drop --reconstruct.")
        wrong = [] if self.has_allocation_settings else settings.allocation_fields_given()
        if wrong:
            raise InvalidInput(
                f"{', '.join(wrong)} {'is a setting' if len(wrong) == 1 else 'are settings'} of method nirvana and "
                f"do not apply to {self.name!r}; drop them (its own settings go in method_settings)."
            )

    def needs_data_for(self, settings) -> bool:
        return self.needs_data

    def settings_for_plan(self, plan: PruningPlan, settings, batch, make):
        """The settings `prune` applies a given `plan` with (`settings` may be None: the plan alone). `make` builds
        `PruneSettings` (a method whose `apply` needs data builds them from the plan when given only a batch)."""
        return settings

    def check(self, model: nn.Module, shape: ModelShape, settings):
        self.check_config(model, shape, settings.sparsity, settings.config)

    def score(self, model: nn.Module, settings, batch, progress=None):
        raise NotImplementedError

    def take_scores(self, scores, model: nn.Module) -> None:
        raise NotImplementedError

    def plan(self, model: nn.Module, shape: ModelShape, settings, scores, batch, resolved=None, progress=None):
        raise NotImplementedError

    def take_plan(self, plan: PruningPlan, model: nn.Module, batch) -> None:
        raise NotImplementedError

    def apply(self, model: nn.Module, plan: PruningPlan, *, scores, batch, inplace, micro_batch, progress) -> nn.Module:
        raise NotImplementedError

    def check_target(self, sparsity: float, config: MethodConfig) -> None:
        """The target's range, checked without the model (the CLI, before it loads one): [0, 1) of block weights."""
        check_sparsity_value(sparsity)

    # The steps by their own arguments (a method's config rather than `PruneSettings`), for the benchmarks, the
    # sweeps and the app, which hold one config and many sparsities. A method without the step refuses it.
    def check_config(self, model: nn.Module, shape: ModelShape, sparsity: float, config: MethodConfig) -> None:
        """The target, a dense model, and the method's own `checker` (the layer range it prunes, existing biases)."""
        check_units_model(model, shape, sparsity)
        if self.checker is not None:
            self.checker(model, shape, sparsity, config)

    def scores(self, model, config: MethodConfig, batch, *, micro_batch=0, use_cache=True, progress=None) -> Scores:
        raise InvalidInput(f"method {self.name!r} is scored by nirvana.scoring.criteria (the pipeline's default path).")

    def allocate(self, scores: Scores, shape: ModelShape, sparsity: float, config: MethodConfig) -> PruningPlan:
        raise InvalidInput(
            f"method {self.name!r} allocates by nirvana.pruning.allocation (the pipeline's default path)."
        )

    def plan_on_data(self, model: nn.Module, sparsity: float, config: MethodConfig, batch, *, micro_batch=0,
                     use_cache=True, progress=None) -> PruningPlan:  # fmt: skip
        """The plan at `sparsity` of a method without unit scores, from the model and `batch` (`use_cache`: a plan
        that took minutes to find is kept on disk by content key)."""
        raise InvalidInput(f"method {self.name!r} plans from unit scores (`scores`, then `allocate`).")

    def adds_biases(self, config: MethodConfig) -> bool:
        """Whether `apply` adds o_proj / down_proj biases (FLAP's compensation)."""
        return False

    @property
    def applies_from_scores(self) -> bool:
        """Whether `apply` reads the scores the plan came from (FLAP's compensation), not the plan alone."""
        return False

    def sharded_scoring(self, settings) -> tuple[Callable, Callable | None] | None:
        """(scorer, memory estimate) of `score` split for FSDP2 (`--distributed`); None: the method has no backward
        pass to shard."""
        if self.sharded is None:
            return None
        return self.sharded(settings.config), functools.partial(self.memory, settings=settings.config)

    def report_extra(self, pruned: nn.Module) -> dict:
        """What a prune's report adds for this method (SliceGPT: the kept hidden widths)."""
        return {}


def method_config_of(method: Method, settings: dict | None) -> MethodConfig:
    """`method`'s validated config from its JSON settings (None: the defaults)."""
    if settings is not None and not isinstance(settings, dict):
        raise InvalidInput(f"settings of method {method.name!r} must be a JSON object, got {settings!r}.")
    return method.config.from_dict(settings, method.name)


def check_units_model(model: nn.Module, shape: ModelShape, sparsity: float) -> None:
    """The target and the model every baseline needs: a sparsity in [0, 1) and a dense (uniform) model."""
    check_sparsity_value(sparsity)
    if not shape.is_uniform:
        raise InvalidInput("this model is already pruned (layers differ in width); prune the dense model instead.")


@dataclass(frozen=True, kw_only=True)
class ScoredMethod(Method):
    """A method that scores the units and cuts by its own allocation (LLM-Pruner, FLAP).

    `scorer(model, batch, config, micro_batch, progress) -> (attn [L, Hkv], mlp [L, I], extra)`.
    `allocator(scores, shape, sparsity, config) -> PruningPlan`.
    `compensator(dense_model, plan, scores, config) -> Biases | None`: run on the dense model before
    slicing (it reads the weights that slicing removes); the biases are added to the sliced copy.
    """

    scorer: Callable
    allocator: Callable
    compensator: Callable | None = None

    def score(self, model: nn.Module, settings, batch, progress=None) -> Scores:
        return self.scores(
            model, settings.config, batch, micro_batch=settings.micro_batch, use_cache=settings.use_cache,
            progress=progress,
        )  # fmt: skip

    def scores(self, model, config: MethodConfig, batch, *, micro_batch=0, use_cache=True, progress=None) -> Scores:
        """The unit scores on `batch`, cached under the method's name and the settings that change them."""
        if batch is None:
            raise InvalidInput(f"method {self.name!r} needs a calibration batch.")
        batch.check_vocab(model.get_input_embeddings().num_embeddings)
        calib = batch.describe()
        n, t = batch.input_ids.shape

        def plan() -> int:
            """The micro-batch: as given, or (gradient methods, a sum over sequences) chosen from the memory plan."""
            estimate = self.memory_estimate(model, config)
            mb = micro_batch
            if not mb and self.uses_gradients:  # any micro-batch gives the same scores
                mb = choose_micro_batch(model, n, t, estimate=estimate)
            check_scoring_memory(model, n, t, micro_batch=mb, estimate=estimate)
            return mb

        def compute(fingerprint: str, mb: int) -> Scores:
            attn, mlp, extra = self.scorer(model, batch, config, mb, progress)
            meta = {"cache_hit": False, "method_settings": config.score_key(), "micro_batch": mb or n}
            return Scores(
                {"attn": attn.float().cpu(), "mlp": mlp.float().cpu()}, self.name, fingerprint, calib, meta, extra
            )

        return cached_scores(
            model, self.name, calib, config.score_key(), compute, memory=plan, use_cache=use_cache, progress=progress
        )

    def memory_estimate(self, model: nn.Module, config: MethodConfig):
        """`memory` with these settings; gradient methods take the LM loss a vocabulary chunk at a time where the
        head allows it."""
        estimate = functools.partial(self.memory, settings=config)
        if self.uses_gradients:
            estimate = functools.partial(estimate, chunked_logits=output_head(model) is not None)
        return estimate

    def take_scores(self, scores: Scores, model: nn.Module) -> None:
        check_scores_match(scores, model)

    def plan(self, model: nn.Module, shape: ModelShape, settings, scores: Scores, batch, resolved=None, progress=None):
        return self.allocate(scores, shape, settings.sparsity, settings.config)

    def allocate(self, scores: Scores, shape: ModelShape, sparsity: float, config: MethodConfig) -> PruningPlan:
        """The method's allocation of `scores` at a target block sparsity."""
        check_sparsity_value(sparsity)
        if scores.criterion != self.name:
            raise InvalidInput(
                f"these scores were computed by {scores.criterion!r}, not by method {self.name!r}; rescore."
            )
        check_scores_fit(scores, shape)
        return self.allocator(scores, shape, sparsity, config)

    def take_plan(self, plan: PruningPlan, model: nn.Module, batch) -> None:
        plan.check_model(model_fingerprint(model))

    def apply(self, model, plan, *, scores=None, batch=None, inplace=False, micro_batch=0, progress=None):
        """Slice `model` to `plan`, with the compensation (FLAP: o_proj / down_proj biases) computed on the dense
        weights first; it needs the scores' mean inputs (`Scores.extra`), i.e. the score file the plan came from."""
        config = method_config_of(self, plan.settings.method_settings)
        biases = None
        if self.compensator is not None:
            needed = ("attn_mean_inp", "mlp_mean_inp")
            if scores is None or any(k not in scores.extra for k in needed):
                raise InvalidInput(
                    f"a {self.label} plan adds biases computed from its calibration statistics; pass the score file "
                    f"it was made from (`score --method {self.name} --out F`, then `prune --plan P --scores F`), or "
                    "prune again."
                )
            biases = self.compensator(model, plan, scores, config)
        pruned = apply_plan(model, plan, inplace=inplace)
        if biases:
            add_output_biases(pruned, biases)
        return pruned

    def adds_biases(self, config: MethodConfig) -> bool:
        return self.compensator is not None and getattr(config, "bias", True)

    @property
    def applies_from_scores(self) -> bool:
        return self.compensator is not None


@dataclass(frozen=True, kw_only=True)
class OnDataMethod(Method):
    """A method with no unit scores whose `apply` transforms the weights on the calibration batch it planned on
    (SliceGPT's rotation, Tyr-the-Pruner's reconstruction): a given plan is applied with its own batch."""

    has_unit_scores: ClassVar[bool] = False
    applies_on_data: ClassVar[bool] = True
    without_scores: ClassVar[str] = "it transforms the model on calibration data when it prunes"
    made_on: ClassVar[str] = "made"  # how its plans came from their batch, in messages
    keeps_units: ClassVar[bool] = True  # its plans name kept units of this model's weights (not widths alone)

    def score(self, model, settings, batch, progress=None):
        return self.scores(model, settings.config, batch)

    def scores(self, model, config: MethodConfig, batch, *, micro_batch=0, use_cache=True, progress=None) -> Scores:
        raise InvalidInput(
            f"method {self.name!r} has no unit scores: {self.without_scores}. Use `prune --method {self.name}` (its "
            "plan holds what it kept)."
        )

    def take_scores(self, scores, model: nn.Module) -> None:
        raise InvalidInput(f"method {self.name!r} prunes without unit scores; drop the scores (--scores).")

    def plan(self, model: nn.Module, shape: ModelShape, settings, scores, batch, resolved=None, progress=None):
        return self.plan_on_data(model, settings.sparsity, settings.config, batch, micro_batch=settings.micro_batch,
                                 use_cache=settings.use_cache, progress=progress)  # fmt: skip

    def settings_for_plan(self, plan: PruningPlan, settings, batch, make):
        """A plan and the batch to apply it on: the plan's own settings; otherwise the settings must be this
        method's (they say which calibration batch to draw)."""
        if settings is None and batch is not None:
            settings = make(plan.settings.sparsity, method=self.name, method_settings=plan.settings.method_settings)
        if settings is None or settings.method != self.name:
            raise InvalidInput(
                f"a {self.name} plan is applied on calibration data: pass --method {self.name} and the "
                "calibration settings (--calib, --samples, --seq-len, --seed) with the plan."
            )
        return settings

    def take_plan(self, plan: PruningPlan, model: nn.Module, batch) -> None:
        """The plan is this model's (a plan of unit indices: `keeps_units`) and was made on `batch`."""
        if self.keeps_units:
            plan.check_model(model_fingerprint(model))
        recorded = plan.settings.calibration or {}
        if recorded.get("hash") not in (None, batch.hash):
            raise PlanMismatch(
                f"this {self.name} plan was {self.made_on} on calibration batch {recorded.get('source')} (seed "
                f"{recorded.get('seed')}, {recorded.get('samples')} x {recorded.get('seq_len')} tokens, hash "
                f"{recorded.get('hash')}); these settings draw {batch.source} ({batch.hash}). Pass the same --calib, "
                "--samples, --seq-len and --seed."
            )


@dataclass(frozen=True, kw_only=True)
class RotatingMethod(OnDataMethod):
    """A method that transforms the model on calibration data instead of cutting scored units (SliceGPT).

    `planner(model, sparsity, config, calibration) -> PruningPlan`: the widths, from shapes alone.
    `rotator(model, plan, batch, *, inplace, micro_batch, progress) -> model`: the transform, forward
    passes on the calibration batch.
    """

    planner: Callable
    rotator: Callable
    rotates: ClassVar[bool] = True
    verb: ClassVar[str] = "rotated and sliced"
    without_scores: ClassVar[str] = "it rotates the model on calibration data when it prunes, layer by layer"
    made_on: ClassVar[str] = "rotated"
    no_reconstruct: ClassVar[str] = (
        "rotates and slices the residual stream, so its modules no longer output the dense model's: there is "
        "nothing for --reconstruct to fit"
    )
    keeps_units: ClassVar[bool] = False  # its plans are widths, from shapes alone

    def plan_on_data(self, model: nn.Module, sparsity: float, config: MethodConfig, batch, *, micro_batch=0,
                     use_cache=True, progress=None) -> PruningPlan:  # fmt: skip
        """The plan for the target: every unit kept, the hidden width from shapes alone (checked first)."""
        self.check_config(model, model_shape(model), sparsity, config)
        return self.planner(model, sparsity, config, None if batch is None else batch.describe())

    def apply(self, model, plan, *, scores=None, batch=None, inplace=False, micro_batch=0, progress=None):
        """Rotate and slice on `batch` (after the memory check): the plan's width, the rotations from the batch."""
        if batch is None:
            raise InvalidInput(f"method {self.name!r} rotates by the PCA of calibration activations: it needs a batch.")
        config = method_config_of(self, plan.settings.method_settings)
        n, t = batch.input_ids.shape
        estimate = functools.partial(self.memory, settings=config)
        check_scoring_memory(model, n, t, micro_batch=micro_batch, estimate=estimate)
        with oom_guard(f"rotating ({self.name})"):
            return self.rotator(model, plan, batch, inplace=inplace, micro_batch=micro_batch, progress=progress)

    def report_extra(self, pruned: nn.Module) -> dict:
        return {"sliced_hidden": pruned.config.nirvana_sliced_hidden}


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
    kept = {"attn": [sorted(a) for a in kept_kv_groups], "mlp": [sorted(m) for m in kept_neurons]}
    all_stats = plan_stats(shape, kept)
    all_stats.update(stats or {})
    all_stats["notes"] = [*all_stats.get("notes", []), f"gamma does not apply to method {method!r} (not used)"]
    plan = PruningPlan(scores.fingerprint, shape.to_dict(), settings, kept, all_stats)
    plan.validate()
    return plan
