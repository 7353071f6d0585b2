"""KL(P_dense || P_pruned): known answers, chunking/caching invariance, bounded memory."""

from __future__ import annotations

import math

import pytest
import torch

from nirvana.measure.kl import DenseReference, kl_per_sequence, kl_to_dense, log_probs, token_kl
from nirvana.models.fingerprint import model_fingerprint
from nirvana.models.shapes import model_shape
from nirvana.pruning.allocation import Allocation, allocate
from nirvana.pruning.slicing import apply_plan
from nirvana.scoring.criteria import compute_scores
from tests.tiny import tiny_model


def _ids(n=6, t=12, vocab=64, seed=0):
    return torch.randint(0, vocab, (n, t), generator=torch.Generator().manual_seed(seed))


def test_token_kl_known_answer():
    p = torch.tensor([0.5, 0.25, 0.25, 0.0])
    q = torch.tensor([0.25, 0.25, 0.25, 0.25])
    expected = 0.5 * math.log(2) + 0.25 * math.log(1) + 0.25 * math.log(1)  # 0 * log(0 / q) = 0
    got = token_kl(p.log()[None, None], q.log()[None, None])
    assert got.shape == (1, 1)
    assert got.item() == pytest.approx(expected, abs=1e-6)
    # KL is not symmetric and is zero only for equal distributions
    assert token_kl(q.log()[None, None], q.log()[None, None]).item() == pytest.approx(0.0, abs=1e-7)


def test_kl_of_dense_model_to_itself_is_zero():
    model = tiny_model("llama")
    ref = DenseReference(model, _ids())
    assert kl_to_dense(model, ref) == pytest.approx(0.0, abs=1e-6)


def _pruned(model, sparsity=0.4):
    scores = compute_scores(model, "magnitude")
    return apply_plan(model, allocate(scores, model_shape(model), Allocation(sparsity, align=1)))


def test_kl_matches_direct_mean_over_tokens_and_is_positive():
    model = tiny_model("llama")
    pruned = _pruned(model)
    ids = _ids()
    direct = token_kl(log_probs(model, ids), log_probs(pruned, ids)).double().mean().item()
    got = kl_to_dense(pruned, DenseReference(model, ids, chunk_size=4))
    assert got > 0
    assert got == pytest.approx(direct, rel=1e-6)
    # per sequence: each row's own token mean, in anchor order, across chunk boundaries (4 + 2 of 6 rows)
    rows = token_kl(log_probs(model, ids), log_probs(pruned, ids)).double().mean(-1)
    per_sequence = kl_per_sequence(pruned, DenseReference(model, ids, chunk_size=4))
    assert per_sequence.dtype == torch.float64 and per_sequence.shape == (ids.shape[0],)
    assert torch.allclose(per_sequence, rows, rtol=1e-6)


def test_chunking_and_cache_budget_do_not_change_the_answer():
    model = tiny_model("qwen2")
    pruned = _pruned(model)
    ids = _ids(n=7)
    full = DenseReference(model, ids, chunk_size=7)
    tiny_chunks = DenseReference(model, ids, chunk_size=2)
    uncached = DenseReference(model, ids, chunk_size=3, max_cache_bytes=0)
    per_chunk = 2 * 12 * 64 * 4
    partial = DenseReference(model, ids, chunk_size=2, max_cache_bytes=2 * per_chunk)
    assert full.cached_bytes == 7 * 12 * 64 * 4
    assert uncached.cached_bytes == 0  # bounded-memory mode: dense forward repeated per chunk
    assert partial.cached_chunks == 2 and partial.cached_bytes == 2 * per_chunk
    values = [kl_to_dense(pruned, r) for r in (full, tiny_chunks, uncached, partial)]
    for v in values[1:]:
        assert v == pytest.approx(values[0], rel=1e-5)


def test_kl_leaves_models_untouched_and_reports_progress():
    model = tiny_model("llama")
    pruned = _pruned(model)
    before = model_fingerprint(model), model_fingerprint(pruned)
    seen = []
    kl_to_dense(pruned, DenseReference(model, _ids(), chunk_size=2), progress=lambda f, m: seen.append(f))
    assert (model_fingerprint(model), model_fingerprint(pruned)) == before
    assert seen == pytest.approx([1 / 3, 2 / 3, 1.0])
