"""Hook-based saliency (no weight gradients) equals the autograd `.grad` path exactly on fp32 models."""

from __future__ import annotations

import pytest
import torch

from nirvana.errors import InvalidInput
from nirvana.scoring.criteria import compute_scores, gradient_saliency, lm_loss_objective, nirvana_objective
from nirvana.scoring.hooks import hook_saliency, resolve_method
from tests.conftest import random_batch
from tests.tiny import TINY_FAMILIES, tiny_model

OBJECTIVES = {"nirvana": nirvana_objective, "taylor": lm_loss_objective}


def _assert_layers_close(actual, expected):
    assert len(actual) == len(expected)
    for got, want in zip(actual, expected):
        assert got.keys() == want.keys()
        for name in want:
            assert want[name].abs().sum() > 0, f"{name}: a zero saliency would make the comparison vacuous"
            torch.testing.assert_close(got[name], want[name], msg=lambda m, n=name: f"{n}: {m}")


# Every family with the full batch; micro-batching (fp32 dW accumulation) on three of them.
CASES = [(f, o, 0) for f in TINY_FAMILIES for o in sorted(OBJECTIVES)] + [
    (f, o, 3) for f in ("llama", "qwen2", "gemma3_text") for o in sorted(OBJECTIVES)
]


@pytest.mark.parametrize(("family", "objective", "micro_batch"), CASES)
def test_hooks_equal_autograd(family, objective, micro_batch):
    model = tiny_model(family)
    ids = random_batch(n=4, t=16).input_ids
    expected = gradient_saliency(model, ids, OBJECTIVES[objective], micro_batch)
    actual = hook_saliency(model, ids, OBJECTIVES[objective], micro_batch)
    _assert_layers_close(actual, expected)


def test_hooks_leave_no_gradients_and_restore_requires_grad(tiny_llama):
    flags = {name: p.requires_grad for name, p in tiny_llama.named_parameters()}
    hook_saliency(tiny_llama, random_batch().input_ids, nirvana_objective)
    assert all(p.grad is None for p in tiny_llama.parameters()), "hooks must not create weight .grad buffers"
    assert {name: p.requires_grad for name, p in tiny_llama.named_parameters()} == flags
    assert not any(m._forward_hooks for m in tiny_llama.modules()), "hooks must be removed"


def test_micro_batches_accumulate_dw_before_the_absolute_value(tiny_llama):
    """|sum of dW| != sum of |dW|: summing per-chunk scores would differ from the full-batch result."""
    ids = random_batch(n=4, t=16).input_ids
    full = hook_saliency(tiny_llama, ids, nirvana_objective)
    chunked = hook_saliency(tiny_llama, ids, nirvana_objective, micro_batch=1)
    _assert_layers_close(chunked, full)
    per_chunk = [hook_saliency(tiny_llama, ids[i : i + 1], nirvana_objective) for i in range(4)]
    summed = sum(p[0]["q_proj"] for p in per_chunk) / 4  # each chunk normalised by its own N=1
    assert not torch.allclose(summed, full[0]["q_proj"])


def test_compute_scores_method_option_and_cache_key(tiny_llama):
    batch = random_batch()
    auto = compute_scores(tiny_llama, "nirvana", batch)
    hooks = compute_scores(tiny_llama, "nirvana", batch, method="hooks")
    assert auto.meta["method"] == "autograd" and hooks.meta["method"] == "hooks"
    assert not hooks.meta["cache_hit"], "the method is part of the cache key"
    torch.testing.assert_close(hooks.attn, auto.attn)
    torch.testing.assert_close(hooks.mlp, auto.mlp)
    assert compute_scores(tiny_llama, "nirvana", batch, method="hooks").meta["cache_hit"]


def test_method_validation(tiny_llama):
    assert resolve_method(tiny_llama, "auto") == "autograd"
    with pytest.raises(InvalidInput, match="autograd, hooks"):
        resolve_method(tiny_llama, "backprop")
