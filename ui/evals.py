"""Evaluations the app runs (perplexity, speed, generations, KL selection, sweeps), memoised by content (speed is not).

Each wrapper calls the library function and stores the result in a shared `Memo` keyed by the
model identity (`model_key`: the spec key, plus the plan hash for a pruned copy) and every
setting, so returning to a page shows the last result without recomputing. Heavy work runs
under `nirvana.guard.locks.heavy_work` (one job per device).
"""

from __future__ import annotations

import hashlib

from nirvana.measure.family import measures
from nirvana.measure.speed import compare_speeds
from nirvana.models.weights import input_device
from nirvana.store.keys import content_key
from ui.resources import hold_device, memo

SPEED_BATCH_SIZES_CPU = (1, 4)
SPEED_BATCH_SIZES_GPU = (1, 8, 32)


def ppl_text(value: float) -> str:
    """A perplexity as the metric shows it: two decimals, or three significant digits past 10^5 (a random or
    broken model's, which would not fit the box)."""
    return f"{value:.2f}" if value < 1e5 else f"{value:.3g}"


def plan_key(plan) -> str:
    """Content hash of a plan's kept units and settings (what identifies a pruned copy)."""
    return hashlib.sha256(plan.to_json().encode()).hexdigest()[:16]


def pruned_model_key(spec_key: str, plan) -> str:
    return content_key(spec_key, plan_key(plan))


def perplexity(model, tokenizer, model_key: str, dataset: str, tokens: int, window: int, progress=None):
    """The family's perplexity (`nirvana.measure.family`: next-token, or a T5's continuation given its prefix)
    with the paper's windows, memoised; returns a dict."""

    key = content_key("ppl", model_key, dataset, tokens, window)
    ppl = measures(model).perplexity

    def compute():
        with hold_device(model, progress):
            return ppl(model, tokenizer, dataset, seq_len=window, max_tokens=tokens, fallback=True, progress=progress)

    return memo("ppl").get_or_compute(key, compute).to_dict()


def speed_pair(
    dense,
    pruned,
    progress=None,
    *,
    batch_sizes: tuple[int, ...] | None = None,
    prompt_len: int = 64,
    new_tokens: int = 16,
    repeats: int = 5,
) -> dict:
    """Dense and pruned timed in turn, round by round, each phase's speed-up judged against its FLOPs ideal
    (`nirvana.measure.speed.compare_speeds`).

    Both models are timed under one hold of the device, so no other session's heavy work (scoring, perplexity,
    a sweep) starts between or during the rounds. Not memoised: a speed is only as good as the moment it was
    taken, so every click measures afresh.
    """
    if batch_sizes is None:
        batch_sizes = SPEED_BATCH_SIZES_CPU if str(input_device(dense)) == "cpu" else SPEED_BATCH_SIZES_GPU
    with hold_device(dense, progress):
        return compare_speeds(
            dense,
            pruned,
            batch_sizes=batch_sizes,
            prompt_len=prompt_len,
            new_tokens=new_tokens,
            repeats=repeats,
            warmup=1,
            progress=progress,
        )


def generate(
    model, tokenizer, model_key: str, prompts: list[str], max_new_tokens: int, chat: bool = True, progress=None
) -> list[dict]:
    """Greedy continuations of each prompt (the family's `generate`; a T5 takes `chat=False`), memoised."""

    key = content_key("generate", model_key, prompts, max_new_tokens, chat)
    generate_rows = measures(model).generate

    def compute():
        with hold_device(model, progress):
            return generate_rows(model, tokenizer, prompts, max_new_tokens=max_new_tokens, chat=chat, progress=progress)

    return memo("generate").get_or_compute(key, compute)
