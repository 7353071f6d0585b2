"""Shared-prefix log-likelihood (`nirvana.accuracy.prefix`) equals lm-eval's stock computation.

The stock path is `HFLM._loglikelihood_tokens` itself, called on the same wrapper: the answers
(sum of log-probabilities, greedy flag) must agree on tiny models of every family, sliding-window
ones with a prefix longer than the window, a pruned model, batches with padding, and requests of
different context lengths.
"""

from __future__ import annotations

import importlib.util
import random

import pytest
import torch

from nirvana.accuracy import prefix
from tests.tiny import tiny_model

pytestmark = pytest.mark.skipif(importlib.util.find_spec("lm_eval") is None, reason="needs lm-eval")

FAMILIES = ["llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "gemma3_text"]


def requests_with_prefix(seed: int, shared: int, n: int, vocab: int = 64):
    rng = random.Random(seed)
    head = [rng.randrange(vocab) for _ in range(shared)]
    reqs = []
    for i in range(n):
        ctx = head + [rng.randrange(vocab) for _ in range(rng.randrange(1, 12))]
        cont = [rng.randrange(vocab) for _ in range(rng.randrange(1, 9))]
        reqs.append(((f"ctx{i}", f"cont{i}"), ctx, cont))
    return reqs


def wrapper(model, smollm2, batch_size=3):
    from nirvana.accuracy.harness import _lm_class

    return _lm_class()(pretrained=model, tokenizer=smollm2.tokenizer, batch_size=batch_size, max_length=128)


def stock(lm, reqs):
    from lm_eval.models.huggingface import HFLM

    return HFLM._loglikelihood_tokens(lm, reqs, disable_tqdm=True)


def assert_same(got, want):
    assert [g[1] for g in got] == [w[1] for w in want]
    torch.testing.assert_close(
        torch.tensor([g[0] for g in got]), torch.tensor([w[0] for w in want]), rtol=1e-5, atol=1e-4
    )


@pytest.mark.parametrize("family", FAMILIES)
def test_shared_prefix_answers_equal_the_stock_path(family, smollm2):
    model = tiny_model(family, max_position_embeddings=128)
    lm = wrapper(model, smollm2)
    reqs = requests_with_prefix(seed=1, shared=70, n=7)  # 70 > the sliding window (16) of gemma2/3
    assert prefix.shared_prefix(reqs, lm.max_length) >= 64
    assert_same(lm._loglikelihood_tokens(reqs), stock(lm, reqs))


def test_greedy_flags_agree_when_the_continuation_is_the_argmax(smollm2):
    model = tiny_model("llama", max_position_embeddings=128)
    lm = wrapper(model, smollm2, batch_size=2)
    reqs = requests_with_prefix(seed=2, shared=66, n=4)
    with torch.no_grad():  # make request 0's first continuation token the model's greedy choice
        ctx = reqs[0][1]
        best = int(model(torch.tensor([ctx])).logits[0, -1].argmax())
    reqs[0] = (reqs[0][0], ctx, [best])
    got = lm._loglikelihood_tokens(reqs)
    assert got[0][1] is True
    assert_same(got, stock(lm, reqs))


def test_a_pruned_model_gives_the_stock_answers(smollm2):
    from nirvana.models.shapes import model_shape
    from nirvana.pruning.allocation import Allocation
    from nirvana.pruning.slicing import slice_at
    from nirvana.scoring.criteria import compute_scores

    model = tiny_model("qwen2", max_position_embeddings=128)
    shape = model_shape(model)
    scores = compute_scores(model, "random", use_cache=False)
    _, pruned = slice_at(model, scores, Allocation(0.5, align=1), shape)
    assert model_shape(pruned).num_kv_heads != shape.num_kv_heads or model_shape(pruned) != shape
    lm = wrapper(pruned, smollm2, batch_size=4)
    reqs = requests_with_prefix(seed=3, shared=80, n=9)
    assert_same(lm._loglikelihood_tokens(reqs), stock(lm, reqs))


def test_shared_prefix_length_rules():
    a = ((("a", "b")), [1, 2, 3, 4, 5], [6])
    b = ((("a", "c")), [1, 2, 3, 9], [7, 8])
    assert prefix.shared_prefix([a, b], max_length=100, min_shared=1) == 3
    # capped at len(context) - 1 so the context's last token runs with the continuation
    c = ((("a", "d")), [1, 2, 3], [4, 5])
    assert prefix.shared_prefix([a, c], max_length=100, min_shared=1) == 2
    assert prefix.shared_prefix([a, b], max_length=100, min_shared=4) == 0  # too short to pay
    assert prefix.shared_prefix([a, b], max_length=4, min_shared=1) == 0  # lm-eval would truncate a
    assert prefix.shared_prefix([], max_length=100) == 0


def test_calls_without_a_long_shared_prefix_take_the_stock_path(smollm2, monkeypatch):
    lm = wrapper(tiny_model("llama", max_position_embeddings=128), smollm2)
    reqs = requests_with_prefix(seed=4, shared=5, n=5)
    called = []
    monkeypatch.setattr(prefix, "score_shared_prefix", lambda *a, **k: called.append(1))
    assert_same(lm._loglikelihood_tokens(reqs), stock(lm, reqs))
    assert not called


# Generation: the prompt prefix every row shares runs once, rows become [prefix][padding][rest]


def generation_batch(seed: int, shared: int, n: int, pad_id: int, vocab: int = 64):
    """A left-padded batch of `n` prompts that start with the same `shared` tokens, as lm-eval builds it."""
    rng = random.Random(seed)
    head = [rng.randrange(1, vocab) for _ in range(shared)]
    rows = [head + [rng.randrange(1, vocab) for _ in range(rng.randrange(1, 12))] for _ in range(n)]
    width = max(map(len, rows))
    ids = torch.tensor([[pad_id] * (width - len(r)) + r for r in rows])
    mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows])
    return ids, mask


