"""Property test of `allocate` over random geometries, sparsities, gammas and alignments.

No model: a `ModelShape` and random `Scores` are built directly, so 200+ examples take seconds.
The expected ranking is recomputed here from METHOD.md section 3 with plain Python (sorted by
(score, flat index)), independently of the torch code under test.
"""

from __future__ import annotations

import math
from fractions import Fraction

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from nirvana.models.shapes import ModelShape
from nirvana.pruning.allocation import Allocation, allocate
from nirvana.pruning.plan import MAX_SPARSITY
from nirvana.scoring.scores import Scores


@st.composite
def configs(draw):
    L = draw(st.integers(1, 6))
    hkv = draw(st.integers(1, 4))
    g = draw(st.integers(1, 4))
    d = draw(st.sampled_from([2, 4, 8, 16]))
    inter = draw(st.integers(1, 96))
    align = draw(st.sampled_from([a for a in (1, 2, 4, 8, 16, 32, 64) if a <= inter]))
    sparsity = draw(st.floats(0.0, MAX_SPARSITY))
    gamma = draw(st.floats(0.05, 20.0))
    ties = draw(st.booleans())  # few distinct score values: exercises the stable tie order
    seed = draw(st.integers(0, 2**31 - 1))
    return L, hkv, g, d, inter, align, sparsity, gamma, ties, seed


def make(L, hkv, g, d, inter, ties, seed):
    D = 16
    shape = ModelShape(
        model_type="llama", num_layers=L, hidden_size=D, head_dim=d, group_size=g,
        num_kv_heads=(hkv,) * L, intermediate=(inter,) * L, vocab_size=64, tied_embeddings=False,
        total_params=L * D * (hkv * 2 * (g + 1) * d + 3 * inter) + 2 * 64 * D,
    )  # fmt: skip
    gen = torch.Generator().manual_seed(seed)
    attn, mlp = torch.rand((L, hkv), generator=gen), torch.rand((L, inter), generator=gen)  # (L, Hkv), (L, I)
    if ties:
        attn, mlp = (attn * 3).floor(), (mlp * 3).floor()
    return shape, Scores({"attn": attn, "mlp": mlp}, "random", "fp-test")


def expected_counts(shape: ModelShape, sparsity: float, gamma: float) -> tuple[Fraction, Fraction]:
    """METHOD.md section 3 in exact arithmetic: (pa L Hkv, pm L I) before flooring, clamped to 1."""
    L, hkv, inter = shape.num_layers, shape.num_kv_heads[0], shape.intermediate[0]
    ca, cm = 2 * (shape.group_size + 1) * shape.head_dim, 3
    s, gm = Fraction(sparsity), Fraction(gamma)
    pa = min(Fraction(1), s * (hkv * ca + inter * cm) / (hkv * ca + gm * inter * cm))
    pm = min(Fraction(1), gm * pa)
    return pa * L * hkv, pm * L * inter


def floor_close(n: int, exact: Fraction) -> bool:
    """n == floor(exact), allowing the 1e-9 guard against float error (floor(0.3 * 10) is 3)."""
    return math.floor(exact - Fraction(1, 10**6)) <= n <= math.floor(exact + Fraction(1, 10**6))


