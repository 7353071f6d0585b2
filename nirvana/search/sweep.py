"""A sweep (the app's Sweep page): for each (sparsity, gamma), allocate, slice a copy, measure quality and speed.

Orchestration only: every point is the method's allocation at the point, a sliced copy and its measurement
(`nirvana.methods.run.method_prune_and_measure`: `perplexity` or `kl_to_dense`, and `measure_speed`), FLAP's
biases included. Scores are not recomputed: one set of cached scores serves every point. The dense model is
measured once as the reference point (sparsity 0). Gamma is NIRVANA's split (`Method.has_allocation_settings`),
so only its sweep has a gamma axis. A rotating method (SliceGPT) has no scores: it is rotated afresh on the
calibration `batch` at each sparsity (`data_prune_and_measure`: SliceGPT's rotation, Tyr's search, per point).
The ideal speed-up of a point is read from the pruned copy's own module widths
(`nirvana.measure.flops`), so a sliced residual stream counts."""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import partial

from nirvana.accuracy.harness import run_accuracy
from nirvana.cluster.ray_tasks import run_tasks
from nirvana.errors import InvalidInput
from nirvana.measure.duration import block_share, estimate_seconds
from nirvana.measure.flops import ideal_speedup
from nirvana.measure.kl import DenseReference, kl_to_dense
from nirvana.measure.perplexity import perplexity
from nirvana.measure.speed import measure_speed
from nirvana.methods import get_method, method_config
from nirvana.methods.run import data_prune_and_measure, method_prune_and_measure
from nirvana.models.shapes import ModelShape, model_shape
from nirvana.progress import sub_progress
from nirvana.pruning.allocation import Allocation
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
    if get_method(settings.method).has_allocation_settings:  # gamma: NIRVANA's split; a baseline allocates its own way
        points += [("gamma", replace(centre, gamma=g)) for g in settings.gammas]
    return points


def run_sweep(lm, scores, settings: SweepSettings, progress=None, cluster=None, on_row=None, batch=None) -> list[dict]:
    """Measure every point of `sweep_points(settings)`; returns one row (a dict) per point, in order.

    `scores`: the method's unit scores; a rotating method (SliceGPT) takes `scores=None` and the
    calibration `batch` it rotates on at each point.

    `cluster` (a `nirvana.cluster.ray_tasks.Cluster`): each point is a Ray task; the workers load
    the model by its name (`lm.name`) and get the scores through Ray's object store (shipped once
    with the task's factory: a few KB, while a model is re-read from the workers' own disk).
    `on_row(rows)` is called with the rows measured so far (in point order) each time one arrives.
    """
    if cluster is not None:
        return _run_on_cluster(lm, scores, settings, cluster, progress, on_row, batch)
    point = SweepPoint(lm, scores, settings, batch)
    rows = []
    for i, (axis, allocation) in enumerate(point.points):
        step = sub_progress(
            progress, i / len(point.points), (i + 1) / len(point.points), f"point {i + 1}/{len(point.points)}: "
        )
        rows.append(point.measure(axis, allocation, step))
        if on_row:
            on_row(list(rows))
    return rows


@dataclass(frozen=True)
class PointJob:
    """One sweep point as a Ray task's job."""

    index: int
    axis: str
    allocation: Allocation


