"""The end-to-end steps (nirvana.pipeline): one prune equals the separate steps; sweep points reuse measurements."""

from __future__ import annotations

import pytest
import torch
from conftest import random_batch

from nirvana.checkpoints.loaded import LoadedModel
from nirvana.errors import InvalidInput, PlanMismatch
from nirvana.models.shapes import count_parameters, model_shape
from nirvana.pipeline import PruneSettings, check_scores_match, prune
from nirvana.pruning.allocation import Allocation, allocate
from nirvana.pruning.slicing import apply_plan, plan_signature, planned_shape, prune_and_measure
from nirvana.scoring.criteria import compute_scores
from tests.tiny import tiny_model


def _lm(family: str = "llama", seed: int = 0) -> LoadedModel:
    return LoadedModel(
        tiny_model(family, seed=seed), tokenizer=None, name=f"tiny-{family}", source="test", load_seconds=0
    )


@pytest.mark.parametrize("criterion", ["magnitude", "random"])
def test_prune_equals_the_separate_steps_and_leaves_the_dense_model_alone(criterion):
    lm = _lm()
    before = {k: v.clone() for k, v in lm.model.state_dict().items()}
    result = prune(lm, PruneSettings(sparsity=0.4, criterion=criterion, align=1))
    scores = compute_scores(lm.model, criterion)
    plan = allocate(scores, model_shape(lm.model), Allocation(0.4, align=1))
    assert result.plan.to_dict() == plan.to_dict()
    ids = torch.randint(0, 64, (2, 12))
    expected = apply_plan(lm.model, plan)(ids).logits
    torch.testing.assert_close(result.model(ids).logits, expected)
    # the report counts the sliced model, and the dense model is untouched (prune works on a copy)
    assert result.report["params_after"] == count_parameters(result.model) < result.report["params_before"]
    assert result.report["achieved_block_sparsity"] == plan.stats["achieved_block_sparsity"]
    assert result.report["criterion"] == criterion and set(result.report["timings"]) == {"score", "plan", "slice"}
    for k, v in lm.model.state_dict().items():
        assert torch.equal(v, before[k]), k


def test_prune_with_data_needs_a_batch_source_and_checks_settings_before_scoring():
    with pytest.raises(InvalidInput, match="unknown criterion 'bogus'"):
        PruneSettings(sparsity=0.2, criterion="bogus")
    with pytest.raises(InvalidInput, match="at least 2 candidate"):
        PruneSettings(sparsity=0.2, select_calib=1)
    lm = _lm()
    with pytest.raises(InvalidInput, match="sparsity must be"):  # fails before any scoring
        prune(lm, PruneSettings(sparsity=1.5, criterion="magnitude"))
    with pytest.raises(InvalidInput, match="needs settings"):
        prune(lm)


def test_given_scores_must_belong_to_the_model():
    lm, other = _lm(seed=0), _lm(seed=1)
    scores = compute_scores(other.model, "nirvana", random_batch())
    with pytest.raises(PlanMismatch, match="holds scores of model fingerprint"):
        check_scores_match(scores, lm.model)
    with pytest.raises(PlanMismatch):
        prune(lm, PruneSettings(sparsity=0.3), scores=scores)
    mine = compute_scores(lm.model, "nirvana", random_batch())
    result = prune(lm, PruneSettings(sparsity=0.3), scores=mine)  # no calibration data needed: scores given
    assert result.scores is mine


def test_an_existing_plan_is_applied_as_it_is():
    lm = _lm()
    plan = allocate(compute_scores(lm.model, "random"), model_shape(lm.model), Allocation(0.5))
    result = prune(lm, plan=plan)
    assert result.plan is plan and result.report["timings"]["score"] == 0.0
    assert model_shape(result.model).intermediate == tuple(plan.kept_neurons)


def test_prune_and_measure_memo_measures_identical_plans_once():
    lm = _lm()
    scores = compute_scores(lm.model, "random")
    calls, memo = [], {}

    def measure(model):
        calls.append(count_parameters(model))
        return calls[-1]

    plan_a, value_a = prune_and_measure(lm.model, scores, measure, Allocation(0.3, 2.0), memo=memo)
    plan_b, value_b = prune_and_measure(lm.model, scores, measure, Allocation(0.3, 2.0), memo=memo)
    assert plan_signature(plan_a) == plan_signature(plan_b) and value_a == value_b and len(calls) == 1
    prune_and_measure(lm.model, scores, measure, Allocation(0.6), memo=memo)
    assert len(calls) == 2


@pytest.mark.parametrize("family", ["llama", "qwen2"])
def test_planned_shape_is_the_shape_of_the_sliced_model(family):
    model = tiny_model(family)
    shape = model_shape(model)
    plan = allocate(compute_scores(model, "random"), shape, Allocation(0.5, align=1))
    assert planned_shape(shape, plan) == model_shape(apply_plan(model, plan))


def test_score_on_a_given_batch_finds_the_scores_compute_scores_cached():
    """The app and `gamma-search` score their own batch through `score(..., batch=)`: the cache key is the one
    `compute_scores` writes for the same model, criterion, batch, seed and micro-batch; a data-free criterion
    ignores the batch."""
    from nirvana.pipeline import score

    lm, batch = _lm(), random_batch()
    direct = compute_scores(lm.model, "nirvana", batch, seed=3, micro_batch=2)
    assert not direct.meta["cache_hit"]
    settings = PruneSettings(sparsity=0.0, criterion="nirvana", seed=3, micro_batch=2)
    scores, selection = score(lm, settings, batch=batch)
    assert scores.meta["cache_hit"] and selection is None
    torch.testing.assert_close(scores.mlp, direct.mlp)
    other, _ = score(lm, PruneSettings(sparsity=0.0, criterion="nirvana", seed=3), batch=random_batch(seed=1))
    assert not other.meta["cache_hit"]  # another batch is another key
    compute_scores(lm.model, "magnitude")
    free, _ = score(lm, PruneSettings(sparsity=0.0, criterion="magnitude"), batch=batch)
    assert free.meta["cache_hit"]
