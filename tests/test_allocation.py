"""Allocation: METHOD.md section 3 on known answers and invariants."""

from __future__ import annotations

import math

import pytest
import torch

from nirvana.errors import InvalidInput
from nirvana.models.shapes import ModelShape
from nirvana.pruning.allocation import Allocation, allocate, budget_fractions, default_gamma
from nirvana.pruning.plan import PruningPlan
from nirvana.scoring.scores import Scores


def make_shape(L=4, hkv=4, g=2, d=16, inter=256, D=128) -> ModelShape:
    return ModelShape("llama", L, D, d, g, (hkv,) * L, (inter,) * L, 1000, False, total_params=10**7)


def make_scores(shape: ModelShape, seed=0) -> Scores:
    gen = torch.Generator().manual_seed(seed)
    L = shape.num_layers
    return Scores(
        {
            "attn": torch.rand(L, shape.num_kv_heads[0], generator=gen),
            "mlp": torch.rand(L, shape.intermediate[0], generator=gen),
        },
        "random",
        "fp",
        None,
    )


LLAMA_8B = ModelShape("llama", 32, 4096, 128, 4, (8,) * 32, (14336,) * 32, 128256, False)
SMOLLM2 = ModelShape("llama", 30, 576, 64, 3, (3,) * 30, (1536,) * 30, 49152, True, total_params=134515008)


def test_default_gamma_matches_the_paper():
    assert default_gamma(LLAMA_8B) == pytest.approx(3.36, abs=0.005)
    assert default_gamma(SMOLLM2) == pytest.approx(2.25)
    llama_3b = ModelShape("llama", 28, 3072, 128, 3, (8,) * 28, (8192,) * 28, 128256, True)
    assert default_gamma(llama_3b) == pytest.approx(2.25)  # METHOD.md: the authors' script used 3.0 here


def test_budget_formula_and_counts():
    shape = make_shape()
    s, gamma = 0.3, 2.0
    ca, cm = 2 * (2 + 1) * 16, 3
    pa_expected = s * (4 * ca + 256 * cm) / (4 * ca + gamma * 256 * cm)
    pa, pm, notes = budget_fractions(shape, s, gamma)
    assert pa == pytest.approx(pa_expected) and pm == pytest.approx(gamma * pa_expected) and not notes
    plan = allocate(make_scores(shape), shape, Allocation(s, gamma, align=1))
    assert plan.stats["ranked_attn_pruned"] == math.floor(pa_expected * 4 * 4)
    assert plan.stats["ranked_mlp_pruned"] == math.floor(gamma * pa_expected * 4 * 256)
    # With align=1 and no layer emptied, exactly the ranked counts go.
    assert plan.stats["neurons_pruned"] == plan.stats["ranked_mlp_pruned"]


def test_global_ranking_prunes_the_lowest_scores_across_layers():
    shape = make_shape(L=2, hkv=4, inter=8, d=4, D=16)
    attn = torch.tensor([[0.1, 0.2, 5.0, 6.0], [0.05, 7.0, 8.0, 9.0]])
    mlp = torch.arange(16, dtype=torch.float32).reshape(2, 8)  # layer 0 holds the 8 lowest neurons
    scores = Scores({"attn": attn, "mlp": mlp}, "x", "fp", None)
    plan = allocate(scores, shape, Allocation(0.4, gamma=1.0, align=1))
    n_attn, n_mlp = plan.stats["ranked_attn_pruned"], plan.stats["ranked_mlp_pruned"]
    assert n_attn == 3 and n_mlp == 6  # gamma = 1: pa = pm = s; floor(0.4 * 8), floor(0.4 * 16)
    assert plan.layers[0].kept_kv_groups == [2, 3] and plan.layers[1].kept_kv_groups == [1, 2, 3]
    assert plan.layers[0].kept_neurons == [6, 7] and plan.layers[1].kept_neurons == list(range(8))


def test_ties_prune_exactly_n_in_index_order():
    shape = make_shape(L=2, hkv=4, inter=8, d=4, D=16)
    scores = Scores({"attn": torch.ones(2, 4), "mlp": torch.ones(2, 8)}, "x", "fp", None)
    plan = allocate(scores, shape, Allocation(0.4, gamma=1.0, align=1))
    assert plan.stats["kv_groups_pruned"] == plan.stats["ranked_attn_pruned"]
    assert plan.layers[0].kept_kv_groups == [3]  # the first n in (layer, index) order go


def test_every_layer_keeps_its_best_kv_group_and_aligned_neurons():
    shape = make_shape(L=3, hkv=4, inter=64)
    attn = torch.tensor([[0.0, 0.01, 0.02, 0.03], [5.0, 6.0, 7.0, 8.0], [4.0, 4.5, 4.7, 4.9]])
    scores = Scores(
        {"attn": attn, "mlp": torch.rand(3, 64, generator=torch.Generator().manual_seed(0))}, "x", "fp", None
    )
    plan = allocate(scores, shape, Allocation(0.5, gamma=0.3, align=8))
    assert plan.layers[0].kept_kv_groups == [3]  # all four ranked out; the best-scoring one stays
    for layer in plan.layers:
        assert len(layer.kept_neurons) % 8 == 0 and len(layer.kept_neurons) >= 8


