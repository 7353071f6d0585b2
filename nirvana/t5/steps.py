"""`score` and `prune` of a T5: the family's row of `nirvana.pipeline.FAMILY_STEPS`.

What a T5 accepts of `PruneSettings` (NIRVANA's own method, a criterion of `T5_CRITERIA`, one of its
allocations), its scores over five unit kinds (cached), the one allocator, the slicing, and the report of
what was cut. The pipeline hands in its calibration as a callable (`calibrate() -> batch`), read only when
the criterion needs data, so this module does not import the pipeline it serves.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch.nn as nn

from nirvana.checkpoints.loaded import LoadedModel
from nirvana.errors import InvalidInput
from nirvana.methods import DEFAULT_METHOD
from nirvana.models.family import expect_family
from nirvana.models.shapes import count_parameters
from nirvana.progress import Progress
from nirvana.pruning.allocation import allocate, check_allocation_kind
from nirvana.pruning.plan import PruningPlan
from nirvana.scoring.scores import Scores, check_scores_match
from nirvana.t5.anatomy import KINDS, block_weights, kept_units, t5_shape
from nirvana.t5.scoring import T5_CRITERIA, check_t5_criterion, compute_t5_scores
from nirvana.t5.slicing import apply_t5_plan

T5_METHODS = (DEFAULT_METHOD,)  # the baselines read decoder layers (coupled groups, o_proj biases, rotations)


def check_t5_settings(settings) -> None:
    """What a T5 accepts of `PruneSettings`: NIRVANA's own method, a criterion of `T5_CRITERIA`, one of
    its allocations (global, per-stack) (docs/METHOD-T5.md), no KL-guided calibration search."""
    if settings.method not in T5_METHODS:
        raise InvalidInput(
            f"method {settings.method!r} is written for decoder-only models (its coupled groups, bias compensation "
            f"or rotation read a decoder layer); on T5 use method nirvana with a criterion of {', '.join(T5_CRITERIA)}."
        )
    check_t5_criterion(settings.criterion)
    check_allocation_kind("t5", settings.allocation)
    if settings.select_calib:
        raise InvalidInput("KL-guided calibration (select_calib) is for decoder-only models; drop it on T5.")
    if settings.reconstruct:
        raise InvalidInput(
            "reconstruction (--reconstruct) re-solves a decoder layer's o_proj / down_proj; drop it on T5."
        )


def score(lm: LoadedModel, settings, calibrate: Callable, progress: Progress = None, batch=None) -> Scores:
    """T5 scores of `settings.criterion` on the settings' calibration windows (split in halves), disk-cached."""
    check_t5_settings(settings)
    needs_data = T5_CRITERIA[settings.criterion].objective is not None
    if needs_data and batch is None:
        batch = calibrate()
    return compute_t5_scores(
        lm.model,
        settings.criterion,
        batch if needs_data else None,
        seed=settings.seed,
        micro_batch=settings.micro_batch,
        use_cache=settings.use_cache,
        progress=progress,
    )


def prune(lm, settings, calibrate: Callable, *, scores=None, plan=None, inplace=False, progress=None, batch=None):
    """(pruned model, plan, report, scores): score (cached), allocate over the five unit kinds, slice; the report
    counts the result."""
    dense_params = count_parameters(lm.model)
    timings: dict[str, float] = {}
    t = time.perf_counter()
    if plan is None:
        check_t5_settings(settings)  # bad settings fail before scoring
        if scores is None:
            scores = score(lm, settings, calibrate, progress, batch)
        else:
            expect_family(scores, "t5", "these are decoder-only scores; score the T5 itself (`nirvana score`).")
            check_scores_match(scores, lm.model)
        timings["score"] = time.perf_counter() - t
        t = time.perf_counter()
        plan = allocate(scores, t5_shape(lm.model), settings.allocation_settings)
    else:
        expect_family(
            plan, "t5", "this is a decoder-only plan; a T5 is pruned by a T5 plan (`prune` on the T5 writes one)."
        )
        timings["score"] = 0.0
    timings["plan"] = time.perf_counter() - t
    t = time.perf_counter()
    pruned = apply_t5_plan(lm.model, plan, inplace=inplace)
    timings["slice"] = time.perf_counter() - t
    report = t5_report(lm.name, dense_params, plan, pruned, scores=scores, timings=timings)
    if progress:
        progress(1.0, f"pruned to {report['params_after'] / 1e6:.2f} M parameters")
    return pruned, plan, report, scores


def t5_report(name, dense_params: int, plan: PruningPlan, pruned: nn.Module, *, scores=None, timings=None) -> dict:
    """What a T5 prune did, counted on the sliced model; `kept_kv_groups` / `kept_neurons` per kind (g = 1: a head
    is its own KV group)."""
    kept = kept_units(pruned)
    return {
        "model": name,
        "architecture": "t5",
        "params_before": dense_params,
        "params_after": count_parameters(pruned),
        "block_params_before": plan.stats["block_weights_before"],
        "block_params_after": block_weights(pruned),
        "target_sparsity": plan.settings.sparsity,
        "achieved_block_sparsity": plan.stats["achieved_block_sparsity"],
        "total_param_reduction": 1 - count_parameters(pruned) / dense_params,
        "method": DEFAULT_METHOD,
        "criterion": plan.settings.criterion,
        "gamma": plan.settings.gamma,
        "gamma_default": plan.settings.gamma_default,
        "scope": plan.settings.allocation,
        "allocation": plan.settings.allocation,
        "align": plan.settings.align,
        "calibration": plan.settings.calibration,
        "kept_kv_groups": {k: v for k, v in kept.items() if KINDS[k].attention},
        "kept_neurons": {k: v for k, v in kept.items() if not KINDS[k].attention},
        "notes": plan.stats.get("notes", []),
        "scores": None if scores is None else {k: scores.metadata()[k] for k in ("criterion", "fingerprint", "meta")},
        "timings": {k: round(v, 3) for k, v in (timings or {}).items()},
    }