def ranked_pruned(scores: torch.Tensor, n: int) -> set[tuple[int, int]]:
    """(layer, index) of the n lowest scores, ties in (layer, index) order, flattened row-major."""
    _, cols = scores.shape
    flat = scores.reshape(-1).tolist()
    order = sorted(range(len(flat)), key=lambda i: (flat[i], i))[:n]
    return {(i // cols, i % cols) for i in order}


def check_plan(plan, shape, scores, sparsity, gamma, align):
    L, hkv, inter = shape.num_layers, shape.num_kv_heads[0], shape.intermediate[0]
    stats = plan.stats
    exact_attn, exact_mlp = expected_counts(shape, sparsity, gamma)
    # 1. Counts before minimums follow the formula.
    assert floor_close(stats["ranked_attn_pruned"], exact_attn)
    assert floor_close(stats["ranked_mlp_pruned"], exact_mlp)
    ranked_attn = ranked_pruned(scores.attn, stats["ranked_attn_pruned"])
    ranked_mlp = ranked_pruned(scores.mlp, stats["ranked_mlp_pruned"])
    for layer in plan.layers:
        i = layer.layer_idx
        kv, neurons = layer.kept_kv_groups, layer.kept_neurons
        # 2. Indices sorted, unique, in range.
        assert kv == sorted(set(kv)) and all(0 <= j < hkv for j in kv)
        assert neurons == sorted(set(neurons)) and all(0 <= j < inter for j in neurons)
        # 3. Minimums: at least one KV group; kept neurons a multiple of align (or all of them).
        ranked_kept_kv = [j for j in range(hkv) if (i, j) not in ranked_attn]
        assert len(kv) >= 1
        if ranked_kept_kv:
            assert kv == ranked_kept_kv  # minimums only ever give back, never take
        else:
            assert kv == [int(torch.argmax(scores.attn[i]))]  # the layer's best group survives
        ranked_kept_n = inter - sum(1 for (li, _) in ranked_mlp if li == i)
        want = min(inter, max(align, math.ceil(ranked_kept_n / align) * align))
        assert len(neurons) == want
        assert len(neurons) % align == 0 or len(neurons) == inter
        # Neurons spared by rounding are the layer's best-scoring pruned ones.
        spared = [j for j in neurons if (i, j) in ranked_mlp]
        still_pruned = [j for j in range(inter) if j not in set(neurons)]
        if spared and still_pruned:
            assert min(scores.mlp[i, spared].tolist()) >= max(scores.mlp[i, still_pruned].tolist())
    # 4. Achieved sparsity: never above target; below it only by floor + rounding-up slack.
    achieved, block = stats["achieved_block_sparsity"], shape.block_weights
    assert achieved <= sparsity + 1e-6
    if not stats["notes"]:  # not clamped: the budget was reachable
        ca, cm, D = shape.attn_unit_cost, shape.mlp_unit_cost, shape.hidden_size
        slack = D * (ca + cm + L * ca + L * align * cm) / block  # one floor each; <= 1 group, align neurons per layer
        assert achieved >= sparsity - slack - 1e-9


@settings(max_examples=200, deadline=None)
@given(configs())
def test_allocation_invariants(cfg):
    L, hkv, g, d, inter, align, sparsity, gamma, ties, seed = cfg
    shape, scores = make(L, hkv, g, d, inter, ties, seed)
    plan = allocate(scores, shape, Allocation(sparsity, gamma, align))
    check_plan(plan, shape, scores, sparsity, gamma, align)


@settings(max_examples=200, deadline=None)
@given(configs(), st.floats(0.0, MAX_SPARSITY), st.floats(0.05, 20.0))
def test_monotone_in_sparsity_and_gamma(cfg, other_sparsity, other_gamma):
    """More sparsity prunes more of both kinds, in every layer; more gamma moves pruning from attention to MLP."""
    L, hkv, g, d, inter, align, sparsity, gamma, ties, seed = cfg
    shape, scores = make(L, hkv, g, d, inter, ties, seed)
    lo, hi = sorted((sparsity, other_sparsity))
    a, b = allocate(scores, shape, Allocation(lo, gamma, align)), allocate(scores, shape, Allocation(hi, gamma, align))
    assert a.stats["ranked_attn_pruned"] <= b.stats["ranked_attn_pruned"]
    assert a.stats["ranked_mlp_pruned"] <= b.stats["ranked_mlp_pruned"]
    assert all(x >= y for x, y in zip(a.kept_kv_groups, b.kept_kv_groups))
    assert all(x >= y for x, y in zip(a.kept_neurons, b.kept_neurons))
    assert a.stats["achieved_block_sparsity"] <= b.stats["achieved_block_sparsity"] + 1e-12

    g_lo, g_hi = sorted((gamma, other_gamma))
    p, q = (
        allocate(scores, shape, Allocation(sparsity, g_lo, align)),
        allocate(scores, shape, Allocation(sparsity, g_hi, align)),
    )
    assert q.stats["ranked_attn_pruned"] <= p.stats["ranked_attn_pruned"]
    assert q.stats["ranked_mlp_pruned"] >= p.stats["ranked_mlp_pruned"]
    assert q.stats["kv_groups_pruned"] <= p.stats["kv_groups_pruned"]
    assert q.stats["neurons_pruned"] >= p.stats["neurons_pruned"]


def test_uniform_allocation_keeps_the_same_invariants_of_validity():
    """`uniform` shares the minimums and index rules (checked on a fixed grid, not randomly)."""
    for seed, (L, hkv, g, d, inter) in enumerate([(3, 3, 3, 8, 48), (2, 1, 2, 4, 17), (4, 4, 1, 2, 64)]):
        shape, scores = make(L, hkv, g, d, inter, False, seed)
        for sparsity in (0.0, 0.3, 0.6, 0.95):
            plan = allocate(scores, shape, Allocation(sparsity, 2.0, 8 if inter >= 8 else 1, "uniform"))
            for layer in plan.layers:
                assert 1 <= len(layer.kept_kv_groups) <= hkv
                assert layer.kept_neurons == sorted(set(layer.kept_neurons))
            assert plan.stats["achieved_block_sparsity"] <= sparsity + 1e-6
