"""Scores against independent brute-force computations of METHOD.md section 2."""

from __future__ import annotations

import pytest
import torch
from conftest import random_batch

from nirvana.models.architectures import layer_projections
from nirvana.models.shapes import model_shape
from nirvana.scoring.criteria import CRITERIA, compute_scores
from tests.tiny import TINY_FAMILIES, tiny_model


def brute_force_units(model, saliency_of) -> tuple[torch.Tensor, torch.Tensor]:
    """Sum elementwise saliency per unit with explicit loops over heads, rows and columns.

    `saliency_of(lin, "weight"|"bias")` returns the elementwise saliency tensor of that parameter.
    Written without nirvana.scoring.units so the grouping is checked independently.
    """
    shape = model_shape(model)
    d, g = shape.head_dim, shape.group_size
    attn_all, mlp_all = [], []
    for proj in layer_projections(model):
        hkv = proj.k_proj.out_features // d
        attn = torch.zeros(hkv)
        for h in range(hkv * g):  # query head h reads KV head h // g
            m = h // g
            rows = range(h * d, (h + 1) * d)
            attn[m] += sum(saliency_of(proj.q_proj, "weight")[r].sum() for r in rows)
            attn[m] += sum(saliency_of(proj.o_proj, "weight")[:, r].sum() for r in rows)
            if proj.q_proj.bias is not None:
                attn[m] += sum(saliency_of(proj.q_proj, "bias")[r] for r in rows)
        for m in range(hkv):
            for lin in (proj.k_proj, proj.v_proj):
                attn[m] += sum(saliency_of(lin, "weight")[r].sum() for r in range(m * d, (m + 1) * d))
                if lin.bias is not None:
                    attn[m] += sum(saliency_of(lin, "bias")[r] for r in range(m * d, (m + 1) * d))
        inter = proj.gate_proj.out_features
        mlp = torch.zeros(inter)
        for j in range(inter):
            mlp[j] = (
                saliency_of(proj.gate_proj, "weight")[j].sum()
                + saliency_of(proj.up_proj, "weight")[j].sum()
                + saliency_of(proj.down_proj, "weight")[:, j].sum()
            )
        attn_all.append(attn)
        mlp_all.append(mlp)
    return torch.stack(attn_all), torch.stack(mlp_all)


def gradient_saliency_by_hand(model, ids, objective):
    params = {}
    for proj in layer_projections(model):
        for lin in proj.named_linears().values():
            params[(lin, "weight")] = lin.weight
            if lin.bias is not None:
                params[(lin, "bias")] = lin.bias
    logits = model(input_ids=ids).logits  # (N, T, V)
    grads = torch.autograd.grad(objective(logits, ids), list(params.values()))
    table = {key: (g * p).abs().detach() for (key, p), g in zip(params.items(), grads)}
    return lambda lin, kind: table[(lin, kind)]


def f_explicit(logits, ids):
    """f = mean over (N, V) of max over T of z, written out."""
    n, _, v = logits.shape
    total = 0.0
    for i in range(n):
        total = total + logits[i].max(dim=0).values.sum()
    return total / (n * v)


def lm_loss_explicit(logits, ids):
    return torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1))


@pytest.mark.parametrize("family", TINY_FAMILIES)
def test_nirvana_scores_match_brute_force(family):
    model = tiny_model(family)
    batch = random_batch()
    scores = compute_scores(model, "nirvana", batch, use_cache=False)
    attn, mlp = brute_force_units(model, gradient_saliency_by_hand(model, batch.input_ids, f_explicit))
    torch.testing.assert_close(scores.attn, attn, rtol=1e-4, atol=1e-7)
    torch.testing.assert_close(scores.mlp, mlp, rtol=1e-4, atol=1e-7)


def test_micro_batching_gives_the_same_scores():
    model = tiny_model("qwen2")
    batch = random_batch(n=6)
    full = compute_scores(model, "nirvana", batch, use_cache=False)
    chunked = compute_scores(model, "nirvana", batch, micro_batch=4, use_cache=False)
    torch.testing.assert_close(full.attn, chunked.attn, rtol=1e-5, atol=1e-8)
    torch.testing.assert_close(full.mlp, chunked.mlp, rtol=1e-5, atol=1e-8)


