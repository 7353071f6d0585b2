"""Evaluations the app runs (perplexity, speed, generations, KL selection, sweeps), memoised by content.

Each wrapper calls the library function and stores the result in a shared `Memo` keyed by the
model identity (`model_key`: the spec key, plus the plan hash for a pruned copy) and every
setting, so returning to a page shows the last result without recomputing. Heavy work runs
under `nirvana.guard.locks.heavy_work` (one job per device).
"""

from __future__ import annotations

import hashlib

from nirvana.measure.family import measures
from nirvana.measure.speed import measure_speed
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


def speed(
    model,
    model_key: str,
    progress=None,
    *,
    batch_sizes: tuple[int, ...] | None = None,
    prompt_len: int = 64,
    new_tokens: int = 16,
    repeats: int = 2,
):
    """Measured prefill/decode speed and peak memory (`nirvana.measure.speed.measure_speed`), memoised."""

    if batch_sizes is None:
        batch_sizes = SPEED_BATCH_SIZES_CPU if str(input_device(model)) == "cpu" else SPEED_BATCH_SIZES_GPU
    key = content_key("speed", model_key, batch_sizes, prompt_len, new_tokens, repeats)

    def compute():
        with hold_device(model, progress):
            return measure_speed(
                model,
                batch_sizes=batch_sizes,
                prompt_len=prompt_len,
                new_tokens=new_tokens,
                repeats=repeats,
                warmup=1,
                progress=progress,
            )

    return memo("speed").get_or_compute(key, compute)


def forget_speed() -> None:
    """Drop memoised speed results: a new measurement is asked for (figures on a busy machine vary)."""
    memo("speed").clear()


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
