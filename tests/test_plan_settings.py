"""The plan's typed settings: validated when built, JSON unchanged, old plan files still load."""

from __future__ import annotations

import json

import pytest
import torch
from test_allocation import make_scores, make_shape

from nirvana.checkpoints.loaded import LoadedModel
from nirvana.errors import InvalidInput, PlanMismatch
from nirvana.pruning.allocation import Allocation, allocate, default_gamma
from nirvana.pruning.plan import PlanSettings, PruningPlan

# Written by the version before PlanSettings (settings were a plain dict): it must load, and save
# back byte for byte.
OLD_PLAN_JSON = (
    '{"fingerprint":"fp","model":{"model_type":"llama","num_layers":2,"hidden_size":32,"head_dim":8,'
    '"group_size":2,"num_kv_heads":[2,2],"intermediate":[8,8],"vocab_size":1000,"tied_embeddings":false,'
    '"total_params":10000000,"attn_unit_bias":0,"mlp_unit_bias":0},"settings":{"sparsity":0.3,'
    '"gamma":0.16666666666666666,"gamma_default":0.16666666666666666,"align":2,"allocation":"global",'
    '"criterion":"random","calibration":{"source":"wikitext2-valid","samples":4,"seq_len":16,"seed":0,'
    '"hash":"abc123"}},"layers":[{"layer_idx":0,"kept_kv_groups":[0,1],"kept_neurons":[0,1,2,3,4,5,6,7]},'
    '{"layer_idx":1,"kept_kv_groups":[1],"kept_neurons":[0,1,2,3,4,5,6,7]}],"stats":{"block_weights_before":7680,'
    '"block_weights_after":6144,"achieved_block_sparsity":0.2,"params_before":10000000,"params_after":9998464,'
    '"total_param_reduction":0.0001536,"kv_groups_pruned":1,"neurons_pruned":0,"kv_groups_total":4,'
    '"neurons_total":16,"ranked_attn_pruned":1,"ranked_mlp_pruned":0,"attn_fraction_target":0.36,'
    '"mlp_fraction_target":0.06,"notes":[]},"schema_version":1}'
)
GOOD = {"sparsity": 0.3, "gamma": 2.0, "gamma_default": 2.25, "align": 8, "allocation": "global"}


def test_an_old_plan_file_loads_typed_and_saves_back_identically(tmp_path):
    path = tmp_path / "plan.json"
    path.write_text(OLD_PLAN_JSON)
    plan = PruningPlan.load(path)
    assert isinstance(plan.settings, PlanSettings)
    assert plan.settings.align == 2 and plan.settings.criterion == "random"
    assert plan.settings.calibration["hash"] == "abc123"
    assert plan.to_json() == OLD_PLAN_JSON
    assert PruningPlan.from_json(plan.to_json()) == plan
    assert plan.summary()["sparsity"] == 0.3 and "calibration" not in plan.summary()


def test_allocate_builds_typed_settings_that_round_trip():
    shape = make_shape()
    scores = make_scores(shape)
    plan = allocate(scores, shape, Allocation(0.3, gamma=1.5, align=4, kind="uniform"))
    assert plan.settings == PlanSettings(0.3, 1.5, default_gamma(shape), 4, "uniform", "random", None)
    data = json.loads(plan.to_json())["settings"]
    assert list(data) == ["sparsity", "gamma", "gamma_default", "align", "allocation", "criterion", "calibration"]
    assert PlanSettings.from_dict(data) == plan.settings
    assert PruningPlan.from_json(plan.to_json()) == plan


@pytest.mark.parametrize(
    "change, message",
    [
        ({"sparsity": 0.96}, r"sparsity must be a number in \[0, 0.95\].*got 0.96"),
        ({"sparsity": -0.1}, "sparsity must be"),
        ({"sparsity": float("nan")}, "sparsity must be"),
        ({"sparsity": "0.3"}, "sparsity must be"),
        ({"sparsity": True}, "sparsity must be"),
        ({"gamma": 0.0}, r"gamma must be a positive number .*got 0.0; the analytic default for this model is 2.25"),
        ({"gamma": float("inf")}, "gamma must be a positive number"),
        ({"gamma": None}, "gamma must be a positive number"),
        ({"gamma_default": -1.0}, "gamma_default must be a positive number"),
        ({"align": 3}, r"align must be a power of two .*got 3; common choices: 1 \(off\), 8"),
        ({"align": 0}, "align must be a power of two"),
        ({"align": 8.0}, "align must be a power of two"),
        (
            {"allocation": "layerwise"},
            r"allocation must be one of global, uniform \(a T5: global, per-stack\), got 'layerwise'",
        ),
        ({"criterion": ""}, "criterion must be a criterion name"),
        ({"calibration": "wikitext2"}, "calibration must be the scores' calibration description"),
    ],
)
def test_bad_settings_raise_invalid_input_when_built(change, message):
    with pytest.raises(InvalidInput, match=message):
        PlanSettings(**{**GOOD, **change})


def test_the_align_bound_needs_the_shape():
    shape = make_shape(inter=256)
    assert Allocation(0.3, 2.0, 256).resolve(shape).align == 256
    with pytest.raises(InvalidInput, match=r"between 1 and the MLP width \(256\), got 512"):
        Allocation(0.3, 2.0, 512).resolve(shape)  # a power of two: only the shape refuses it
    with pytest.raises(InvalidInput, match=r"between 1 and the MLP width, got 3"):
        Allocation(0.3, 2.0, 3)  # refused when built, before any shape is known
    assert PlanSettings(**{**GOOD, "align": 512}).align == 512  # a plan file alone has no width to check against


@pytest.mark.parametrize(
    "settings, error, message",
    [
        ({**GOOD, "sparsity": 2.0}, PlanMismatch, "plan settings are invalid: sparsity must be"),
        ({k: v for k, v in GOOD.items() if k != "gamma"}, PlanMismatch, "plan settings are missing gamma"),
        ({**GOOD, "speed": 3}, PlanMismatch, "unknown keys speed; accepted: sparsity, gamma"),
        ([0.3, 2.0], PlanMismatch, "plan settings must be a JSON object"),
    ],
)
def test_a_plan_file_with_bad_settings_is_refused_with_plan_mismatch(settings, error, message):
    data = json.loads(OLD_PLAN_JSON)
    data["settings"] = settings
    with pytest.raises(error, match=message):
        PruningPlan.from_dict(data)


def test_the_loaded_models_plan_is_typed():
    plan = PruningPlan.from_json(OLD_PLAN_JSON)
    model = torch.nn.Linear(1, 1)
    assert LoadedModel(model, None, "x", "pruned", 0.0, plan=plan).plan is plan
    assert LoadedModel(model, None, "x", "local", 0.0).plan is None
    from_dict = LoadedModel(model, None, "x", "pruned", 0.0, plan=plan.to_dict()).plan
    assert isinstance(from_dict, PruningPlan) and from_dict == plan
    with pytest.raises(InvalidInput, match=r"LoadedModel\.plan must be a PruningPlan or None, got str"):
        LoadedModel(model, None, "x", "pruned", 0.0, plan="plan.json")
