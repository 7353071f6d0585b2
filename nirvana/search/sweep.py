"""A sweep (the app's Sweep page): for each (sparsity, gamma), allocate, slice a copy, measure quality and speed.

Orchestration only: every point is one `prune_and_measure` (allocate, slice, measure: `perplexity`
or `kl_to_dense`, and `measure_speed`). Scores are not recomputed: one set of cached scores
serves every point. The dense model is measured once as the reference point (sparsity 0).

`method` (a `nirvana.methods` name) sweeps a baseline the same way from its own scores: its
allocation and compensation (FLAP's biases) at each sparsity
(`nirvana.methods.run.method_prune_and_measure`). Gamma does not apply to a baseline, so its sweep
has no gamma axis.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from nirvana.accuracy.harness import run_accuracy
from nirvana.measure.flops import ideal_speedup
from nirvana.measure.kl import DenseReference, kl_to_dense
from nirvana.measure.perplexity import perplexity
from nirvana.measure.speed import measure_speed
from nirvana.methods import method_config
from nirvana.methods.run import method_prune_and_measure
from nirvana.models.shapes import ModelShape, model_shape
from nirvana.progress import sub_progress
from nirvana.pruning.allocation import Allocation
from nirvana.pruning.slicing import planned_shape, prune_and_measure
from nirvana.search.calibration import AnchorSpec, anchor_batch

QUALITY = {
    "perplexity": "perplexity",
    "kl": "KL to dense (nats/token)",
    "zeroshot7": "7-task error: 100 − average accuracy (%)",  # lower is better, like the other two
    "mbpp_bpb": "MBPP gold bits per byte (code)",  # lower is better: the reference solution's -log2 P / byte
    "gsm8k_bpb": "GSM8K gold bits per byte (math)",
}
# The quality axes measured through lm-eval: task -> (batch size, the value from run_accuracy's result).
ACCURACY_AXES = {
    "zeroshot7": (8, lambda r: 100.0 * (1.0 - r["average"]["value"])),
    "mbpp_bpb": (1, lambda r: r["tasks"]["mbpp_bpb"]["bpb"]),
    "gsm8k_bpb": (1, lambda r: r["tasks"]["gsm8k_bpb"]["bpb"]),
}


@dataclass(frozen=True)
class SweepSettings:
    sparsities: tuple[float, ...]  # swept at `allocation.gamma`
    gammas: tuple[float, ...]  # swept at `allocation.sparsity`
    allocation: Allocation  # the centre point: its sparsity, gamma, align and kind
    metric: str  # a key of QUALITY
    dataset: str = "wikitext2"
    tokens: int = 1024  # perplexity token budget (windows of `window`)
    window: int = 512
    anchor_samples: int = 16  # KL anchor set [samples, anchor_len]
    anchor_len: int = 64
    speed: bool = True
    speed_new_tokens: int = 8
    acc_limit: int = 20  # lm-eval axes (ACCURACY_AXES): the first N examples of each task
    method: str = "nirvana"  # a nirvana.methods name; a baseline needs that method's scores
    method_settings: dict | None = None  # the baseline's config as JSON (None: its defaults)
    dense: bool = True  # measure the dense reference point (off for the second method of one comparison)

    def __post_init__(self) -> None:
        method_config(self.method, self.method_settings)  # unknown method or setting: InvalidInput


def sweep_points(settings: SweepSettings) -> list[tuple[str, Allocation]]:
    """(axis, allocation) of every point: the dense reference, the sparsity sweep, the gamma sweep."""
    centre = settings.allocation
    points = [("dense", replace(centre, sparsity=0.0))] if settings.dense else []
    points += [("sparsity", replace(centre, sparsity=s)) for s in settings.sparsities if s > 0]
    if settings.method == "nirvana":  # gamma is NIRVANA's budget split; a baseline allocates its own way
        points += [("gamma", replace(centre, gamma=g)) for g in settings.gammas]
    return points


def run_sweep(lm, scores, settings: SweepSettings, progress=None) -> list[dict]:
    """Measure every point of `sweep_points(settings)`; returns one row (a dict) per point."""
    shape: ModelShape = model_shape(lm.model)
    points = sweep_points(replace(settings, allocation=settings.allocation.resolve(shape)))
    reference = None
    if settings.metric == "kl":
        anchor = anchor_batch(lm.tokenizer, AnchorSpec(samples=settings.anchor_samples, seq_len=settings.anchor_len))
        reference = DenseReference(lm.model, anchor.input_ids)
    config = method_config(settings.method, settings.method_settings)
    rows, measured = [], {}  # plan signature -> (quality, decode speed): identical plans are measured once
    for i, (axis, allocation) in enumerate(points):
        step = sub_progress(progress, i / len(points), (i + 1) / len(points), f"point {i + 1}/{len(points)}: ")

        def measure(model, step=step):
            quality = _quality(lm, model, settings, reference, step)
            return quality, (_decode_speed(model, settings, step) if settings.speed else None)

        if axis == "dense":
            plan, (quality, decode) = None, measure(lm.model)
        elif settings.method == "nirvana":
            plan, (quality, decode) = prune_and_measure(
                lm.model, scores, measure, allocation, shape=shape, memo=measured
            )
        else:
            plan, (quality, decode) = method_prune_and_measure(
                lm.model, scores, measure, allocation.sparsity, settings.method, config, shape=shape, memo=measured
            )
        rows.append(
            {
                "method": "dense" if axis == "dense" else settings.method,
                "axis": axis,
                "sparsity": allocation.sparsity,
                "gamma": allocation.gamma if settings.method == "nirvana" else None,
                "achieved_block_sparsity": 0.0 if plan is None else plan.stats["achieved_block_sparsity"],
                "params": shape.total_params if plan is None else plan.stats["params_after"],
                "quality": quality,
                "decode_tokens_per_s": decode,
                "ideal_speedup": 1.0 if plan is None else ideal_speedup(shape, planned_shape(shape, plan)),
            }
        )
    return rows


def _quality(lm, model, settings: SweepSettings, reference, progress) -> float:
    if settings.metric in ACCURACY_AXES:
        batch_size, value = ACCURACY_AXES[settings.metric]
        result = run_accuracy(
            model, lm.tokenizer, settings.metric, limit=settings.acc_limit, batch_size=batch_size, progress=progress
        )
        return value(result)
    if settings.metric == "kl":
        return kl_to_dense(model, reference, progress)

    result = perplexity(
        model,
        lm.tokenizer,
        settings.dataset,
        seq_len=settings.window,
        max_tokens=settings.tokens,
        fallback=True,
        progress=progress,
    )
    return result.ppl


def _decode_speed(model, settings: SweepSettings, progress) -> float:

    result = measure_speed(
        model, batch_sizes=(1,), prompt_len=32, new_tokens=settings.speed_new_tokens, repeats=1, warmup=1
    )
    return result["results"][0]["decode_tokens_per_s"]
