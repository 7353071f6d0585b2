"""Plans and score files written before plans and scores became one type over unit kinds still load, save back
byte for byte, and planning on the old scores gives the old plans byte for byte.

The files in tests/data/compat-2b63775/ were written by main at 2b63775 (`write.py` there says how), for a tiny
Qwen2 (3 layers) and a tiny T5 (2 + 3 layers): NIRVANA scores and plans at several allocations, FLAP's scores
with their statistics and its plan, a T5's scores and plans of both scopes.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from tiny import tiny_model
from tiny_t5 import tiny_t5

from nirvana.methods import method_config
from nirvana.methods.run import method_plan
from nirvana.models.shapes import model_shape
from nirvana.pipeline import load_scores
from nirvana.pruning.allocation import Allocation, allocate
from nirvana.pruning.plan import PruningPlan, load_plan
from nirvana.pruning.slicing import apply_plan
from nirvana.t5.anatomy import t5_shape
from nirvana.t5.slicing import apply_t5_plan

DATA = Path(__file__).parent / "data" / "compat-2b63775"
DECODER_PLANS = ["global-30", "global-50-align8", "gamma-1.5", "uniform-30", "clamped"]
T5_PLANS = ["global-30", "per-stack-40"]


def _allocation(plan: PruningPlan) -> Allocation:
    s = plan.settings
    gamma = s.gamma_given if s.per_ranking else s.gamma
    return Allocation(s.sparsity, gamma, s.align, s.allocation)


@pytest.mark.parametrize("name", [*DECODER_PLANS, "flap-30", *(f"t5-{n}" for n in T5_PLANS)])
def test_an_old_plan_file_loads_and_saves_back_byte_for_byte(name, tmp_path):
    path = DATA / f"plan-{name}.json"
    plan = load_plan(path)
    assert plan.family == ("t5" if name.startswith("t5") else "decoder-only")
    assert plan.save(tmp_path / "again.json").read_bytes() == path.read_bytes()
    assert PruningPlan.from_json(plan.to_json()) == plan


@pytest.mark.parametrize("name", DECODER_PLANS)
def test_old_decoder_scores_give_the_old_plans_byte_for_byte(name):
    model = tiny_model("qwen2", num_hidden_layers=3)
    scores = load_scores(DATA / "scores-nirvana")
    assert scores.family == "decoder-only" and list(scores.units) == ["attn", "mlp"]
    old = load_plan(DATA / f"plan-{name}.json")
    assert allocate(scores, model_shape(model), _allocation(old)).to_json() == old.to_json()
    assert model_shape(apply_plan(model, old)).num_kv_heads == tuple(old.kept_kv_groups)


def test_old_flap_scores_keep_their_statistics_and_give_the_old_plan():
    model = tiny_model("qwen2", num_hidden_layers=3)
    scores = load_scores(DATA / "scores-flap")
    assert set(scores.extra) == {"attn_mean_inp", "mlp_mean_inp"}
    old = load_plan(DATA / "plan-flap-30.json")
    config = method_config("flap", old.settings.method_settings)
    assert method_plan(scores, model_shape(model), 0.3, "flap", config).to_json() == old.to_json()


@pytest.mark.parametrize("name", T5_PLANS)
def test_old_t5_scores_give_the_old_plans_byte_for_byte(name):
    t5 = tiny_t5(encoder_layers=2, decoder_layers=3, heads=4, d_ff=64)
    scores = load_scores(DATA / "scores-t5")
    assert scores.family == "t5" and set(scores.units) == {"enc_self", "dec_self", "cross", "enc_ffn", "dec_ffn"}
    old = load_plan(DATA / f"plan-t5-{name}.json")
    new = allocate(scores, t5_shape(t5), _allocation(old))
    # One change, on purpose: a T5 plan now notes the heads the per-layer minimum kept, as a decoder-only plan does.
    added = [n for n in new.stats["notes"] if n not in old.stats["notes"]]
    assert all(n.startswith("the per-layer minimum kept") for n in added)
    new.stats["notes"] = old.stats["notes"]
    assert new.to_json() == old.to_json()
    pruned = apply_t5_plan(t5, old)
    assert pruned.config.nirvana_t5_ffn_widths["enc_ffn"] == [len(r) for r in old.kept["enc_ffn"]]


def test_a_score_file_saved_again_reads_back_the_same(tmp_path):
    for name in ("scores-nirvana", "scores-flap", "scores-t5"):
        scores = load_scores(DATA / name)
        again = load_scores(scores.save(tmp_path / name))
        assert again.family == scores.family and again.criterion == scores.criterion
        assert all(torch.equal(again.units[k], v) for k, v in scores.units.items())
        assert all(torch.equal(again.extra[k], v) for k, v in scores.extra.items())
        old_json = json.loads((DATA / f"{name}.json").read_text())
        assert json.loads((tmp_path / f"{name}.json").read_text()) == old_json
