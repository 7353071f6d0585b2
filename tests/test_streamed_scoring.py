"""One pass over the whole batch streams its gradients (each reduced and freed as it is made), optionally
with activation checkpointing: the same scores as micro-batches, about one gradient alive at a time, the
layers' own forwards restored; and the memory plan that chooses between them."""

from __future__ import annotations

import pytest
import torch
from conftest import random_batch

from nirvana.guard import memory
from nirvana.models.architectures import decoder_layers, layer_projections
from nirvana.scoring.criteria import compute_scores, gradient_saliency
from nirvana.scoring.objectives import lm_loss_objective, nirvana_objective
from tests.tiny import TINY_FAMILIES, tiny_model


def _flat(layers) -> torch.Tensor:
    return torch.cat([v for layer in layers for v in layer.values()])


@pytest.mark.parametrize("family", TINY_FAMILIES)
@pytest.mark.parametrize("objective", [nirvana_objective, lm_loss_objective])
def test_streamed_and_checkpointed_passes_equal_micro_batches(family, objective):
    model = tiny_model(family)
    ids = random_batch(n=6, t=12, seed=2).input_ids
    summed = _flat(gradient_saliency(model, ids, objective, micro_batch=2))  # .grad holds the sum
    streamed = _flat(gradient_saliency(model, ids, objective))
    checkpointed = _flat(gradient_saliency(model, ids, objective, checkpoint=True))
    torch.testing.assert_close(streamed, summed, rtol=1e-5, atol=1e-9)
    torch.testing.assert_close(checkpointed, streamed, rtol=1e-5, atol=1e-9)
    assert all(p.grad is None for p in model.parameters())  # nothing left behind
    assert all("forward" not in layer.__dict__ for layer in decoder_layers(model))  # checkpointing undone


def test_a_streamed_pass_holds_about_one_gradient_at_a_time():
    model = tiny_model("llama")
    params = [p for proj in layer_projections(model) for lin in proj.named_linears().values() for p in lin.parameters()]
    alive: list[int] = []
    # registered first, so it runs before the scorer's own hook frees the gradient just accumulated
    handles = [
        p.register_post_accumulate_grad_hook(lambda _p: alive.append(sum(q.grad is not None for q in params)))
        for p in params
    ]
    try:
        gradient_saliency(model, random_batch(n=4, t=8).input_ids, nirvana_objective)
    finally:
        for h in handles:
            h.remove()
    assert len(alive) == len(params) and max(alive) == 1
    alive.clear()
    handles = [
        p.register_post_accumulate_grad_hook(lambda _p: alive.append(sum(q.grad is not None for q in params)))
        for p in params
    ]
    try:  # with micro-batches every gradient is kept to the end (the sum is the score)
        gradient_saliency(model, random_batch(n=4, t=8).input_ids, nirvana_objective, micro_batch=2)
    finally:
        for h in handles:
            h.remove()
    assert max(alive) == len(params)


def test_the_plan_streams_one_pass_and_counts_two_layers_of_gradients():
    model = tiny_model("llama", vocab_size=200_000, num_hidden_layers=6)
    plan = dict(samples=32, seq_len=128, method="autograd", chunked_logits=True)
    one_pass = memory.estimate_scoring(model.config, micro_batch=32, streamed=True, **plan)
    held = memory.estimate_scoring(model.config, micro_batch=32, **plan)
    micro = memory.estimate_scoring(model.config, micro_batch=8, streamed=True, **plan)  # several chunks: held
    layer = sum(p.numel() for lin in layer_projections(model)[0].named_linears().values() for p in [lin.weight])
    assert one_pass.components["weight grads (streamed, two layers')"] == 2 * layer * 4
    assert "weight grads" in held.components and "weight grads" in micro.components
    assert held.components["weight grads"] == 6 * layer * 4 and one_pass.total < held.total


def _planned(totals: dict[tuple[int, bool], int]):
    """An estimate whose total for (micro_batch, checkpoint) is read from `totals` (a 8B-like shape: the
    weight gradients dominate micro-batches, activations the whole batch without checkpointing)."""

    def estimate(config, *, samples, seq_len, micro_batch, dtype, checkpoint=False):
        return memory.MemoryEstimate("scoring", "cpu", {"planned": totals[(micro_batch, checkpoint)]})

    return estimate


def test_the_choice_checkpoints_one_pass_when_micro_batches_do_not_fit(monkeypatch):
    """CPU: 256 tokens' worth when it fits; else the whole batch checkpointed in one pass; else smaller."""
    model = tiny_model("llama")
    totals = {(2, False): 60, (1, False): 55, (32, True): 30, (16, True): 25, (8, True): 20, (4, True): 15}
    totals |= {(2, True): 12, (1, True): 10, (32, False): 300}
    estimate = _planned(totals)
    monkeypatch.setattr(memory, "available_bytes", lambda device="cpu": 100)
    assert memory.choose_scoring(model, 32, 128, checkpoint_ok=True, estimate=estimate) == (2, False)  # 60 <= 80
    monkeypatch.setattr(memory, "available_bytes", lambda device="cpu": 50)
    assert memory.choose_scoring(model, 32, 128, checkpoint_ok=True, estimate=estimate) == (32, True)  # 30 <= 40
    assert memory.choose_scoring(model, 32, 128, checkpoint_ok=False, estimate=estimate) == (1, False)  # LLM-Pruner
    monkeypatch.setattr(memory, "available_bytes", lambda device="cpu": 20)
    assert memory.choose_scoring(model, 32, 128, checkpoint_ok=True, estimate=estimate) == (2, True)  # 12 <= 16


def test_a_realistic_plan_prefers_the_checkpointed_pass_on_a_gpu():
    """Llama-3.1-8B in bf16 on one 24 GB GPU (15 GiB of weights): micro-batches keep 13 GiB of gradients;
    one checkpointed pass keeps two layers' and fits."""
    from transformers import LlamaConfig

    from nirvana.bench.gpu import LLAMA_31_8B

    config = LlamaConfig(**LLAMA_31_8B)
    plan = dict(samples=32, seq_len=128, dtype=torch.bfloat16, chunked_logits=True, streamed=True)
    lean = memory.estimate_scoring(config, micro_batch=32, checkpoint=True, **plan)
    smallest = memory.estimate_scoring(config, micro_batch=1, checkpoint=True, **plan)
    assert lean.total < 4 * memory.GIB < smallest.total < 14 * memory.GIB  # 24 GB - 15 GiB leaves about 7


def test_compute_scores_records_the_chosen_plan(monkeypatch):
    model = tiny_model("llama")
    batch = random_batch(n=8, t=16)
    free = compute_scores(model, "nirvana", batch, micro_batch=8, use_cache=False)
    monkeypatch.setattr(memory, "choose_scoring", lambda *a, **k: (8, True))
    monkeypatch.setattr("nirvana.scoring.criteria.choose_scoring", lambda *a, **k: (8, True))
    chosen = compute_scores(model, "nirvana", batch, use_cache=False)
    assert chosen.meta["micro_batch"] == 8 and chosen.meta["activation_checkpointing"] is True
    assert free.meta["activation_checkpointing"] is False
    torch.testing.assert_close(chosen.mlp, free.mlp, rtol=1e-5, atol=1e-9)
