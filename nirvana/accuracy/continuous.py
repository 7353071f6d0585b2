"""Greedy generation with continuous batching: the moment a row finishes, its slot takes the next prompt.

A static batch (lm-eval's: `batch_size` problems per `generate`) runs as long as its longest row, and
completions differ a lot in length: the 200 MBPP completions of LLM-Pruner's Qwen2.5-Coder-1.5B row are 11
to 256 tokens long (before the stop string), and simulated from those lengths, batches of 8 in problem order
take 4,746 decode steps, 8 slots refilled as rows finish 1,674 (no schedule can take fewer than 1,520, the
total over 8). Fewer steps, each with more rows working: measured, 1.8x less time on the dense model's first
24 MBPP problems, the same completions (benchmarks/generation/batched-qwen2.5-coder-1.5b.md).

How. Each prompt is prefilled alone (batch 1, no padding; a prompt that starts with the task's shared
prefix continues from a copy of that prefix's cache), and its first token is the argmax of its last
logits. The running rows share one KV cache, right-aligned: a row's real keys end at the last column, to
their left is masked padding (the attention mask is 0 there), and every row carries its own position ids,
so columns need not line up between rows (keys are stored already rotated at their own positions). A
row's real keys are contiguous, so a sliding window over the last columns covers the row's last tokens,
as with lm-eval's left padding; a sliding-window layer holds the last `window - 1` columns, as
`DynamicSlidingWindowLayer` does. A step feeds each row's last token; a finished row leaves the cache
(rows are selected out), a waiting prompt joins it (left-padded to the cache's width, or the cache is
left-padded to the prompt's), and columns no row uses any more are dropped.

A row finishes as `transformers.generate` would finish it alone: after `max_new` tokens, on an
end-of-sequence token of the generation config, or when `finished(tokens)` says so (the task's stop
strings, `stops.StopStrings`). So every completion is the one the same model generates for that prompt
alone, up to floating-point order (other rows change the blocking of a matrix product, never what a row
attends to): tests/test_continuous.py checks token equality with `generate` at batch size 1 on tiny
models of every family (sliding windows shorter than the rows included) and a pruned one;
tests/test_batched_generation.py on SmolLM2 and real MBPP and GSM8K problems, through the harness.

Only plain greedy decoding qualifies (`plain_greedy`: no sampling, beams or logits processors) on
models whose cache is made of `DynamicLayer`s and `DynamicSlidingWindowLayer`s (`qualifies`, every causal
family here); anything else takes `generate`.
"""

from __future__ import annotations

import copy
import inspect
from collections import deque
from collections.abc import Callable, Sequence

import torch

# GenerationConfig fields that add a logits processor or change the search; plain greedy has the defaults
_SEARCH_FIELDS = (
    "num_beams",
    "num_beam_groups",
    "penalty_alpha",
    "repetition_penalty",
    "encoder_repetition_penalty",
    "no_repeat_ngram_size",
    "encoder_no_repeat_ngram_size",
    "bad_words_ids",
    "sequence_bias",
    "min_length",
    "min_new_tokens",
    "forced_bos_token_id",
    "forced_eos_token_id",
    "suppress_tokens",
    "begin_suppress_tokens",
    "exponential_decay_length_penalty",
    "guidance_scale",
    "watermarking_config",
    "assistant_model",
    "prompt_lookup_num_tokens",
)


def plain_greedy(model, **kwargs) -> bool:
    """Whether `model.generate(**kwargs)` would decode plain greedily: the model's generation config updated
    with `kwargs`, no sampling, and every search or logits-processor field at its default."""
    # here, not at the top: transformers is heavy to import, and only generation needs it
    from transformers import GenerationConfig

    config = copy.deepcopy(getattr(model, "generation_config", None) or GenerationConfig())
    unused = config.update(**kwargs)
    if unused or config.do_sample:
        return False
    default = GenerationConfig()
    return all(getattr(config, f, None) == getattr(default, f, None) for f in _SEARCH_FIELDS)


