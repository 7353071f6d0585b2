"""Slicing: sliced == masked, sparsity 0 == dense, generate() with KV cache, every family."""

from __future__ import annotations

import copy

import pytest
import torch
from conftest import random_batch

from nirvana.errors import PlanMismatch
from nirvana.models.architectures import layer_projections
from nirvana.models.shapes import count_block_parameters, count_parameters, model_shape
from nirvana.pruning.allocation import Allocation, allocate
from nirvana.pruning.slicing import apply_plan
from nirvana.scoring.criteria import compute_scores
from tests.tiny import TINY_FAMILIES, tiny_model


def masked_copy(model, plan):
    """The dense model with every pruned unit's weights (and owned biases) set to zero."""
    masked = copy.deepcopy(model)
    shape = model_shape(model)
    d, g = shape.head_dim, shape.group_size
    with torch.no_grad():
        for proj, layer in zip(layer_projections(masked), plan.layers):
            for m in set(range(shape.num_kv_heads[layer.layer_idx])) - set(layer.kept_kv_groups):
                q = slice(m * g * d, (m + 1) * g * d)
                kv = slice(m * d, (m + 1) * d)
                proj.q_proj.weight[q] = 0
                proj.k_proj.weight[kv] = 0
                proj.v_proj.weight[kv] = 0
                proj.o_proj.weight[:, q] = 0
                for lin, rows in ((proj.q_proj, q), (proj.k_proj, kv), (proj.v_proj, kv)):
                    if lin.bias is not None:
                        lin.bias[rows] = 0
            for j in set(range(shape.intermediate[layer.layer_idx])) - set(layer.kept_neurons):
                proj.gate_proj.weight[j] = 0
                proj.up_proj.weight[j] = 0
                proj.down_proj.weight[:, j] = 0
                for lin in (proj.gate_proj, proj.up_proj):
                    if lin.bias is not None:
                        lin.bias[j] = 0
    return masked


def plan_for(model, sparsity, criterion="nirvana", align=8):
    scores = compute_scores(model, criterion, random_batch(), use_cache=False)
    return allocate(scores, model_shape(model), Allocation(sparsity, align=align))


# Gemma-2 has no sdpa implementation in transformers.
@pytest.mark.parametrize(
    "family, attn", [(f, a) for f in TINY_FAMILIES for a in ("eager", "sdpa") if (f, a) != ("gemma2", "sdpa")]
)
def test_sliced_equals_masked(family, attn):
    model = tiny_model(family, attn_implementation=attn)
    plan = plan_for(model, 0.5)
    assert plan.stats["kv_groups_pruned"] > 0 and plan.stats["neurons_pruned"] > 0
    sliced = apply_plan(model, plan)
    masked = masked_copy(model, plan)
    ids = random_batch(n=3, t=20, seed=5).input_ids
    with torch.no_grad():
        torch.testing.assert_close(sliced(ids).logits, masked(ids).logits, rtol=1e-5, atol=1e-5)
        # The pruning changed the function (the equivalence above is not trivially dense == dense).
        assert not torch.allclose(sliced(ids).logits, model(ids).logits, atol=1e-4)
    # Physically smaller, and exactly as the plan predicted.
    assert count_parameters(sliced) == plan.stats["params_after"] < count_parameters(model)
    shape = model_shape(sliced)
    assert list(shape.num_kv_heads) == plan.kept_kv_groups and list(shape.intermediate) == plan.kept_neurons


@pytest.mark.parametrize("family", ["llama", "qwen2", "gemma3_text"])
def test_generate_with_kv_cache_matches_masked(family):
    model = tiny_model(family, attn_implementation="sdpa")
    plan = plan_for(model, 0.5)
    sliced, masked = apply_plan(model, plan), masked_copy(model, plan)
    prompt = random_batch(n=2, t=6, seed=9).input_ids
    kwargs = dict(max_new_tokens=12, do_sample=False, use_cache=True, pad_token_id=0)
    with torch.no_grad():
        a, b = sliced.generate(prompt, **kwargs), masked.generate(prompt, **kwargs)
    assert torch.equal(a, b) and a.shape[1] == 18


@pytest.mark.parametrize("family", TINY_FAMILIES)
def test_sparsity_zero_is_identical_to_dense(family):
    model = tiny_model(family)
    plan = plan_for(model, 0.0, align=1)
    sliced = apply_plan(model, plan)
    ids = random_batch(n=2, t=12).input_ids
    with torch.no_grad():
        assert torch.equal(sliced(ids).logits, model(ids).logits)
    assert count_block_parameters(sliced) == count_block_parameters(model)


def test_apply_plan_never_mutates_the_callers_model_unless_asked():
    model = tiny_model("llama")
    before = {k: v.clone() for k, v in model.state_dict().items()}
    plan = plan_for(model, 0.5)
    apply_plan(model, plan)
    assert {k: tuple(v.shape) for k, v in model.state_dict().items()} == {k: tuple(v.shape) for k, v in before.items()}
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())
    same = apply_plan(model, plan, inplace=True)
    assert same is model and count_parameters(model) == plan.stats["params_after"]


def test_the_copy_shares_block_weights_only_until_they_are_sliced():
    from nirvana.pruning.slicing import copy_without_block_weights

    model = tiny_model("qwen2")  # q/k/v carry biases: those are shared too
    projections = [(p.q_proj, p.o_proj, p.down_proj) for p in layer_projections(model)]
    block = {id(w) for lins in projections for lin in lins for w in lin.parameters()}
    clone = copy_without_block_weights(model)
    shared = {id(w) for w in clone.parameters()} & {id(w) for w in model.parameters()}
    assert block <= shared and all(id(p) not in shared for p in model.model.embed_tokens.parameters())
    pruned = apply_plan(model, plan_for(model, 0.0))  # keeps every unit, yet owns every tensor
    dense_ptrs = {t.data_ptr() for t in model.state_dict().values()}
    assert not dense_ptrs & {t.data_ptr() for t in pruned.state_dict().values()}
    with torch.no_grad():
        for p in pruned.parameters():
            p.zero_()
    assert all(p.abs().sum() > 0 for p in model.parameters())


def test_backward_works_after_slicing():
    model = tiny_model("qwen2")
    sliced = apply_plan(model, plan_for(model, 0.5))
    ids = random_batch().input_ids
    sliced(input_ids=ids, labels=ids).loss.backward()
    assert all(p.grad is not None for p in sliced.parameters() if p.requires_grad)


def test_a_plan_for_another_model_is_refused():
    model, other = tiny_model("llama", seed=0), tiny_model("llama", seed=1)
    plan = plan_for(model, 0.3)
    with pytest.raises(PlanMismatch, match="fingerprint"):
        apply_plan(other, plan)


def test_config_records_per_layer_shapes_in_both_formats():
    model = tiny_model("llama")
    plan = plan_for(model, 0.5)
    sliced = apply_plan(model, plan)
    assert sliced.config.modified_intermediate_dimension == plan.kept_neurons
    assert sliced.config.modified_head_num == [2 * k for k in plan.kept_kv_groups]  # g = 2
    assert [s["num_key_value_heads"] for s in sliced.config.nirvana_layer_shapes] == plan.kept_kv_groups
    assert not hasattr(model.config, "nirvana_layer_shapes")
