"""The methods table, the configs' JSON round trip, plans that record the method, old files, the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from test_bad_input import run_cli
from transformers import AutoTokenizer

from nirvana.checkpoints.pruned import load_pruned
from nirvana.errors import InvalidInput
from nirvana.methods import METHODS, get_method, method_config
from nirvana.models.shapes import model_shape
from nirvana.pipeline import PruneSettings
from nirvana.pruning.allocation import Allocation, allocate
from nirvana.pruning.plan import PruningPlan
from nirvana.pruning.slicing import apply_plan
from nirvana.scoring.scores import Scores
from tests.tiny import tiny_model

DATA = Path(__file__).with_name("data")


def test_the_table_lists_nirvana_and_the_four_baselines_with_their_references():
    assert list(METHODS) == ["nirvana", "llm-pruner", "flap", "slicegpt", "tyr"]
    assert "AMD-AGI/Tyr-the-Pruner" in METHODS["tyr"].reference
    assert "horseee/LLM-Pruner" in METHODS["llm-pruner"].reference
    assert "CASIA-IVA-Lab/FLAP" in METHODS["flap"].reference
    assert "microsoft/TransformerCompression" in METHODS["slicegpt"].reference
    assert METHODS["llm-pruner"].uses_gradients and not METHODS["flap"].uses_gradients
    assert not METHODS["slicegpt"].uses_gradients and METHODS["slicegpt"].rotates
    assert not METHODS["tyr"].has_unit_scores and METHODS["tyr"].applies_on_data and not METHODS["tyr"].rotates
    with pytest.raises(
        InvalidInput, match="unknown method 'sparsegpt'; accepted: nirvana, llm-pruner, flap, slicegpt, tyr"
    ):
        get_method("sparsegpt")


@pytest.mark.parametrize(
    "name, settings",
    [
        ("llm-pruner", {"taylor": "param_mix", "attn_layers": [4, 19], "pruning_ratio": 0.4}),
        ("flap", {"metric": "WIFN", "bias": False}),
        ("slicegpt", {"slicing": 0.25, "slice_head": True}),
        ("nirvana", {}),
    ],
)
def test_configs_round_trip_through_json(name, settings):
    config = method_config(name, settings)
    again = method_config(name, json.loads(json.dumps(config.to_dict())))
    assert again == config and {k: config.to_dict()[k] for k in settings} == settings


def test_a_plan_written_by_the_code_before_methods_loads_and_saves_back_identically():
    """tests/data/plan-b67f179.json and scores-b67f179.*: written by main at b67f179 for tiny_model("llama")."""
    text = (DATA / "plan-b67f179.json").read_text()
    plan = PruningPlan.from_json(text)
    assert plan.settings.method == "nirvana" and plan.settings.method_settings is None
    assert plan.to_json() == text
    model = tiny_model("llama")
    pruned = apply_plan(model, plan)  # same fingerprint, slices as before
    assert model_shape(pruned).num_kv_heads == tuple(plan.kept_kv_groups)
    scores = Scores.load(DATA / "scores-b67f179")
    assert scores.extra == {} and scores.criterion == "nirvana"
    assert allocate(scores, model_shape(model), Allocation(0.3, align=1)).layers == plan.layers


def test_a_method_plan_records_the_method_and_its_settings_and_round_trips(tmp_path):
    from conftest import random_batch

    from nirvana.methods.run import method_plan, method_scores

    model = tiny_model("llama", num_hidden_layers=4)
    config = method_config("flap", {"metric": "IFV"})
    scores = method_scores(model, "flap", config, random_batch(n=3, t=8), use_cache=True)
    assert set(scores.extra) == {"attn_mean_inp", "mlp_mean_inp"}
    again = Scores.load(scores.save(tmp_path / "s"))  # the score file keeps the statistics
    torch.testing.assert_close(again.extra["attn_mean_inp"], scores.extra["attn_mean_inp"])
    plan = method_plan(scores, model_shape(model), 0.3, "flap", config)
    data = json.loads(plan.to_json())["settings"]
    assert data["method"] == "flap" and data["method_settings"] == {"metric": "IFV", "structure": "AL-AM", "bias": True}
    assert PruningPlan.from_json(plan.to_json()) == plan


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"method": "bogus"}, "unknown method 'bogus'; accepted: nirvana, llm-pruner, flap, slicegpt"),
        ({"method": "slicegpt", "method_settings": {"slicing": 1.5}}, "slicing must be a fraction of the hidden"),
        ({"method": "flap", "criterion": "taylor"}, "criterion is a setting of method nirvana and do not apply"),
        ({"method": "llm-pruner", "gamma": 2.0}, "gamma is a setting of method nirvana"),
        ({"method": "flap", "method_settings": {"metric": "L2"}}, "flap metric must be one of WIFV, IFV, WIFN"),
        ({"method": "nirvana", "method_settings": {"x": 1}}, r"the CLI.s flags\), not as method_settings"),
        ({"method": "flap", "align": 16}, "align is a setting of method nirvana"),
    ],
)
def test_prune_settings_refuse_what_does_not_apply(kwargs, message):
    with pytest.raises(InvalidInput, match=message):
        PruneSettings(sparsity=0.2, **kwargs)


@pytest.fixture(scope="module")
def folders(tmp_path_factory, tiny_tokenizer_dir):
    """A 4-layer tiny Llama with a real tokenizer, and one whose o_proj has a bias (attention_bias)."""
    root = tmp_path_factory.mktemp("methods-cli")
    tok = AutoTokenizer.from_pretrained(tiny_tokenizer_dir)
    out = {}
    for name, extra in (("plain", {}), ("biased", {"attention_bias": True})):
        model = tiny_model("llama", vocab_size=len(tok), num_hidden_layers=4, **extra)
        model.save_pretrained(root / name)
        tok.save_pretrained(root / name)
        out[name] = root / name
    return out


def _prune_args(model: Path, out: Path, corpus: Path, *extra: str) -> list[str]:
    calib = ["--calib", str(corpus), "--samples", "4", "--seq-len", "16", "--device", "cpu", "--dtype", "float32"]
    return ["prune", "--model", str(model), "--sparsity", "0.2", "--out", str(out), *calib, *extra]


@pytest.mark.parametrize(
    "extra, model, message",
    [
        (["--method", "bogus"], "plain", "unknown method 'bogus'; accepted: nirvana, llm-pruner, flap, slicegpt"),
        (["--method", "slicegpt", "--method-settings", '{"slicing": 0}'], "plain", "slicing must be a fraction"),
        (["--method", "slicegpt", "--method-settings", '{"slicing": 0.9}'], "plain", "at least 8 must stay"),
        (["--method", "slicegpt", "--samples", "1"], "plain", "1 x 16 = 16 < 32"),
        (["--method", "flap"], "biased", "layer 0's o_proj already has a bias"),
        (["--method", "llm-pruner", "--method-settings", '{"attn_layers": [0, 3]}'], "plain", "is outside"),
        (["--method", "llm-pruner", "--sparsity", "0.6"], "plain", "cannot reach block sparsity 0.6"),
        (["--method", "flap", "--method-settings", "[1]"], "plain", "must be a JSON object"),
        (["--method", "flap", "--gamma", "2"], "plain", "gamma is a setting of method nirvana"),
    ],
)
def test_cli_refuses_with_exit_2_and_writes_nothing(extra, model, message, folders, corpus, tmp_path):
    out = tmp_path / "out"
    code, err = run_cli(_prune_args(folders[model], out, corpus, *extra))
    assert code == 2 and message in " ".join(err.split()), err
    assert "Traceback" not in err and not out.exists()


def test_cli_prunes_with_flap_and_a_plan_reapplies_with_its_score_file(folders, corpus, tmp_path):
    code, err = run_cli(_prune_args(folders["plain"], tmp_path / "f", corpus, "--method", "flap"))
    assert code == 0, err
    report = json.loads((tmp_path / "f" / "report.json").read_text())
    assert report["method"] == "flap" and report["gamma"] is None and report["added_bias_params"] == 2 * 4 * 32
    assert abs(report["achieved_block_sparsity"] - 0.2) < 0.05  # 4 tiny layers: coarse units
    assert json.loads((tmp_path / "f" / "plan.json").read_text())["settings"]["method"] == "flap"
    first = load_pruned(tmp_path / "f").model
    # score -> prune --plan --scores gives the same model; without the scores the plan is refused.
    score_args = ["score", "--model", str(folders["plain"]), "--method", "flap", "--out", str(tmp_path / "s")]
    code, err = run_cli([*score_args, "--calib", str(tmp_path / "corpus-missing")])
    assert code == 2
    calib = ["--calib", str(corpus), "--samples", "4", "--seq-len", "16"]
    assert run_cli([*score_args, *calib])[0] == 0
    plan_args = ["--plan", str(tmp_path / "f" / "plan.json")]
    code, err = run_cli(_prune_args(folders["plain"], tmp_path / "g", corpus, *plan_args))
    assert code == 2 and "pass the score file it was made from" in " ".join(err.split())
    code, err = run_cli(
        _prune_args(folders["plain"], tmp_path / "g", corpus, *plan_args, "--scores", str(tmp_path / "s"))
    )
    assert code == 0, err
    second = load_pruned(tmp_path / "g").model
    for (name, a), (_, b) in zip(first.state_dict().items(), second.state_dict().items()):
        assert torch.equal(a, b), name


def test_cli_prunes_with_slicegpt_and_its_plan_reapplies_to_the_same_model(folders, corpus, tmp_path):
    code, err = run_cli(_prune_args(folders["plain"], tmp_path / "s", corpus, "--method", "slicegpt"))
    assert code == 0, err
    report = json.loads((tmp_path / "s" / "report.json").read_text())
    assert report["method"] == "slicegpt" and report["sliced_hidden"]["embedding"] == 24  # of 32: nearest 20%
    assert report["params_after"] == sum(p.numel() for p in load_pruned(tmp_path / "s").model.parameters())
    score_args = ["score", "--model", str(folders["plain"]), "--method", "slicegpt", "--out", str(tmp_path / "x")]
    code, err = run_cli(score_args)
    assert code == 2 and "has no unit scores" in " ".join(err.split())
    plan_args = ["--plan", str(tmp_path / "s" / "plan.json"), "--method", "slicegpt"]
    code, err = run_cli(_prune_args(folders["plain"], tmp_path / "t", corpus, *plan_args, "--seed", "1"))
    assert code == 2 and "Pass the same --calib" in " ".join(err.split()) and not (tmp_path / "t").exists()
    code, err = run_cli(_prune_args(folders["plain"], tmp_path / "t", corpus, *plan_args))
    assert code == 0, err
    first, second = load_pruned(tmp_path / "s").model, load_pruned(tmp_path / "t").model
    for (name, a), (_, b) in zip(first.state_dict().items(), second.state_dict().items()):
        assert torch.equal(a, b), name
