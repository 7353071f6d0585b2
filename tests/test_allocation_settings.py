"""`Allocation`: sparsity, gamma, align and kind as one value; validated when built, resolved once per model.

The compatibility half reads a score file, a score cache entry and plans written by main b67f179
(the version before `Allocation`; the literals below are its output, made by running that
commit's `Scores.save`, `allocate` and `prune`), and checks that this version reads them and makes
byte-identical plans from them.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from nirvana.checkpoints.loaded import LoadedModel
from nirvana.errors import InvalidInput
from nirvana.models.shapes import ModelShape, model_shape
from nirvana.pipeline import PruneSettings, prune
from nirvana.pruning import allocation as allocation_module
from nirvana.pruning.allocation import Allocation, allocate, default_gamma
from nirvana.pruning.plan import PlanSettings, PruningPlan
from nirvana.scoring.scores import Scores
from nirvana.store.paths import cache_dir
from tests.tiny import tiny_model

SHAPE = ModelShape("llama", 2, 32, 8, 2, (2, 2), (16, 16), 1000, False, total_params=10**6)  # gamma* = 1/3
PRUNED = dataclasses.replace(SHAPE, num_kv_heads=(2, 1), intermediate=(16, 8))  # layers differ: not uniform


@pytest.mark.parametrize(
    "change, message",
    [
        (
            {"sparsity": 0.96},
            r"sparsity must be a number in \[0, 0.95\] \(fraction of decoder-block weights .*got 0.96",
        ),
        ({"sparsity": -0.1}, r"sparsity must be a number in \[0, 0.95\].*got -0.1"),
        ({"sparsity": float("nan")}, "sparsity must be .*got nan"),
        ({"sparsity": "0.3"}, "sparsity must be .*got '0.3'"),
        ({"sparsity": True}, "sparsity must be .*got True"),
        (
            {"gamma": 0.0},
            r"gamma must be a positive number \(MLP fraction pruned / KV-group fraction pruned\), got 0.0",
        ),
        ({"gamma": -2.0}, "gamma must be a positive number .*got -2.0; leave it unset .*analytic default gamma"),
        ({"gamma": float("inf")}, "gamma must be a positive number .*got inf"),
        ({"gamma": 0.0, "gamma_default": 2.25}, "got 0.0; the analytic default for this model is 2.25"),
        ({"gamma_default": -1.0}, r"gamma_default must be a positive number \(the analytic gamma\*\), got -1.0"),
        (
            {"align": 3},
            r"align must be a power of two between 1 and the MLP width, got 3; common choices: 1 \(off\), 8",
        ),
        ({"align": 0}, "align must be a power of two .*got 0"),
        ({"align": 8.0}, "align must be a power of two .*got 8.0"),
        ({"align": True}, "align must be a power of two .*got True"),
        (
            {"kind": "layerwise"},
            r"allocation must be one of global, uniform \(a T5: global, per-stack\), got 'layerwise'",
        ),
    ],
)
def test_bad_values_are_refused_when_built_with_the_plan_settings_messages(change, message):
    with pytest.raises(InvalidInput, match=message):
        Allocation(**{"sparsity": 0.3, **change})


def test_plan_settings_and_allocation_share_one_set_of_checks():
    """The same bad value gives the same message from both (PlanSettings knows gamma*, so says it)."""
    for bad, plan_change in (({"sparsity": 2.0}, {"sparsity": 2.0}), ({"align": 6}, {"align": 6})):
        with pytest.raises(InvalidInput) as a:
            Allocation(**{"sparsity": 0.3, **bad})
        with pytest.raises(InvalidInput) as p:
            PlanSettings(**{"sparsity": 0.3, "gamma": 1.0, "gamma_default": 1.0, **plan_change})
        assert str(a.value) == str(p.value)
    with pytest.raises(InvalidInput) as a:
        Allocation(0.3, 0.0, gamma_default=2.25)
    with pytest.raises(InvalidInput) as p:
        PlanSettings(0.3, 0.0, 2.25)
    assert str(a.value) == str(p.value)


def test_resolve_fills_gamma_star_once_and_is_idempotent():
    unresolved = Allocation(0.3, align=2)
    assert unresolved.gamma is None and unresolved.gamma_default is None and not unresolved.resolved
    resolved = unresolved.resolve(SHAPE)
    assert resolved.gamma == resolved.gamma_default == default_gamma(SHAPE) == pytest.approx(1 / 3)
    assert resolved.resolved and (resolved.sparsity, resolved.align, resolved.kind) == (0.3, 2, "global")
    assert resolved.resolve(SHAPE) is resolved and resolved.resolve(SHAPE).resolve(SHAPE) == resolved
    explicit = Allocation(0.3, 1.5, 4, "uniform").resolve(SHAPE)
    assert (explicit.gamma, explicit.gamma_default, explicit.kind) == (1.5, default_gamma(SHAPE), "uniform")
    assert unresolved == Allocation(0.3, align=2)  # frozen: resolving returns a new value
    with pytest.raises(dataclasses.FrozenInstanceError):
        resolved.gamma = 2.0


def test_resolve_checks_what_needs_the_shape():
    assert Allocation(0.3, align=16).resolve(SHAPE).align == 16
    with pytest.raises(InvalidInput, match=r"align must be a power of two between 1 and the MLP width \(16\), got 32"):
        Allocation(0.3, align=32).resolve(SHAPE)
    # A pruned (non-uniform) model has no gamma*: gamma must be given, as prune has always required.
    assert not PRUNED.is_uniform
    with pytest.raises(InvalidInput, match=r"gamma must be a positive number .*got None; the analytic default"):
        Allocation(0.3, align=8).resolve(PRUNED)
    with pytest.raises(InvalidInput, match=r"MLP width \(8\), got 16"):
        Allocation(0.3, 2.0, align=16).resolve(PRUNED)  # the bound is the smallest layer's width
    given = Allocation(0.3, 2.0, align=8).resolve(PRUNED)
    assert given.gamma == 2.0 and given.gamma_default == default_gamma(PRUNED)


def test_plan_settings_need_a_resolved_allocation():
    with pytest.raises(InvalidInput, match=r"must be resolved for the model \(Allocation.resolve\(shape\)\) first"):
        Allocation(0.3).plan_settings()
    settings = Allocation(0.3, align=2).resolve(SHAPE).plan_settings("taylor", None)
    assert settings == PlanSettings(0.3, 1 / 3, 1 / 3, 2, "global", "taylor", None)


def test_allocate_takes_an_allocation_not_loose_numbers():
    scores = Scores({"attn": torch.rand(2, 2), "mlp": torch.rand(2, 16)}, "random", "fp")
    with pytest.raises(InvalidInput, match=r"allocate needs an Allocation \(sparsity, gamma, align, kind\), got 0.3"):
        allocate(scores, SHAPE, 0.3)
    resolved = Allocation(0.3, align=2).resolve(SHAPE)
    assert allocate(scores, SHAPE, resolved) == allocate(scores, SHAPE, Allocation(0.3, align=2))


def test_prune_resolves_once_before_scoring(monkeypatch):
    calls = []
    real = allocation_module.default_gamma
    monkeypatch.setattr(allocation_module, "default_gamma", lambda shape: calls.append(1) or real(shape))
    lm = LoadedModel(tiny_model("llama"), None, "tiny", "local", 0.0)
    settings = PruneSettings(sparsity=0.4, criterion="random", align=2)
    assert settings.allocation_settings == Allocation(0.4, None, 2, "global")
    result = prune(lm, settings)
    assert len(calls) == 1 and result.plan.settings.gamma == result.plan.settings.gamma_default == 1.0
    with pytest.raises(InvalidInput, match=r"MLP width \(48\), got 64"):
        prune(lm, PruneSettings(sparsity=0.4, criterion="random", align=64))  # refused before any scoring


LITERAL_SCORES_JSON = (
    '{\n "criterion": "nirvana",\n "fingerprint": "fp-b67",\n "calibration": {\n  "source": "wikitext2-va'
    'lid",\n  "samples": 4,\n  "seq_len": 16,\n  "seed": 0,\n  "hash": "0123abcd"\n },\n "attn_shape": [\n  '
    '2,\n  2\n ],\n "mlp_shape": [\n  2,\n  16\n ],\n "meta": {\n  "seconds": 1.5\n }\n}'
)

LITERAL_SCORES_SAFETENSORS = (
    "80000000000000007b226174746e223a7b226474797065223a22463332222c227368617065223a5b322c325d2c226461"
    "74615f6f666673657473223a5b302c31365d7d2c226d6c70223a7b226474797065223a22463332222c22736861706522"
    "3a5b322c31365d2c22646174615f6f666673657473223a5b31362c3134345d7d7d202020202020200000003f0000803e"
    "0000003e0000803f0000f03f0000e03f0000d03f0000c03f0000b03f0000a03f0000903f0000803f0000603f0000403f"
    "0000203f0000003f0000c03e0000803e0000003e0000000000007c400000744000006c400000644000005c4000005440"
    "00004c400000444000003c400000344000002c400000244000001c400000144000000c4000000440"
)

PLAN_DEFAULT_GAMMA = (
    '{"fingerprint":"fp-b67","model":{"model_type":"llama","num_layers":2,"hidden_size":32,"head_dim"'
    ':8,"group_size":2,"num_kv_heads":[2,2],"intermediate":[16,16],"vocab_size":1000,"tied_embeddings'
    '":false,"total_params":1000000,"attn_unit_bias":0,"mlp_unit_bias":0},"settings":{"sparsity":0.3,'
    '"gamma":0.3333333333333333,"gamma_default":0.3333333333333333,"align":2,"allocation":"global","c'
    'riterion":"nirvana","calibration":{"source":"wikitext2-valid","samples":4,"seq_len":16,"seed":0,'
    '"hash":"0123abcd"}},"layers":[{"layer_idx":0,"kept_kv_groups":[0,1],"kept_neurons":[0,1,2,3,4,5,'
    '6,7,8,9,10,11]},{"layer_idx":1,"kept_kv_groups":[1],"kept_neurons":[0,1,2,3,4,5,6,7,8,9,10,11,12'
    ',13,14,15]}],"stats":{"block_weights_before":9216,"block_weights_after":7296,"achieved_block_spa'
    'rsity":0.20833333333333334,"params_before":1000000,"params_after":998080,"total_param_reduction"'
    ':0.00192,"kv_groups_pruned":1,"neurons_pruned":4,"kv_groups_total":4,"neurons_total":32,"ranked_'
    'attn_pruned":1,"ranked_mlp_pruned":4,"attn_fraction_target":0.3857142857142857,"mlp_fraction_tar'
    'get":0.12857142857142856,"notes":[]},"schema_version":1}'
)

PLAN_UNIFORM = (
    '{"fingerprint":"fp-b67","model":{"model_type":"llama","num_layers":2,"hidden_size":32,"head_dim"'
    ':8,"group_size":2,"num_kv_heads":[2,2],"intermediate":[16,16],"vocab_size":1000,"tied_embeddings'
    '":false,"total_params":1000000,"attn_unit_bias":0,"mlp_unit_bias":0},"settings":{"sparsity":0.5,'
    '"gamma":1.5,"gamma_default":0.3333333333333333,"align":4,"allocation":"uniform","criterion":"nir'
    'vana","calibration":{"source":"wikitext2-valid","samples":4,"seq_len":16,"seed":0,"hash":"0123ab'
    'cd"}},"layers":[{"layer_idx":0,"kept_kv_groups":[0],"kept_neurons":[0,1,2,3,4,5,6,7]},{"layer_id'
    'x":1,"kept_kv_groups":[1],"kept_neurons":[0,1,2,3,4,5,6,7]}],"stats":{"block_weights_before":921'
    '6,"block_weights_after":4608,"achieved_block_sparsity":0.5,"params_before":1000000,"params_after'
    '":995392,"total_param_reduction":0.004608,"kv_groups_pruned":2,"neurons_pruned":16,"kv_groups_to'
    'tal":4,"neurons_total":32,"ranked_attn_pruned":2,"ranked_mlp_pruned":16,"attn_fraction_target":0'
    '.42857142857142855,"mlp_fraction_target":0.6428571428571428,"notes":[]},"schema_version":1}'
)

CACHE_STEM = "random-be9df43bca873bdf-65836fbd8ca60d4ede54"

CACHE_JSON = (
    '{\n "criterion": "random",\n "fingerprint": "be9df43bca873bdf",\n "calibration": null,\n "attn_shape'
    '": [\n  2,\n  2\n ],\n "mlp_shape": [\n  2,\n  48\n ],\n "meta": {\n  "seconds": 0.017,\n  "cache_hit": fa'
    'lse,\n  "seed": 0\n }\n}'
)

CACHE_SAFETENSORS = (
    "80000000000000007b226174746e223a7b226474797065223a22463332222c227368617065223a5b322c325d2c226461"
    "74615f6f666673657473223a5b302c31365d7d2c226d6c70223a7b226474797065223a22463332222c22736861706522"
    "3a5b322c34385d2c22646174615f6f666673657473223a5b31362c3430305d7d7d202020202020205815fe3e2faa443f"
    "a833b53d0033073e86669d3efb52223f86edfa3e677d653f1248e93ed3de213f2aa2b23ee4adcd3e80e4b63c5ce92c3e"
    "8c78963ed8bd043f589a323f8ccd4c3fe8e4243e8285903ee67d2e3f274a6a3fae50cb3eaec85f3fb0bcd63e518b0d3f"
    "a5e6733f9021143d34ad3d3e9030bf3e12369c3e94976e3fcc21343ea0278a3ecc4b1a3e50ec013df81f553e4f076e3f"
    "af1d393fc0093e3f52bb063f8c81793ed8a7153f10cb073dcc0b0e3e740c783e93c2503f930c4b3f1c778e3e4ec3f63e"
    "20dd513fc13f7f3f09cd323fb94a113f7fd2553f8088523e1fda173f5016e63dd0231d3e5c82773ea3ea393ffe79333f"
    "2cb7503e72ab263fb744463f38b0df3e22e3043f80a81d3f80684f3fa4e77a3fa8e1ea3d0a2fa23e264e323fe80d6a3f"
    "f4626f3f11f1703f4f79193f208c853d69c60b3fa8b03f3ea05b0b3d1fba713f7853613f0002a23a41f5173fcedfd43e"
    "52dfd53e72d08a3e2339313f98bd503e77ec2e3f0bbb403faea15b3f52dc2f3f802da83b00de333e8ee93f3f63ca1a3f"
    "a831e13d302e593e"
)

PRUNE_PLAN = (
    '{"fingerprint":"be9df43bca873bdf","model":{"model_type":"llama","num_layers":2,"hidden_size":32,'
    '"head_dim":8,"group_size":2,"num_kv_heads":[2,2],"intermediate":[48,48],"vocab_size":64,"tied_em'
    'beddings":false,"total_params":19616,"attn_unit_bias":0,"mlp_unit_bias":0},"settings":{"sparsity'
    '":0.4,"gamma":1.0,"gamma_default":1.0,"align":2,"allocation":"global","criterion":"random","cali'
    'bration":null},"layers":[{"layer_idx":0,"kept_kv_groups":[0,1],"kept_neurons":[1,2,3,4,5,7,11,12'
    ',13,16,17,18,19,20,21,22,25,27,33,34,35,36,38,42,43,45,46,47]},{"layer_idx":1,"kept_kv_groups":['
    '1],"kept_neurons":[0,1,2,4,8,9,11,12,13,14,15,16,17,19,20,21,22,23,24,26,29,30,32,33,34,36,38,39'
    ',40,41,44,45]}],"stats":{"block_weights_before":15360,"block_weights_after":10368,"achieved_bloc'
    'k_sparsity":0.325,"params_before":19616,"params_after":14624,"total_param_reduction":0.254486133'
    '7683524,"kv_groups_pruned":1,"neurons_pruned":36,"kv_groups_total":4,"neurons_total":96,"ranked_'
    'attn_pruned":1,"ranked_mlp_pruned":38,"attn_fraction_target":0.4,"mlp_fraction_target":0.4,"note'
    's":[]},"schema_version":1}'
)


def _write_literal_scores(stem):
    stem.parent.mkdir(parents=True, exist_ok=True)
    stem.with_suffix(".json").write_text(LITERAL_SCORES_JSON)
    stem.with_suffix(".safetensors").write_bytes(bytes.fromhex(LITERAL_SCORES_SAFETENSORS))


def test_a_b67f179_score_file_gives_the_same_plans(tmp_path):
    _write_literal_scores(tmp_path / "scores")
    scores = Scores.load(tmp_path / "scores")
    assert scores.fingerprint == "fp-b67" and scores.calibration["hash"] == "0123abcd" and scores.meta["seconds"] == 1.5
    for allocation, written in (
        (Allocation(0.3, None, 2, "global"), PLAN_DEFAULT_GAMMA),
        (Allocation(0.5, 1.5, 4, "uniform"), PLAN_UNIFORM),
    ):
        plan = allocate(scores, SHAPE, allocation)
        assert plan.to_json() == written  # byte for byte
        old = PruningPlan.from_json(written)  # and the old plan file loads unchanged
        assert old == plan and old.to_json() == written
    assert PruningPlan.from_json(PLAN_DEFAULT_GAMMA).settings.gamma == default_gamma(SHAPE)


def test_a_b67f179_score_cache_entry_is_found_and_prunes_to_the_same_plan():
    model = tiny_model("llama")
    stem = cache_dir() / "scores" / CACHE_STEM
    stem.parent.mkdir(parents=True, exist_ok=True)
    stem.with_suffix(".json").write_text(CACHE_JSON)
    stem.with_suffix(".safetensors").write_bytes(bytes.fromhex(CACHE_SAFETENSORS))
    result = prune(
        LoadedModel(model, None, "tiny", "local", 0.0), PruneSettings(sparsity=0.4, criterion="random", align=2)
    )
    assert result.scores.meta["cache_hit"] and result.scores.meta["seconds"] == 0.017  # read, not recomputed
    assert result.plan.to_json() == PRUNE_PLAN
    assert PruningPlan.from_json(PRUNE_PLAN) == result.plan
    assert model_shape(result.model).intermediate == (28, 32)
