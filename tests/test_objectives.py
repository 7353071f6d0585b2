"""The NIRVANA objective computed a vocabulary chunk at a time equals the full-logits one: value, gradient, scores."""

from __future__ import annotations

import pytest
import torch
from conftest import random_batch

from nirvana.scoring import objectives
from nirvana.scoring.criteria import compute_scores
from nirvana.scoring.objectives import CHUNKED, chunked_nirvana_objective, nirvana_objective, output_head
from tests.tiny import TINY_FAMILIES, tiny_config, tiny_model


def gemma3_multimodal():
    import transformers as tf

    text = tiny_config("gemma3_text").to_dict()
    vision = dict(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2, image_size=28)
    config = tf.Gemma3Config(text_config=text, vision_config={**vision, "patch_size": 14}, mm_tokens_per_image=4)
    torch.manual_seed(0)
    return tf.AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()


MODELS = {**{family: (lambda f=family: tiny_model(f)) for family in TINY_FAMILIES}, "gemma3": gemma3_multimodal}


@pytest.mark.parametrize("family", MODELS)
def test_the_chunked_objective_has_the_full_value_and_gradient(family, monkeypatch):
    monkeypatch.setattr(objectives, "VOCAB_CHUNK", 10)  # 64 entries: 7 chunks, the last one short
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
    full = nirvana_objective(logits, ids, 5)
    full.backward()
    chunked = chunked_nirvana_objective(h, head, cap, 5)
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
    chunked_nirvana_objective(h, head, None, 2).backward()
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


def test_objectives_without_a_chunked_form_use_the_full_logits():
    assert set(CHUNKED) == {nirvana_objective}
    model = tiny_model("llama")
    calls = []
    handle = model.get_output_embeddings().register_forward_hook(lambda *a: calls.append(1))
    try:
        compute_scores(model, "taylor", random_batch(), use_cache=False)
    finally:
        handle.remove()
    assert calls  # the LM loss needs every position's logits
