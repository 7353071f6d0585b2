"""The memory guard plans each method's own scoring pass, from the methods table, before any scoring."""

from __future__ import annotations

import dataclasses

import pytest
from conftest import random_batch

from nirvana.errors import OutOfMemory
from nirvana.guard import memory
from nirvana.methods import METHODS, method_config
from nirvana.methods.run import method_scores
from tests.tiny import tiny_model

SIZES = dict(samples=8, seq_len=16, micro_batch=0)


def estimate(name: str, settings: dict | None = None, **sizes):
    model = tiny_model("llama", num_hidden_layers=4)
    return METHODS[name].memory(model.config, method_config(name, settings), **{**SIZES, **sizes})


def test_second_order_llm_pruner_plans_one_fp32_buffer_per_block_weight_more():
    block_weights = memory.ArchSizes.from_config(tiny_model("llama", num_hidden_layers=4).config).block_weights
    first = estimate("llm-pruner")
    for taylor in ("param_second", "param_mix"):
        second = estimate("llm-pruner", {"taylor": taylor})
        assert second.total - first.total == block_weights * 4  # acc_grad, importance.py
        assert second.components["squared gradients (fp32)"] == block_weights * 4
    assert estimate("llm-pruner", {"taylor": "vectorize"}).total == first.total
    assert first.total == estimate("nirvana").total  # the same one backward pass with .grad buffers


def test_flap_plans_one_layer_forward_without_logits_below_nirvana():
    flap, nirvana = estimate("flap"), estimate("nirvana")
    assert flap.total < nirvana.total
    assert "logits" not in flap.components and "weight grads" not in flap.components
    # one layer's activations: doubling the layers leaves them as they are; nirvana's grow with L
    model = tiny_model("llama", num_hidden_layers=8)
    deeper = METHODS["flap"].memory(model.config, method_config("flap"), **SIZES)
    assert deeper.components["activations (one layer)"] == flap.components["activations (one layer)"]
    # and they scale with the micro-batch
    half = estimate("flap", micro_batch=4)
    assert 2 * half.components["activations (one layer)"] == flap.components["activations (one layer)"]


@pytest.mark.parametrize(
    "name, settings", [("llm-pruner", None), ("llm-pruner", {"taylor": "param_mix"}), ("flap", None)]
)
def test_an_estimate_over_the_budget_refuses_before_any_scoring(name, settings, monkeypatch):
    """The guard checks the method's estimate (from its table row) and raises before `score` runs."""
    config, real = method_config(name, settings), METHODS[name]
    chunked = {"chunked_logits": True} if METHODS[name].uses_gradients else {}  # the LM loss by vocabulary chunks
    tiny = tiny_model("llama", num_hidden_layers=4).config
    need = METHODS[name].memory(tiny, config, samples=3, seq_len=8, **chunked)
    calls = []

    def never(*args, **kwargs):
        calls.append(args)
        raise AssertionError("scored although the estimate did not fit")

    monkeypatch.setitem(METHODS, name, dataclasses.replace(METHODS[name], scorer=never))
    monkeypatch.setattr(memory, "available_bytes", lambda device="cpu": int(need.total / 0.9) - 1)
    model = tiny_model("llama", num_hidden_layers=4)
    with pytest.raises(OutOfMemory, match=r"scoring needs about .* GiB"):  # the whole batch at once, as asked
        method_scores(model, name, config, random_batch(n=3, t=8), micro_batch=3, use_cache=False)
    assert not calls
    # with exactly enough it runs (the check compares the same estimate)
    monkeypatch.setattr(memory, "available_bytes", lambda device="cpu": int(need.total / 0.9) + 16)
    monkeypatch.setitem(METHODS, name, real)
    method_scores(model, name, config, random_batch(n=3, t=8), micro_batch=3, use_cache=False)
