"""The method protocol (nirvana.methods.base.Method): `pipeline.prune` runs the same steps for every method, so a
method added to the table (its object and one line) prunes, plans and reports like the others."""

from __future__ import annotations

import inspect
import re
from dataclasses import dataclass
from types import SimpleNamespace

import pytest
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
    description="a test method",
    reference="tests/test_method_protocol.py",
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
        for branch in (
            '"nirvana"',
            "is_t5(",
            "Seq2Seq",
            ".rotation",
            ".rotates",
            '"slicegpt"',
            '"flap"',
            '"llm-pruner"',
        ):
            assert branch not in source, f"{fn.__name__} branches on {branch}"


# ---- NIRVANA's own config ----------------------------------------------------------------------------------------


def test_nirvanas_settings_are_its_config_and_keep_plan_files_as_they_were():
    from nirvana.methods import get_method, method_config
    from nirvana.methods.nirvana import NIRVANA_FIELDS, NirvanaConfig

    settings = PruneSettings(sparsity=0.3, criterion="taylor", gamma=2.0, align=16, allocation="uniform")
    assert settings.config == NirvanaConfig(criterion="taylor", gamma=2.0, align=16, allocation="uniform")
    assert NIRVANA_FIELDS == ("criterion", "gamma", "align", "allocation", "select_calib")
    # PruneSettings' defaults are NirvanaConfig's: a baseline with every default is accepted
    assert (
        PruneSettings(sparsity=0.3).config == NirvanaConfig()
        and PruneSettings(sparsity=0.3).allocation_fields_given() == []
    )
    # recorded nowhere as method_settings: a NIRVANA row's and plan's method_settings stay {} / absent
    assert NirvanaConfig(gamma=2.0).recorded() == {} and method_config("nirvana", {}) == NirvanaConfig()
    for bad, message in (
        ({"criterion": "nope"}, "unknown criterion 'nope'"),
        ({"gamma": -1.0}, "gamma must be a positive number"),
        ({"align": 3}, "align must be a power of two"),
        ({"allocation": "layerwise"}, "allocation must be one of global, uniform (a T5: global, per-stack)"),
        ({"select_calib": 1}, "select_calib needs at least 2"),
    ):
        with pytest.raises(InvalidInput, match=re.escape(message)):
            NirvanaConfig(**bad)
        with pytest.raises(InvalidInput, match=re.escape(message)):
            PruneSettings(sparsity=0.3, **bad)
    with pytest.raises(InvalidInput, match="not as method_settings"):
        PruneSettings(sparsity=0.3, method_settings={"gamma": 2.0})
    # align is NIRVANA's too: a baseline refuses it instead of ignoring it
    with pytest.raises(InvalidInput, match="align is a setting of method nirvana"):
        PruneSettings(sparsity=0.3, method="flap", align=16)
    # the target's range is the method's: NIRVANA's allocation stops at 0.95, a baseline's at 1
    with pytest.raises(InvalidInput, match=r"\[0, 0.95\]"):
        get_method("nirvana").check_target(0.97, NirvanaConfig())
    get_method("flap").check_target(0.97, method_config("flap"))


def test_nirvana_allocates_by_its_config_like_a_baseline_and_the_plan_is_the_pipelines():
    """`allocate(scores, shape, sparsity, config)` (what the benchmarks and sweeps call) gives the plan `prune`
    gives, byte for byte, for NIRVANA's default and a fixed gamma."""
    from nirvana.methods import get_method
    from nirvana.methods.nirvana import NirvanaConfig

    lm = _lm()
    shape = model_shape(lm.model)
    scores = pipeline.score(lm, PruneSettings(sparsity=0.0, criterion="magnitude", use_cache=False))[0]
    for gamma in (None, 1.5):
        via_prune = prune(lm, PruneSettings(sparsity=0.4, criterion="magnitude", gamma=gamma), scores=scores).plan
        via_config = get_method("nirvana").allocate(scores, shape, 0.4, NirvanaConfig(gamma=gamma))
        assert via_config.to_json() == via_prune.to_json()
        assert "method" not in via_config.to_dict()["settings"]  # the file NIRVANA plans always had


