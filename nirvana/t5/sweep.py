"""A sweep of a T5 (the app's Sweep page on an encoder-decoder model): for each (sparsity, gamma), plan
from the cached scores, slice a copy, measure quality and speed.

The decoder-only sweep (`nirvana.search.sweep`) for T5's units: each point is `allocate` (an allocation
over the five unit kinds, no gradients) and `apply_t5_plan`; quality is the continuation perplexity
(`seq2seq_perplexity`, windows split in halves) or the KL to the dense model on held-out pairs
(`seq2seq_kl_to_dense`); speed is one measured batch-1 run (encoder pass plus decode steps), and the
ideal speed-up is the FLOPs ratio per token of the perplexity's window (`seq2seq_summary`). Rows have
the decoder-only sweep's columns, so the same charts and tables read them.
"""

from __future__ import annotations

from dataclasses import dataclass

from nirvana.errors import InvalidInput
from nirvana.models.family import expect_family
from nirvana.models.fingerprint import model_fingerprint
from nirvana.progress import Progress, sub_progress
from nirvana.pruning.allocation import Allocation, allocate
from nirvana.pruning.plan import SCOPES
from nirvana.scoring.scores import Scores, check_scores_match
from nirvana.search.calibration import AnchorSpec, anchor_batch
from nirvana.t5.anatomy import t5_shape
from nirvana.t5.measure import (
    Seq2SeqReference,
    seq2seq_kl_to_dense,
    seq2seq_perplexity,
)
from nirvana.t5.slicing import apply_t5_plan
from nirvana.t5.speed import (
    measure_seq2seq_speed,
    seq2seq_summary,
)

SEQ2SEQ_QUALITY = {
    "perplexity": "continuation perplexity",
    "kl": "KL to dense (nats/token)",
}


@dataclass(frozen=True)
class Seq2SeqSweepSettings:
    sparsities: tuple[float, ...]  # swept at `gamma`
    gammas: tuple[float, ...]  # swept at `sparsity`
    sparsity: float = 0.2  # the centre point
    gamma: float | None = None  # None: each scope's gamma*
    scope: str = "global"
    align: int = 8
    metric: str = "perplexity"  # a key of SEQ2SEQ_QUALITY
    dataset: str = "wikitext2"
    tokens: int = 1024  # perplexity token budget (windows of `window`, each split in halves)
    window: int = 256
    anchor_samples: int = 16  # KL held-out pairs [samples, anchor_len], split in halves
    anchor_len: int = 64
    speed: bool = True
    speed_new_tokens: int = 8

    def __post_init__(self) -> None:
        if self.metric not in SEQ2SEQ_QUALITY:
            accepted = ", ".join(SEQ2SEQ_QUALITY)
            raise InvalidInput(f"quality {self.metric!r} is not measured on a T5; accepted: {accepted}.")
        if self.scope not in SCOPES:
            raise InvalidInput(f"scope {self.scope!r} is not one of {', '.join(SCOPES)}.")
        bad = [s for s in (*self.sparsities, self.sparsity) if not 0 <= s < 1]
        if bad:
            raise InvalidInput(f"sparsities must be in [0, 1); got {bad}.")
        if any(not g > 0 for g in self.gammas) or (self.gamma is not None and not self.gamma > 0):
            raise InvalidInput("gamma values must be > 0.")
        if self.tokens < 2 or self.window < 2:
            raise InvalidInput("the perplexity needs at least 2 tokens per window (one for each half).")

    def points(self) -> list[tuple[str, float, float | None]]:
        """(axis, sparsity, gamma) of every point: the dense reference, the sparsity sweep, the gamma sweep."""
        return [
            ("dense", 0.0, self.gamma),
            *(("sparsity", s, self.gamma) for s in self.sparsities if s > 0),
            *(("gamma", self.sparsity, g) for g in self.gammas),
        ]


def run_seq2seq_sweep(lm, scores: Scores, settings: Seq2SeqSweepSettings, progress: Progress = None,
                      on_row=None) -> list[dict]:  # fmt: skip
    """Measure every point of `settings.points()` on the dense T5 `lm.model`; one row per point, in order.

    Identical plans (two settings that keep the same units) are measured once. `on_row(rows)` is called
    with the rows so far after each point.
    """
    expect_family(scores, "t5", "a T5 sweep needs the T5's own scores (score the T5 first).")
    dense = lm.model
    fingerprint = model_fingerprint(dense)  # once: every point plans and slices this model
    if scores.fingerprint != fingerprint:
        check_scores_match(scores, dense)
    shape = t5_shape(dense)
    reference = None
    if settings.metric == "kl":
        spec = AnchorSpec(samples=settings.anchor_samples, seq_len=settings.anchor_len)
        reference = Seq2SeqReference(dense, anchor_batch(lm.tokenizer, spec).input_ids)
    dense_flops = seq2seq_summary(dense, settings.window)["flops_per_token"]

    def measure(model, step) -> tuple[float, float | None, float]:
        if reference is not None:
            quality = seq2seq_kl_to_dense(model, reference, step)
        else:
            quality = seq2seq_perplexity(model, lm.tokenizer, settings.dataset, seq_len=settings.window,
                                         max_tokens=settings.tokens, fallback=True, progress=step).ppl  # fmt: skip
        decode = None
        if settings.speed:
            speed = measure_seq2seq_speed(model, batch_sizes=(1,), prompt_len=32,
                                          new_tokens=settings.speed_new_tokens, repeats=1, warmup=1)  # fmt: skip
            decode = speed["results"][0]["decode_tokens_per_s"]
        return quality, decode, dense_flops / seq2seq_summary(model, settings.window)["flops_per_token"]

    points = settings.points()
    rows, memo = [], {}
    for i, (axis, sparsity, gamma) in enumerate(points):
        step = sub_progress(progress, i / len(points), (i + 1) / len(points), f"point {i + 1}/{len(points)}: ")
        if axis == "dense":
            plan, model = None, dense
            key = "dense"
        else:
            plan = allocate(scores, shape, Allocation(sparsity, gamma, settings.align, settings.scope))
            key = repr(sorted(plan.kept.items()))
            model = None if key in memo else apply_t5_plan(dense, plan, fingerprint=fingerprint)
        if key not in memo:
            memo[key] = (*measure(model, step), sum(p.numel() for p in model.parameters()))
        quality, decode, ideal, params = memo[key]
        used = None if plan is None else plan.settings.gamma
        rows.append({
            "method": "dense" if plan is None else "nirvana",
            "axis": axis,
            "sparsity": sparsity,
            "gamma": gamma if gamma is not None or used is None or len(used) != 1 else next(iter(used.values())),
            "scope": settings.scope,
            "achieved_block_sparsity": 0.0 if plan is None else plan.stats["achieved_block_sparsity"],
            "params": params,
            "quality": quality,
            "decode_tokens_per_s": decode,
            "ideal_speedup": ideal,
        })  # fmt: skip
        if on_row:
            on_row(list(rows))
    return rows
