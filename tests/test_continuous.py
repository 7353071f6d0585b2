"""Continuous batching (`nirvana.accuracy.continuous`) gives each prompt the tokens `generate` gives it alone.

The oracle is `transformers.generate` at batch size 1 (greedy, the same stop rule as a `StoppingCriteria`,
the same end-of-sequence id), on tiny models of every family and on a pruned one: rows join and leave a
shared cache at different steps, prompts have different lengths, some start with a shared prefix whose
cache is reused, some finish on their first token. Gemma-2/3 and Mistral have sliding-window layers
(window 16 for the Gemmas; rows reach 42 tokens), so their windows slide during prefill and decoding.
"""

from __future__ import annotations

import random

import pytest
import torch
from transformers import StoppingCriteria, StoppingCriteriaList

from nirvana.accuracy import continuous
from tests.tiny import TINY_FAMILIES, tiny_model

STOPPERS = {5, 17, 40}  # a row "says" a stop string when it produces one of these (varied lengths)


def stop_rule(tokens: list[int]) -> bool:
    return tokens[-1] in STOPPERS


class _Rule(StoppingCriteria):
    def __init__(self, prompt_len: int):
        self.prompt_len = prompt_len

    def __call__(self, input_ids, scores, **kwargs):
        return torch.tensor([stop_rule(input_ids[0, self.prompt_len :].tolist())])


def alone(model, prompt: list[int], max_new: int) -> list[int]:
    ids = torch.tensor([prompt])
    out = model.generate(
        ids,
        attention_mask=torch.ones_like(ids),
        max_new_tokens=max_new,
        do_sample=False,
        stopping_criteria=StoppingCriteriaList([_Rule(len(prompt))]),
        pad_token_id=0,
    )
    return out[0, len(prompt) :].tolist()


def prompts(seed: int, n: int, shared: list[int], vocab: int = 64) -> list[list[int]]:
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        own = [rng.randrange(1, vocab) for _ in range(rng.randrange(1, 20))]
        rows.append(shared + own if i % 3 else own)  # every third prompt without the prefix
    return rows


def prefix_of(model, shared: list[int]):
    with torch.no_grad():
        return shared, model(input_ids=torch.tensor([shared]), use_cache=True).cache


def check(model, seed: int, slots: int, max_new: int = 14, shared_len: int = 9) -> list[list[int]]:
    rng = random.Random(100 + seed)
    shared = [rng.randrange(1, 64) for _ in range(shared_len)]
    rows = prompts(seed, 8, shared)
    done_order = []
    got = continuous.greedy_continuous(
        model,
        rows,
        max_new=max_new,
        slots=slots,
        finished=stop_rule,
        prefix=prefix_of(model, shared),
        on_done=lambda i, tokens: done_order.append(i),
    )
    want = [alone(model, r, max_new) for r in rows]
    assert got == want
    assert sorted(done_order) == list(range(len(rows)))
    return got


@pytest.mark.parametrize("family", TINY_FAMILIES)
def test_each_prompt_gets_what_generate_gives_it_alone(family):
    model = tiny_model(family)
    model.generation_config.eos_token_id = 33
    assert continuous.qualifies(model)
    lengths = set()
    for seed, slots in ((0, 3), (1, 1), (2, 8)):
        lengths |= {len(t) for t in check(model, seed, slots)}
    assert len(lengths) >= 2  # rows really finished at different steps


def test_a_pruned_model_continuous_equals_alone():
    from nirvana.pruning.allocation import Allocation
    from nirvana.pruning.slicing import slice_at
    from nirvana.scoring.criteria import compute_scores

    model = tiny_model("qwen2")
    _, pruned = slice_at(model, compute_scores(model, "random", use_cache=False), Allocation(0.5, align=1))
    assert continuous.qualifies(pruned)
    check(pruned, seed=4, slots=3)


def test_rows_that_finish_at_once_and_the_length_cap():
    model = tiny_model("llama")
    rows = prompts(3, 5, [])
    got = continuous.greedy_continuous(model, rows, max_new=1, slots=2)
    assert got == [alone(model, r, 1) for r in rows]
    assert [len(t) for t in got] == [1] * 5
    everything = set(range(64))  # every token "stops": each row ends on its first token, never joins the cache
    got = continuous.greedy_continuous(model, rows, max_new=9, slots=2, finished=lambda t: t[-1] in everything)
    assert [len(t) for t in got] == [1] * 5


def test_plain_greedy_rules():
    model = tiny_model("llama")
    assert continuous.plain_greedy(model, do_sample=False)
    assert not continuous.plain_greedy(model, do_sample=True)
    assert not continuous.plain_greedy(model, do_sample=False, repetition_penalty=1.2)
    assert not continuous.plain_greedy(model, do_sample=False, num_beams=2)
    assert not continuous.plain_greedy(model, do_sample=False, not_a_generation_flag=1)
    model.generation_config.no_repeat_ngram_size = 3  # a model's own config counts too
    assert not continuous.plain_greedy(model, do_sample=False)


def test_bad_arguments_say_what_is_accepted():
    model = tiny_model("llama")
    with pytest.raises(ValueError, match="at least 1"):
        continuous.greedy_continuous(model, [[1, 2]], max_new=0, slots=2)
    with pytest.raises(ValueError, match="empty"):
        continuous.greedy_continuous(model, [[]], max_new=3, slots=2)