def test_a_benchmark_slices_every_method_through_its_allocate_and_apply():
    """`MethodChoice.slice` (every benchmark's pruned rows): NIRVANA's plan at a gamma equals the library's
    `slice_at`, and the copy's logits are the sliced model's."""
    from nirvana.bench.methods import MethodChoice
    from nirvana.pruning.allocation import Allocation
    from nirvana.pruning.slicing import slice_at

    lm = _lm()
    shape = model_shape(lm.model)
    scores = pipeline.score(lm, PruneSettings(sparsity=0.0, criterion="magnitude", use_cache=False))[0]
    choice = MethodChoice.of("nirvana")
    plan, pruned = choice.slice(lm.model, scores, 0.5, shape, gamma=2.0, allocation="uniform")
    expected, sliced = slice_at(lm.model, scores, Allocation(0.5, 2.0, 8, "uniform").resolve(shape), shape)
    assert plan.to_json() == expected.to_json() and choice.gamma_cell(plan) == 2.0
    ids = torch.randint(0, 64, (2, 9))
    torch.testing.assert_close(pruned(ids).logits, sliced(ids).logits)
    assert choice.prune_settings(0.5, gamma=2.0).gamma == 2.0
    flap = MethodChoice.of("flap")  # a baseline takes no gamma: the argument is NIRVANA's and is left out
    assert flap.prune_settings(0.5, gamma=2.0).gamma is None and flap.gamma_cell(plan) == ""


# ---- the family table ----------------------------------------------------------------------------------------------


def test_every_family_table_has_a_row_per_family():
    """Each layer's per-family functions are looked up by `family_name`: a family added to FAMILIES without its
    row in one of them would fail at the first model of it."""
    from nirvana.checkpoints.facts import DESCRIBE
    from nirvana.checkpoints.pruned import SAVED
    from nirvana.guard.memory import LOAD_ESTIMATES
    from nirvana.measure.family import MEASURES
    from nirvana.models.family import FAMILIES, family, family_name

    for table in (DESCRIBE, SAVED, LOAD_ESTIMATES, MEASURES, pipeline.FAMILY_STEPS):
        assert set(table) == set(FAMILIES)
    assert family_name(_lm().model) == "decoder-only" and family(_lm().model).units == ("attn", "mlp")
    t5 = SimpleNamespace(model_type="t5")  # a config, or a registry reference: anything with a model_type
    assert family(t5).name == "t5" and family(t5).harness == "seq2seq" and not family(t5).decoder_shape


def test_score_files_and_plans_say_their_family(tmp_path):
    """`load_scores` reads a score file's kind from its JSON (no exception matching); T5 code refuses decoder-only
    scores and plans by their `family`, with its own message."""
    from nirvana.errors import CorruptCheckpoint, PlanMismatch
    from nirvana.models.family import expect_family
    from nirvana.pipeline import load_scores
    from nirvana.scoring.criteria import compute_scores
    from nirvana.t5.scoring import compute_t5_scores
    from tests.tiny_t5 import tiny_t5

    decoder = compute_scores(_lm().model, "magnitude", use_cache=False)
    t5 = compute_t5_scores(tiny_t5("relu"), "magnitude", use_cache=False)
    assert (decoder.family, t5.family) == ("decoder-only", "t5")
    for scores, name in ((decoder, "decoder"), (t5, "t5")):
        path = scores.save(tmp_path / name)
        again = load_scores(path)
        assert type(again) is type(scores) and again.fingerprint == scores.fingerprint
        assert type(load_scores(tmp_path / name)) is type(scores)  # FILE or FILE.safetensors alike
    with pytest.raises((PlanMismatch, CorruptCheckpoint, InvalidInput, OSError)):
        load_scores(tmp_path / "missing.safetensors")
    with pytest.raises(InvalidInput, match="score the T5 itself"):
        expect_family(decoder, "t5", "these are decoder-only scores; score the T5 itself.")
    expect_family(t5, "t5", "never raised")