class SweepPoint:
    """What every point shares (shape, dense KL reference, method config) and how one point is measured."""

    def __init__(self, lm, scores, settings: SweepSettings, batch=None):
        self.lm, self.scores, self.settings, self.batch = lm, scores, settings, batch
        self.method = get_method(settings.method)
        self.on_data = not self.method.has_unit_scores
        if self.on_data and batch is None:
            raise InvalidInput(
                f"method {settings.method!r} plans on calibration data, not unit scores: a sweep of it needs the batch."
            )
        self.shape: ModelShape = model_shape(lm.model)
        self.points = sweep_points(replace(settings, allocation=settings.allocation.resolve(self.shape)))
        self.reference = None
        if settings.metric == "kl":
            spec = AnchorSpec(samples=settings.anchor_samples, seq_len=settings.anchor_len)
            self.reference = DenseReference(lm.model, anchor_batch(lm.tokenizer, spec).input_ids)
        self.config = method_config(settings.method, settings.method_settings)
        self.memo = {}  # plan signature -> (quality, decode speed): identical plans are measured once

    def measure(self, axis: str, allocation: Allocation, step=None) -> dict:
        lm, settings, shape = self.lm, self.settings, self.shape

        def measure(model):
            quality = _quality(lm, model, settings, self.reference, step)
            decode = _decode_speed(model, settings, step) if settings.speed else None
            return quality, decode, ideal_speedup(lm.model, model)  # FLOPs of the copy's own widths

        if axis == "dense":
            plan, (quality, decode, ideal) = None, measure(lm.model)
        elif self.on_data:
            plan, (quality, decode, ideal) = data_prune_and_measure(
                lm.model, self.batch, measure, allocation.sparsity, settings.method, self.config, memo=self.memo
            )
        else:
            plan, (quality, decode, ideal) = method_prune_and_measure(
                lm.model, self.scores, measure, allocation.sparsity, settings.method, self.config_at(allocation),
                shape=shape, memo=self.memo,
            )  # fmt: skip
        return {
            "method": "dense" if axis == "dense" else settings.method,
            "axis": axis,
            "sparsity": allocation.sparsity,
            "gamma": allocation.gamma if self.method.has_allocation_settings else None,
            "achieved_block_sparsity": 0.0 if plan is None else plan.stats["achieved_block_sparsity"],
            "params": shape.total_params if plan is None else plan.stats["params_after"],
            "quality": quality,
            "decode_tokens_per_s": decode,
            "ideal_speedup": ideal,
        }

    def config_at(self, allocation: Allocation):
        """The method's config at a point: one with allocation settings (NIRVANA) takes the point's gamma, align and
        kind; a baseline allocates its own way from the sparsity alone."""
        if not self.method.has_allocation_settings:
            return self.config
        return replace(self.config, gamma=allocation.gamma, align=allocation.align, allocation=allocation.kind)

    def run(self, job: PointJob) -> dict:
        return self.measure(job.axis, job.allocation)


def point_worker(model: str, dtype: str, scores, settings: SweepSettings, batch=None) -> SweepPoint:
    """A sweep's worker inside a Ray worker process: the model loaded by name on this node's CPU/GPU."""
    # here, not at the top: the loader imports transformers' modeling; the CLI's sweep checks import this module
    from nirvana.checkpoints.loading import load_model

    return SweepPoint(load_model(model, dtype=dtype), scores, settings, batch)


def _run_on_cluster(lm, scores, settings: SweepSettings, cluster, progress, on_row, batch=None) -> list[dict]:
    shape = model_shape(lm.model)
    points = sweep_points(replace(settings, allocation=settings.allocation.resolve(shape)))
    jobs = [PointJob(i, axis, allocation) for i, (axis, allocation) in enumerate(points)]
    dtype = str(next(lm.model.parameters()).dtype).removeprefix("torch.")
    factory = partial(point_worker, lm.name, dtype, scores, settings, batch)
    found: dict[int, dict] = {}
    label = lambda job: f"{job.axis} {job.allocation.sparsity:g}"
    for n, done in enumerate(run_tasks(cluster, factory, jobs, label=label, log=lambda message: None)):
        if done.error is not None and not done.crashed:
            raise done.error
        message = f"point {n + 1}/{len(jobs)} " + (
            f"FAILED ({label(done.job)}: its worker died on every try)" if done.crashed else f"done on {done.where}"
        )
        if not done.crashed:
            found[done.index] = done.value
        if progress:
            progress((n + 1) / len(jobs), message)
        if on_row and not done.crashed:
            on_row([found[i] for i in sorted(found)])
    return [found[i] for i in sorted(found)]  # a point whose worker died past the retries is left out


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


def sweep_seconds(shape: ModelShape, settings: SweepSettings, rate: float | None = None) -> float | None:
    """About how long `settings`' points take here (`nirvana.measure.duration`): each point's quality pass on a
    model the size its sparsity leaves (perplexity over the token budget, or KL over the anchor set with the
    dense reference once) and its decode timing; None for the lm-eval axes (their rates are the Accuracy tab's)."""
    if settings.metric in ACCURACY_AXES:
        return None
    if settings.metric == "kl":
        tokens, seq_len = settings.anchor_samples * settings.anchor_len, settings.anchor_len
    else:
        tokens, seq_len = settings.tokens, settings.window
    per_point = tokens + (4 * settings.speed_new_tokens if settings.speed else 0)  # warm-up, prompt, decode
    total = estimate_seconds(shape, "evaluation", tokens, seq_len, rate) if settings.metric == "kl" else 0.0
    for _, allocation in sweep_points(settings):
        kept = 1.0 - allocation.sparsity * block_share(shape)
        total += kept * estimate_seconds(shape, "evaluation", per_point, seq_len, rate)
    return total
