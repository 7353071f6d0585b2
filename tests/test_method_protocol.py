"""The method protocol (nirvana.methods.base.Method): `pipeline.prune` runs the same steps for every method, so a
method added to the table (its object and one line) prunes, plans and reports like the others."""

from __future__ import annotations

import inspect
from dataclasses import dataclass

import torch
from conftest import random_batch

from nirvana import pipeline
from nirvana.checkpoints.loaded import LoadedModel
from nirvana.errors import InvalidInput
from nirvana.guard.memory import MemoryEstimate
from nirvana.methods import METHODS
from nirvana.methods.base import MethodConfig, ScoredMethod, build_plan
from nirvana.models.shapes import model_shape
from nirvana.pipeline import PruneSettings, prune
from nirvana.pruning.slicing import apply_plan
from tests.tiny import tiny_model


@dataclass(frozen=True)
class KeepFirstConfig(MethodConfig):
    """No settings."""


def _scorer(model, batch, config, micro_batch, progress):
    shape = model_shape(model)
    attn = torch.arange(shape.num_kv_heads[0], dtype=torch.float32).flip(0).repeat(shape.num_layers, 1)
    mlp = torch.arange(shape.intermediate[0], dtype=torch.float32).flip(0).repeat(shape.num_layers, 1)
    return attn, mlp, {}


def _allocator(scores, shape, sparsity, config):
    """Keeps the first units of every layer (the highest toy scores): one KV group, and 1 - sparsity of the neurons."""
    keep = max(1, round((1 - sparsity) * shape.intermediate[0]))
    kv = [[0] for _ in range(shape.num_layers)]
    neurons = [list(range(keep)) for _ in range(shape.num_layers)]
    return build_plan(scores, shape, sparsity, "keep-first", config, kv, neurons, allocation="uniform")


KEEP_FIRST = ScoredMethod(
    name="keep-first",
    label="Keep first",
    config=KeepFirstConfig,
    needs_data=True,
    uses_gradients=False,
    memory=lambda model_config, settings, **sizes: MemoryEstimate("score", "cpu"),
    color="#000000",
    description="a test method",
    reference="tests/test_method_protocol.py",
    explain="a test method",
    scorer=_scorer,
    allocator=_allocator,
)


def _lm() -> LoadedModel:
    return LoadedModel(tiny_model("llama", seed=0), tokenizer=None, name="tiny", source="test", load_seconds=0)


def test_a_method_added_to_the_table_prunes_through_the_same_pipeline(monkeypatch):
    monkeypatch.setitem(METHODS, "keep-first", KEEP_FIRST)
    lm = _lm()
    scores = KEEP_FIRST.scores(lm.model, KeepFirstConfig(), random_batch(), use_cache=False)
    result = prune(lm, PruneSettings(sparsity=0.5, method="keep-first"), scores=scores)
    shape = model_shape(lm.model)
    assert result.plan.settings.method == "keep-first" and result.report["method"] == "keep-first"
    assert result.plan.kept_kv_groups == [1] * shape.num_layers
    assert result.report["gamma"] is None  # gamma is the setting of a method with NIRVANA's allocation
    ids = torch.randint(0, 64, (2, 9))
    torch.testing.assert_close(result.model(ids).logits, apply_plan(lm.model, result.plan)(ids).logits)
    # The same plan, given back, is applied by the same method's steps (a fingerprint check, then slicing).
    again = prune(lm, plan=result.plan)
    torch.testing.assert_close(again.model(ids).logits, result.model(ids).logits)


def test_settings_of_nirvanas_allocation_are_refused_for_a_method_without_them(monkeypatch):
    monkeypatch.setitem(METHODS, "keep-first", KEEP_FIRST)
    try:
        PruneSettings(sparsity=0.5, method="keep-first", gamma=2.0)
    except InvalidInput as exc:
        assert "gamma is a setting of method nirvana" in str(exc) and "'keep-first'" in str(exc)
    else:
        raise AssertionError("gamma was accepted for a method that allocates its own way")


def test_the_pipeline_asks_the_method_instead_of_branching_on_its_name():
    """`prune` and `score` dispatch by family (a table) and then run the method's steps: no method name or family
    check in their bodies."""
    for fn in (pipeline.prune, pipeline.score, pipeline._prune_decoder, pipeline._score_decoder):
        source = inspect.getsource(fn)
        for branch in ('"nirvana"', "is_t5(", "Seq2Seq", ".rotation", '"slicegpt"', '"flap"', '"llm-pruner"'):
            assert branch not in source, f"{fn.__name__} branches on {branch}"