def qualifies(model) -> bool:
    """Whether `model`'s cache is made only of `DynamicLayer`s and `DynamicSlidingWindowLayer`s (the layouts
    `_Batch` edits)."""
    # here, not at the top: transformers is heavy to import, and only generation needs it
    from transformers import DynamicCache

    try:
        cache = DynamicCache(config=model.config)
    except (TypeError, ValueError, AttributeError):
        return False
    return bool(cache.layers) and all(_kind(layer) is not None for layer in cache.layers)


def _kind(layer) -> str | None:
    """The kind of a cache layer `_Batch` knows how to edit ("full" or "sliding"), None for any other."""
    # here, not at the top: transformers is heavy to import, and only generation needs it
    from transformers.cache_utils import DynamicLayer, DynamicSlidingWindowLayer

    if type(layer) is DynamicLayer:
        return "full"
    if type(layer) is DynamicSlidingWindowLayer and not layer.record_past:
        return "sliding"
    return None


def _fit(layer, width: int) -> None:
    """Make a right-aligned cache layer hold what it holds for `width` columns: all of them (full attention),
    or the last `sliding_window - 1` (a sliding-window layer, as `DynamicSlidingWindowLayer.update` keeps),
    padding with zeros on the left or dropping columns there."""
    keep = width if _kind(layer) == "full" else min(width, layer.sliding_window - 1)
    for name in ("keys", "values"):
        t = getattr(layer, name)
        have = t.shape[2]
        if keep > have:
            t = torch.cat([t.new_zeros((*t.shape[:2], keep - have, t.shape[3])), t], dim=2)
        elif keep < have:
            t = t[:, :, have - keep :]
        setattr(layer, name, t)
    if _kind(layer) == "sliding":
        layer.cumulative_length = width  # what its attention mask is cut from: the last window of `width`


def eos_ids(model) -> set[int]:
    """The end-of-sequence ids `generate` stops a row on (the generation config's)."""
    eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    if eos is None:
        return set()
    return {int(eos)} if isinstance(eos, int) else {int(e) for e in eos}


class _Batch:
    """The running rows: their prompt indices, one right-aligned cache, its mask, each row's next position."""

    def __init__(self):
        self.rows: list[int] = []
        self.cache = None
        self.mask: torch.Tensor | None = None  # [rows, columns], 1 where a row has a real key
        self.pos: torch.Tensor | None = None  # [rows], the position of the token each row feeds next

    def __len__(self) -> int:
        return len(self.rows)

    def join(self, index: int, cache, length: int, position: int) -> None:
        """Add prompt `index`'s single-row `cache` (`length` columns, all real)."""
        mask = torch.ones((1, length), dtype=torch.long, device=self._device(cache))
        pos = torch.tensor([position], dtype=torch.long, device=mask.device)
        if self.cache is None:
            self.rows, self.cache, self.mask, self.pos = [index], cache, mask, pos
            return
        width = max(self.mask.shape[1], length)
        for mine, theirs in zip(self.cache.layers, cache.layers, strict=True):
            _fit(mine, width)
            _fit(theirs, width)
            mine.keys = torch.cat([mine.keys, theirs.keys], dim=0)
            mine.values = torch.cat([mine.values, theirs.values], dim=0)
        old = self.mask
        self.mask = old.new_zeros((len(self.rows) + 1, width))
        self.mask[:-1, width - old.shape[1] :] = old
        self.mask[-1, width - length :] = 1
        self.rows.append(index)
        self.pos = torch.cat([self.pos, pos])

    def keep(self, keep: list[int]) -> None:
        """Keep only the rows at `keep` (positions in `rows`), and drop the columns none of them uses."""
        if not keep:
            self.rows, self.cache, self.mask, self.pos = [], None, None, None
            return
        idx = torch.tensor(keep, dtype=torch.long, device=self.mask.device)
        self.rows = [self.rows[i] for i in keep]
        self.mask, self.pos = self.mask[idx], self.pos[idx]
        first = int(self.mask.any(dim=0).nonzero()[0])
        self.mask = self.mask[:, first:]
        for layer in self.cache.layers:
            layer.keys, layer.values = layer.keys[idx], layer.values[idx]
            _fit(layer, self.mask.shape[1])

    @staticmethod
    def _device(cache) -> torch.device:
        return cache.layers[0].keys.device