def generate_both(lm, ids, mask, new_tokens: int = 12):
    from lm_eval.models.huggingface import HFLM

    width = ids.shape[1]
    kw = dict(max_length=width + new_tokens, stop=["never-produced"])
    got = lm._model_generate(ids, attention_mask=mask, **kw)
    want = HFLM._model_generate(lm, ids, attention_mask=mask, **kw)  # lm-eval's own: left padding, no prefix
    return got[:, width:], want[:, width:]


@pytest.mark.parametrize("family", FAMILIES)
def test_generation_with_the_shared_prompt_prefix_equals_the_stock_path(family, smollm2):
    model = tiny_model(family, max_position_embeddings=128)
    lm = wrapper(model, smollm2, batch_size=4)
    ids, mask = generation_batch(seed=5, shared=70, n=4, pad_id=lm.tokenizer.pad_token_id)
    sliding = prefix.uses_sliding_window(model)
    assert sliding == (family in ("gemma2", "gemma3_text") or bool(getattr(model.config, "sliding_window", None)))
    got, want = generate_both(lm, ids, mask)
    assert torch.equal(got, want)
    assert (lm._prompt_prefix is None) == sliding  # the others ran their prefix once and kept it
    if not sliding:
        assert len(lm._prompt_prefix[0]) == 70
        # the next batch (other problems, same prefix) reuses it, and a single row can too
        kept = lm._prompt_prefix[1]
        again = generation_batch(seed=5, shared=70, n=2, pad_id=lm.tokenizer.pad_token_id)
        for batch in (again, (ids[:1], mask[:1])):
            got, want = generate_both(lm, *batch)
            assert torch.equal(got, want)
            assert lm._prompt_prefix[1] is kept


def test_generation_prefix_on_a_pruned_model(smollm2):
    from nirvana.pruning.allocation import Allocation
    from nirvana.pruning.slicing import slice_at
    from nirvana.scoring.criteria import compute_scores

    model = tiny_model("qwen2", max_position_embeddings=128)
    _, pruned = slice_at(model, compute_scores(model, "random", use_cache=False), Allocation(0.5, align=1))
    lm = wrapper(pruned, smollm2, batch_size=4)
    got, want = generate_both(lm, *generation_batch(seed=7, shared=80, n=4, pad_id=lm.tokenizer.pad_token_id))
    assert torch.equal(got, want)
    assert lm._prompt_prefix is not None


def test_generation_prefix_length_rules():
    rows = [[1, 2, 3, 4, 5], [1, 2, 3, 9], [1, 2, 3, 4]]
    assert prefix.generation_prefix(rows, min_shared=1) == 3
    assert prefix.generation_prefix(rows, min_shared=4) == 0  # too short to pay
    assert prefix.generation_prefix([[1, 2, 3], [1, 2, 3, 4]], min_shared=1) == 2  # each row keeps a token
    assert prefix.generation_prefix([[1, 2, 3, 4]], min_shared=1) == 0  # one row shares nothing
    assert prefix.generation_prefix([[1, 2, 3, 4]], known=[1, 2], min_shared=1) == 2  # but reuses a known prefix
    assert prefix.generation_prefix(rows, known=[1, 2, 7], min_shared=1) == 3  # a known one that does not fit
    ids, mask = prefix.prefix_first([[1, 2, 3, 4, 5], [1, 2, 9]], 2, width=6, pad_id=0)
    assert ids.tolist() == [[1, 2, 0, 3, 4, 5], [1, 2, 0, 0, 0, 9]]
    assert mask.tolist() == [[1, 1, 0, 1, 1, 1], [1, 1, 0, 0, 0, 1]]
    back = prefix.unpadded_rows(*generation_batch(seed=0, shared=3, n=2, pad_id=0))
    assert all(r[:3] == back[0][:3] for r in back)
