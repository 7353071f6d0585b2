"""The NIRVANA objective and the LM loss computed a vocabulary chunk at a time equal the full-logits ones: value,
gradient, scores (NIRVANA, loss-Taylor, LLM-Pruner)."""

from __future__ import annotations

import pytest
import torch
from conftest import random_batch

from nirvana.methods.llm_pruner.config import LLMPrunerConfig
from nirvana.methods.llm_pruner.importance import taylor_scores
from nirvana.scoring import objectives
from nirvana.scoring.criteria import compute_scores
from nirvana.scoring.objectives import (
    CHUNKED,
    chunked_lm_loss_objective,
    chunked_nirvana_objective,
    lm_loss_objective,
    nirvana_objective,
    output_head,
)
from tests.tiny import TINY_FAMILIES, tiny_config, tiny_model


def gemma3_multimodal():
    import transformers as tf

    text = tiny_config("gemma3_text").to_dict()
    vision = dict(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2, image_size=28)
    config = tf.Gemma3Config(text_config=text, vision_config={**vision, "patch_size": 14}, mm_tokens_per_image=4)
    torch.manual_seed(0)
    return tf.AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()


MODELS = {**{family: (lambda f=family: tiny_model(f)) for family in TINY_FAMILIES}, "gemma3": gemma3_multimodal}


PAIRS = {
    "nirvana": (nirvana_objective, chunked_nirvana_objective),
    "lm-loss": (lm_loss_objective, chunked_lm_loss_objective),
}


@pytest.mark.parametrize("objective", PAIRS)
@pytest.mark.parametrize("family", MODELS)
def test_the_chunked_objective_has_the_full_value_and_gradient(family, objective, monkeypatch):
    monkeypatch.setattr(objectives, "VOCAB_CHUNK", 10)  # 64 entries: 7 chunks, the last one short
    full_objective, chunked_objective = PAIRS[objective]
    model = MODELS[family]()
    ids = random_batch(n=3, t=12, seed=1).input_ids
    decoder, head, cap = output_head(model)
    if family == "gemma2":
        assert cap == 30.0  # Gemma-2's final soft-cap is part of the objective
    h = decoder(input_ids=ids, use_cache=False).last_hidden_state.detach().requires_grad_(True)
    full_h = h.detach().clone().requires_grad_(True)
    logits = head(full_h)
    if cap:
        logits = torch.tanh(logits / cap) * cap
    full = full_objective(logits, ids, 5)
    full.backward()
    chunked = chunked_objective(h, head, cap, ids, 5)
    chunked.backward()
    torch.testing.assert_close(chunked, full, rtol=1e-6, atol=0)
    torch.testing.assert_close(h.grad, full_h.grad, rtol=1e-5, atol=1e-9)
    with torch.no_grad():  # and the model's own logits are what the head and the cap make of h
        torch.testing.assert_close(model(input_ids=ids).logits, logits.detach())


def test_a_head_bias_is_part_of_the_logits(monkeypatch):
    monkeypatch.setattr(objectives, "VOCAB_CHUNK", 16)
    head = torch.nn.Linear(8, 40, bias=True)
    torch.nn.init.normal_(head.bias)
    h = torch.randn(2, 5, 8, requires_grad=True)
    ref = h.detach().clone().requires_grad_(True)
    nirvana_objective(head(ref), None, 2).backward()
    chunked_nirvana_objective(h, head, None, None, 2).backward()
    torch.testing.assert_close(h.grad, ref.grad)


@pytest.mark.parametrize("family", MODELS)
@pytest.mark.parametrize("method", ["autograd", "hooks"])
def test_scores_equal_the_full_logits_scores_and_the_head_never_runs(family, method, monkeypatch):
    monkeypatch.setattr(objectives, "VOCAB_CHUNK", 10)
    model, batch = MODELS[family](), random_batch(n=4, t=12, seed=2)
    with monkeypatch.context() as m:
        m.setattr(objectives, "CHUNKED", {})  # the full [n, T, V] logits, as before
        full = compute_scores(model, "nirvana", batch, use_cache=False, method=method, micro_batch=4)
    head = model.get_output_embeddings()
    handle = head.register_forward_hook(lambda *a: pytest.fail("the chunked objective must not form the logits"))
    try:
        lean = compute_scores(model, "nirvana", batch, use_cache=False, method=method, micro_batch=2)
    finally:
        handle.remove()
    torch.testing.assert_close(lean.attn, full.attn, rtol=1e-5, atol=1e-9)
    torch.testing.assert_close(lean.mlp, full.mlp, rtol=1e-5, atol=1e-9)


def test_the_chunked_lm_loss_known_answer_and_large_logits():
    """A uniform head gives log V per position; logits of 1e4 (exp overflows without the running maximum) still
    give the exact loss, with a head bias and targets in every chunk."""
    head = torch.nn.Linear(4, 30, bias=True)
    with torch.no_grad():
        head.weight.zero_(), head.bias.zero_()
    h = torch.randn(2, 6, 4)
    ids = torch.randint(0, 30, (2, 6))
    loss = chunked_lm_loss_objective(h, head, None, ids, 2)
    torch.testing.assert_close(loss, torch.log(torch.tensor(30.0)))
    with torch.no_grad():
        head.weight.normal_(0, 1000.0), head.bias.normal_()
    h = torch.randn(2, 6, 4, dtype=torch.float64).float().requires_grad_(True)
    ref = h.detach().clone().requires_grad_(True)
    full = lm_loss_objective(head(ref), ids, 2)
    full.backward()
    chunked = chunked_lm_loss_objective(h, head, None, ids, 2)
    chunked.backward()
    assert torch.isfinite(chunked) and full.item() > 100
    torch.testing.assert_close(chunked, full, rtol=1e-6, atol=0)
    torch.testing.assert_close(h.grad, ref.grad, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("family", MODELS)
def test_taylor_and_llm_pruner_scores_equal_the_full_logits_ones_without_the_head(family, monkeypatch):
    monkeypatch.setattr(objectives, "VOCAB_CHUNK", 10)
    model, batch = MODELS[family](), random_batch(n=4, t=12, seed=2)
    config = LLMPrunerConfig(taylor="param_mix")  # the per-example second-order pass too
    with monkeypatch.context() as m:
        m.setattr(objectives, "CHUNKED", {})  # the full [n, T, V] logits, as before
        full = compute_scores(model, "taylor", batch, use_cache=False, micro_batch=4)
        full_llm = taylor_scores(model, batch, config, micro_batch=4)
    head = model.get_output_embeddings()
    handle = head.register_forward_hook(lambda *a: pytest.fail("the chunked LM loss must not form the logits"))
    try:
        lean = compute_scores(model, "taylor", batch, use_cache=False, micro_batch=2)
        lean_llm = taylor_scores(model, batch, config, micro_batch=2)
    finally:
        handle.remove()
    torch.testing.assert_close(lean.attn, full.attn, rtol=1e-5, atol=1e-9)
    torch.testing.assert_close(lean.mlp, full.mlp, rtol=1e-5, atol=1e-9)
    for a, b in zip(lean_llm[:2], full_llm[:2], strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-9)


def test_every_gradient_objective_has_a_chunked_form():
    assert set(CHUNKED) == {nirvana_objective, lm_loss_objective}
    model = tiny_model("llama")
    calls = []
    handle = model.get_output_embeddings().register_forward_hook(lambda *a: calls.append(1))
    try:
        compute_scores(model, "taylor", random_batch(), use_cache=False)
    finally:
        handle.remove()
    assert not calls  # both gradient objectives have a chunked form now