def test_alignment_spares_the_best_pruned_neurons():
    shape = make_shape(L=1, hkv=4, inter=16, d=4, D=16)
    mlp = torch.arange(16, dtype=torch.float32)[None]
    scores = Scores({"attn": torch.ones(1, 4), "mlp": mlp}, "x", "fp", None)
    plan1 = allocate(scores, shape, Allocation(0.3, gamma=1.0, align=1))
    plan8 = allocate(scores, shape, Allocation(0.3, gamma=1.0, align=8))
    kept1, kept8 = plan1.layers[0].kept_neurons, plan8.layers[0].kept_neurons
    assert len(kept8) == 8 * math.ceil(len(kept1) / 8)
    assert set(kept1) <= set(kept8) and kept8 == list(range(16 - len(kept8), 16))  # the best pruned came back


def test_gamma_moves_pruning_between_attention_and_mlp():
    shape = make_shape()
    scores = make_scores(shape)
    low, high = (
        allocate(scores, shape, Allocation(0.3, gamma=0.5, align=1)),
        allocate(scores, shape, Allocation(0.3, gamma=4.0, align=1)),
    )
    assert high.stats["kv_groups_pruned"] < low.stats["kv_groups_pruned"]
    assert high.stats["neurons_pruned"] > low.stats["neurons_pruned"]
    pa, pm, _ = budget_fractions(shape, 0.3, 4.0)
    assert pm / pa == pytest.approx(4.0)


def test_clamping_is_reported():
    shape = make_shape()
    plan = allocate(make_scores(shape), shape, Allocation(0.9, gamma=10.0, align=1))
    assert any("clamped" in note for note in plan.stats["notes"])


def test_sparsity_zero_keeps_everything():
    shape = make_shape()
    plan = allocate(make_scores(shape), shape, Allocation(0.0))
    assert plan.stats["achieved_block_sparsity"] == 0
    assert all(len(x.kept_neurons) == 256 and len(x.kept_kv_groups) == 4 for x in plan.layers)


@pytest.mark.parametrize("target", [0.2, 0.5])
def test_smollm2_geometry_hits_the_target_within_one_point(target):
    scores = make_scores(SMOLLM2, seed=3)
    plan = allocate(scores, SMOLLM2, Allocation(target))
    assert abs(plan.stats["achieved_block_sparsity"] - target) <= 0.01
    assert all(n % 8 == 0 for n in plan.kept_neurons) and all(k >= 1 for k in plan.kept_kv_groups)


def test_uniform_allocation_is_the_same_in_every_layer():
    scores = make_scores(SMOLLM2, seed=1)
    plan = allocate(scores, SMOLLM2, Allocation(0.5, kind="uniform"))
    assert len(set(plan.kept_kv_groups)) == 1 and len(set(plan.kept_neurons)) == 1
    assert abs(plan.stats["achieved_block_sparsity"] - 0.5) <= 0.01


def test_plan_json_round_trips():
    shape = make_shape()
    plan = allocate(make_scores(shape), shape, Allocation(0.4))
    again = PruningPlan.from_json(plan.to_json())
    assert again == plan
    assert again.to_json() == plan.to_json()


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"sparsity": 0.96}, "sparsity must be"),
        ({"sparsity": float("nan")}, "sparsity must be"),
        ({"sparsity": 0.3, "gamma": 0.0}, "gamma must be"),
        ({"sparsity": 0.3, "align": 3}, "power of two"),
        ({"sparsity": 0.3, "align": 512}, "power of two"),
        ({"sparsity": 0.3, "kind": "layerwise"}, "allocation must be"),
    ],
)
def test_bad_settings_are_rejected(kwargs, match):
    shape = make_shape()
    with pytest.raises(InvalidInput, match=match):
        allocate(make_scores(shape), shape, Allocation(**kwargs))


def test_one_kv_group_per_layer_keeps_attention_and_says_the_target_is_missed():
    # Gemma-3-270M has one KV group per layer: gamma* ranks some of them, the minimum keeps them all
    shape = make_shape(L=24, hkv=1, g=4, inter=256)
    plan = allocate(make_scores(shape), shape, Allocation(0.3, align=8))
    assert all(len(layer.kept_kv_groups) == 1 for layer in plan.layers)
    assert plan.stats["ranked_attn_pruned"] > 0
    assert plan.stats["achieved_block_sparsity"] < 0.3 - 0.01
    assert any("one KV group" in n and "falls short" in n for n in plan.stats["notes"])
    # with enough gamma the MLP takes the whole budget and nothing is said
    big = allocate(make_scores(shape), shape, Allocation(0.3, gamma=1000, align=8))
    assert big.stats["ranked_attn_pruned"] == 0 and big.stats["notes"] == []
    assert big.stats["achieved_block_sparsity"] > plan.stats["achieved_block_sparsity"] + 0.01