def test_taylor_scores_match_brute_force():
    model = tiny_model("llama")
    batch = random_batch()
    scores = compute_scores(model, "taylor", batch, use_cache=False)
    attn, mlp = brute_force_units(model, gradient_saliency_by_hand(model, batch.input_ids, lm_loss_explicit))
    torch.testing.assert_close(scores.attn, attn, rtol=1e-4, atol=1e-7)
    torch.testing.assert_close(scores.mlp, mlp, rtol=1e-4, atol=1e-7)


def test_magnitude_and_wanda_match_brute_force():
    model = tiny_model("qwen2")
    batch = random_batch()
    mag = compute_scores(model, "magnitude", use_cache=False)
    attn, mlp = brute_force_units(model, lambda lin, kind: getattr(lin, kind).detach().abs())
    torch.testing.assert_close(mag.attn, attn, rtol=1e-5, atol=1e-7)
    torch.testing.assert_close(mag.mlp, mlp, rtol=1e-5, atol=1e-7)

    inputs = {}
    hooks = [
        lin.register_forward_hook(lambda mod, args, out: inputs.__setitem__(mod, args[0].detach()))
        for proj in layer_projections(model)
        for lin in proj.named_linears().values()
    ]
    with torch.no_grad():
        model(input_ids=batch.input_ids)
    for h in hooks:
        h.remove()

    def wanda(lin, kind):
        x = inputs[lin].reshape(-1, lin.in_features)  # (tokens, in)
        if kind == "bias":  # a weight on a constant-1 input
            return lin.bias.detach().abs() * x.shape[0] ** 0.5
        return lin.weight.detach().abs() * x.norm(dim=0)[None, :]

    wanda_scores = compute_scores(model, "wanda", batch, use_cache=False)
    attn, mlp = brute_force_units(model, wanda)
    torch.testing.assert_close(wanda_scores.attn, attn, rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(wanda_scores.mlp, mlp, rtol=1e-4, atol=1e-6)


def test_random_is_seeded_and_every_criterion_has_the_same_container():
    model = tiny_model("llama")
    batch = random_batch()
    a = compute_scores(model, "random", seed=1, use_cache=False)
    b = compute_scores(model, "random", seed=1, use_cache=False)
    c = compute_scores(model, "random", seed=2, use_cache=False)
    assert torch.equal(a.mlp, b.mlp) and not torch.equal(a.mlp, c.mlp)
    for name in CRITERIA:
        s = compute_scores(model, name, batch, use_cache=False)
        assert s.attn.shape == (2, 2) and s.mlp.shape == (2, 48) and s.criterion == name


def test_scoring_leaves_the_model_unchanged():
    model = tiny_model("llama")
    before = {k: v.clone() for k, v in model.state_dict().items()}
    flags = {n: p.requires_grad for n, p in model.named_parameters()}
    compute_scores(model, "nirvana", random_batch(), use_cache=False)
    for k, v in model.state_dict().items():
        assert torch.equal(v, before[k])
    assert {n: p.requires_grad for n, p in model.named_parameters()} == flags
    assert all(p.grad is None for p in model.parameters())


def test_cache_hit_skips_gradients(monkeypatch):
    model = tiny_model("llama")
    batch = random_batch()
    first = compute_scores(model, "nirvana", batch)
    assert first.meta["cache_hit"] is False

    def boom(*args, **kwargs):
        raise AssertionError("gradients recomputed on a cache hit")

    monkeypatch.setattr("nirvana.scoring.criteria.gradient_saliency", boom)
    second = compute_scores(model, "nirvana", batch)
    assert second.meta["cache_hit"] is True
    assert torch.equal(first.mlp, second.mlp)
    # Another calibration batch or another model must miss the cache.
    with pytest.raises(AssertionError, match="recomputed"):
        compute_scores(model, "nirvana", random_batch(seed=1))
    with pytest.raises(AssertionError, match="recomputed"):
        compute_scores(tiny_model("llama", seed=1), "nirvana", batch)
