"""Log-likelihood requests that share a prompt prefix, scored with that prefix computed once.

Few-shot tasks put the same examples in front of every problem: MBPP's 3-shot gold-BPB prompt is
~600 tokens of shared examples before a ~150-token problem and answer, GSM8K's 8-shot chain of
thought ~900 before ~150. lm-eval's `HFLM._loglikelihood_tokens` runs each request's full window,
so most of the work re-reads the same examples. Here the longest token prefix shared by every
request of a call runs once with a KV cache; each batch of requests then runs only its own suffix on
a copy of that cache. What is computed per request is lm-eval's: the window `(context +
continuation)[:-1]`, the log-softmax of the logits over the continuation's positions, their sum at
the continuation tokens, and whether every continuation token is the argmax.

The numbers equal the stock path's up to floating-point order (the attention over the prefix is
the same sum, taken in a different blocking): `tests/test_accuracy_prefix.py` checks it on tiny
models of every family, sliding-window ones included, and on pruned ones. Calls whose requests share
fewer than `MIN_SHARED` tokens (zero-shot multiple choice), or any request that lm-eval would
truncate from the left, go to the stock path unchanged. (Grouping multiple-choice requests by
their shared context instead was tried and measured: 4% less CPU time than the stock path on
ARC-Easy, HellaSwag, PIQA and OpenBookQA, n = 40 each, same accuracies; the many small forwards
cost what the shorter inputs save, so it was left out.)
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F

MIN_SHARED = 64  # tokens: below this the copy of the cache costs about what it saves

Request = tuple[tuple[str, str], list[int], list[int]]  # lm-eval's ((context, continuation), ctx ids, cont ids)


def _common_length(a: Sequence[int], b: Sequence[int], limit: int) -> int:
    n = min(limit, len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def shared_prefix(requests: Sequence[Request], max_length: int, min_shared: int = MIN_SHARED) -> int:
    """Tokens at the front of every request's window that can be computed once; 0 for the stock path.

    At most `len(context) - 1` of any request, so that every continuation's first prediction
    (made at the context's last token) falls in the part each request runs itself.
    """
    if not requests:
        return 0
    first = requests[0][1] + requests[0][2]
    shared = len(first)
    for _, ctx, cont in requests:
        if len(ctx) + len(cont) > max_length + 1:  # lm-eval truncates this one from the left
            return 0
        shared = min(shared, len(ctx) - 1)
        shared = _common_length(first, ctx + cont, shared)
        if shared < min_shared:
            return 0
    return shared


def score_shared_prefix(
    forward: Callable[..., torch.Tensor],
    requests: Sequence[Request],
    prefix_len: int,
    batch_size: int,
    device: torch.device | str = "cpu",
    softmax_dtype: torch.dtype | None = None,
    on_answer: Callable[[tuple[str, str], tuple[float, bool]], None] | None = None,
) -> list[tuple[float, bool]]:
    """(sum log p(continuation), continuation is greedy) per request, in the order given.

    `forward(input_ids, cache)` returns (logits, extended cache) of the model, without gradients.
    """
    first = requests[0][1] + requests[0][2]
    prefix = torch.tensor([first[:prefix_len]], dtype=torch.long, device=device)
    _, cache = forward(prefix, None)
    windows = [(ctx + cont)[:-1][prefix_len:] for _, ctx, cont in requests]
    order = sorted(range(len(requests)), key=lambda i: -len(windows[i]))  # longest first, like lm-eval
    results: list[tuple[float, bool] | None] = [None] * len(requests)
    for start in range(0, len(order), batch_size):
        batch = order[start : start + batch_size]
        width = len(windows[batch[0]])
        ids = torch.zeros((len(batch), width), dtype=torch.long, device=device)
        for row, i in enumerate(batch):  # right padding: a causal model's real tokens never see it
            ids[row, : len(windows[i])] = torch.tensor(windows[i], dtype=torch.long, device=device)
        past = copy.deepcopy(cache)
        if len(batch) > 1:
            past.batch_repeat_interleave(len(batch))
        logits, _ = forward(ids, past)
        logprobs = F.log_softmax(logits, dim=-1, dtype=softmax_dtype)
        for row, i in enumerate(batch):
            cont = requests[i][2]
            end = len(windows[i])
            span = logprobs[row, end - len(cont) : end]  # positions that predict the continuation
            target = torch.tensor(cont, dtype=torch.long, device=device)
            greedy = bool((span.argmax(dim=-1) == target).all())
            answer = (float(span.gather(1, target.unsqueeze(1)).sum()), greedy)
            results[i] = answer
            if on_answer is not None:
                on_answer(requests[i][0], answer)
    return results  # type: ignore[return-value]


# Generation (MBPP's 3-shot and GSM8K's 8-shot prompts): the prefix every prompt starts with runs once per
# task, not once per problem. lm-eval left-pads a batch, which puts the prefix at a different offset in
# each row; `prefix_first` moves each row's padding between the prefix and the rest instead ([prefix]
# [padding][rest], the same width), where the attention mask hides it and the position ids (counted over
# the mask) are the unpadded ones, so the prefix's cached keys and values serve every row.


def generation_prefix(rows: Sequence[Sequence[int]], known: Sequence[int] = (), min_shared: int = MIN_SHARED) -> int:
    """Tokens every row starts with that can be computed once: `len(known)` when every row starts with `known`,
    else the rows' longest common start (0 below `min_shared`, or for a single row, which shares nothing).
    At most `len(row) - 1` of any row, so each generates from a token of its own."""
    limit = min(len(r) for r in rows) - 1
    if known and len(known) <= limit and all(_common_length(known, r, len(known)) == len(known) for r in rows):
        return len(known)
    if len(rows) < 2:
        return 0
    shared = limit
    for row in rows[1:]:
        shared = _common_length(rows[0], row, shared)
    return shared if shared >= min_shared else 0


def unpadded_rows(ids: torch.Tensor, mask: torch.Tensor) -> list[list[int]]:
    """Each row's real tokens of a left-padded batch."""
    return [row[m.bool()].tolist() for row, m in zip(ids, mask, strict=True)]


def prefix_first(rows: Sequence[Sequence[int]], prefix_len: int, width: int, pad_id: int, device=None):
    """(ids, mask), `width` wide: each row as [its first `prefix_len` tokens][padding][the rest]."""
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long, device=device)
    mask = torch.zeros((len(rows), width), dtype=torch.long, device=device)
    ids[:, :prefix_len] = torch.tensor(rows[0][:prefix_len], dtype=torch.long, device=device)
    mask[:, :prefix_len] = 1
    for i, row in enumerate(rows):
        rest = torch.tensor(row[prefix_len:], dtype=torch.long, device=device)
        ids[i, width - len(rest) :] = rest
        mask[i, width - len(rest) :] = 1
    return ids, mask


def uses_sliding_window(model) -> bool:
    """Whether any attention layer of `model` sees only a window of the cache. Such a window counts cache
    slots, padding included, so padding inside a row would narrow it: these models keep left padding."""
    # here, not at the top: transformers is heavy to import, and only the generation path needs it
    from transformers import DynamicCache

    try:
        return any(DynamicCache(config=model.config).is_sliding)
    except (TypeError, ValueError, AttributeError):  # a config the cache cannot read: take the safe path
        return True