def _last_logits(model, ids: torch.Tensor, **kwargs) -> tuple[torch.Tensor, object]:
    keeps = "logits_to_keep" in inspect.signature(model.forward).parameters
    out = model(input_ids=ids, use_cache=True, **({"logits_to_keep": 1} if keeps else {}), **kwargs)
    return out.logits[:, -1], out.cache


def greedy_continuous(
    model,
    prompts: Sequence[Sequence[int]],
    *,
    max_new: int,
    slots: int,
    finished: Callable[[list[int]], bool] = lambda tokens: False,
    prefix: tuple[Sequence[int], object] | None = None,
    on_done: Callable[[int, list[int]], None] | None = None,
    on_step: Callable[[int], None] | None = None,
) -> list[list[int]]:
    """Each prompt's greedy continuation (token ids, at most `max_new`), `slots` rows at a time.

    `finished(tokens)` is asked after each token a row generates (its tokens so far); an end-of-sequence
    id of the model's generation config ends a row too. `prefix` is (tokens, their cache at batch size 1):
    prompts that start with those tokens prefill only the rest. `on_done(index, tokens)` is called as
    each row finishes (prompts are taken in the order given); `on_step(rows)` before every forward.
    """
    if slots < 1 or max_new < 1:
        raise ValueError(f"slots and max_new must be at least 1, got {slots} and {max_new}")
    device = next(model.parameters()).device
    stop_ids = eos_ids(model)
    shared = list(prefix[0]) if prefix is not None else []
    out: list[list[int] | None] = [None] * len(prompts)
    waiting = deque(range(len(prompts)))
    batch = _Batch()

    def done(index: int) -> bool:
        tokens = out[index]
        return len(tokens) >= max_new or tokens[-1] in stop_ids or finished(tokens)

    def complete(index: int) -> None:
        if on_done is not None:
            on_done(index, out[index])

    def prefill(index: int) -> None:
        tokens = list(prompts[index])
        if not tokens:
            raise ValueError(f"prompt {index} is empty: generation needs at least one token to start from")
        start = len(shared) if shared and len(tokens) > len(shared) and tokens[: len(shared)] == shared else 0
        past = copy.deepcopy(prefix[1]) if start else None
        ids = torch.tensor([tokens[start:]], dtype=torch.long, device=device)
        positions = torch.arange(start, len(tokens), device=device).unsqueeze(0)
        mask = torch.ones((1, len(tokens)), dtype=torch.long, device=device)
        if on_step is not None:
            on_step(1)
        logits, cache = _last_logits(model, ids, cache=past, attention_mask=mask, position_ids=positions)
        out[index] = [int(logits.argmax(dim=-1))]
        if done(index):
            complete(index)
        else:
            batch.join(index, cache, len(tokens), len(tokens))

    with torch.no_grad():
        while waiting or len(batch):
            while waiting and len(batch) < slots:
                prefill(waiting.popleft())
            if not len(batch):
                continue
            if on_step is not None:
                on_step(len(batch))
            feed = torch.tensor([[out[i][-1]] for i in batch.rows], dtype=torch.long, device=device)
            batch.mask = torch.cat([batch.mask, batch.mask.new_ones((len(batch), 1))], dim=1)
            logits, batch.cache = _last_logits(
                model, feed, cache=batch.cache, attention_mask=batch.mask, position_ids=batch.pos.unsqueeze(1)
            )
            batch.pos = batch.pos + 1
            keep = []
            for r, (index, token) in enumerate(zip(batch.rows, logits.argmax(dim=-1).tolist(), strict=True)):
                out[index].append(int(token))
                if done(index):
                    complete(index)
                else:
                    keep.append(r)
            if len(keep) < len(batch):
                batch.keep(keep)
    return out  # type: ignore[return-value]
