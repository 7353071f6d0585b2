"""AppTest of every page on a tiny random T5 (issue 26): the Model page's two stacks, Saliency's heatmaps of
the five unit kinds, Allocation per kind from the cached scores, Prune & compare (perplexity, accuracy through
lm-eval's seq2seq backend, generations, speed, save), the Sweep, and the pages that have no T5 view saying so.

Expected figures come from the library on the same model and scores (`tests/tiny_t5.py` writes the folder:
2 + 2 blocks, 8 heads of 8, 64 gated-GELU neurons, a 384-token tokenizer).
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import decode
from test_app_pages import (
    app_started_on,
    chart,
    charts_by_title,
    metrics,
    no_errors,
    small_data_dir,  # noqa: F401 (the fixture, requested by name in `t5_env`)
    started_app,
)

from tests.tiny_t5 import write_tiny_t5


@pytest.fixture(scope="session")
def tiny_t5_dir(tmp_path_factory):
    return write_tiny_t5(tmp_path_factory.mktemp("tiny-t5-app"))


@pytest.fixture
def t5_env(monkeypatch, tiny_t5_dir, small_data_dir, tmp_path):  # noqa: F811
    monkeypatch.setenv("NIRVANA_RUNS_DIR", str(tmp_path / "runs"))
    with app_started_on(monkeypatch, tiny_t5_dir, small_data_dir) as folder:
        yield folder


@pytest.fixture
def at(t5_env):
    return started_app()


@pytest.fixture
def t5(t5_env):
    from nirvana.checkpoints.loading import load_model

    return load_model(str(t5_env), dtype="float32", device="cpu")


def score(at, criterion: str = "magnitude", criterion2: str | None = None):
    at.switch_page("pages/saliency.py").run()
    at.selectbox(key="criterion").set_value(criterion).run()
    if criterion2:
        at.selectbox(key="criterion2").set_value(criterion2).run()
    at.button(key="compute_saliency").click().run()
    no_errors(at)
    return at


def magnitude_scores(t5):
    from nirvana.t5.scoring import compute_t5_scores

    return compute_t5_scores(t5.model, "magnitude", use_cache=False)


def test_model_page_describes_both_stacks(at):
    at.switch_page("pages/model.py").run()
    no_errors(at)
    m = metrics(at)
    assert m["Encoder / decoder layers"] == "2 / 2" and m["Heads × head dim d"] == "8 × 8"
    assert m["FFN width"] == "64 (gated GELU)" and m["Block parameters"] == "0.15 M"  # 147,456 weights
    # gamma* = (FFN weights / attention weights) x 1/2: global 128*3 / (48*4*8) / 2 ... on D units (METHOD-T5.md)
    assert m["γ* (one global ranking)"] == "0.25" and m["γ* per stack (encoder / decoder)"] == "0.38 / 0.19"
    table = at.dataframe[0].value
    assert table["unit kind"].tolist()[:3] == [
        "encoder self-attention heads",
        "decoder self-attention heads",
        "decoder cross-attention heads",
    ]
    assert table["units (all layers)"].tolist() == [16, 16, 16, 128, 128]
    assert table["weights per unit"].tolist() == [4 * 8 * 64] * 3 + [3 * 64] * 2


def test_saliency_draws_the_five_kinds_and_offers_t5_criteria_only(at, t5):
    score(at, "magnitude")
    assert "wanda" not in at.selectbox(key="criterion").options  # refused on T5 (T5_CRITERIA)
    expected = magnitude_scores(t5)
    for kind, fragment in (
        ("enc_self", "magnitude: encoder self-attention heads"),
        ("dec_self", "magnitude: decoder self-attention heads"),
        ("cross", "magnitude: decoder cross-attention heads"),
    ):
        data = chart(at, fragment)["data"][0]
        np.testing.assert_allclose(decode(data["customdata"]), expected.units[kind].numpy(), rtol=1e-5)
    at.radio(key="neuron_mode").set_value("index").run()
    for kind, fragment in (("enc_ffn", "encoder FFN neurons"), ("dec_ffn", "decoder FFN neurons")):
        data = chart(at, f"magnitude: {fragment}")["data"][0]  # 64 neurons <= 128 bins: one per column
        np.testing.assert_allclose(decode(data["customdata"])[..., 2], expected.units[kind].numpy(), rtol=1e-5)
    totals = chart(at, "encoder per-layer totals")["data"]
    np.testing.assert_allclose(decode(totals[1]["y"]), expected.units["enc_ffn"].sum(1).numpy(), rtol=1e-5)
    assert metrics(at)["Heads (3 attention kinds)"] == "48"


def test_saliency_second_criterion_and_nirvana_scores(at, t5):
    score(at, "nirvana", "random")
    titles = list(charts_by_title(at))
    assert sum(t.startswith("nirvana:") for t in titles) == 7 and sum(t.startswith("random:") for t in titles) == 7


def test_allocation_follows_the_sliders_per_kind(at, t5):
    from nirvana.pruning.allocation import Allocation, allocate
    from nirvana.t5.anatomy import t5_shape

    score(at, "magnitude")
    at.switch_page("pages/allocation.py").run()
    no_errors(at)
    scores = magnitude_scores(t5)
    for sparsity, scope, gamma in ((0.3, "global", None), (0.5, "per-stack", None), (0.4, "global", 1.0)):
        at.slider(key="sparsity").set_value(sparsity).run()
        at.radio(key="t5_scope").set_value(scope).run()
        at.checkbox(key="t5_gamma_star").set_value(gamma is None).run()
        if gamma is not None:
            at.slider(key="t5_gamma").set_value(gamma).run()
        no_errors(at)
        plan = allocate(scores, t5_shape(t5.model), Allocation(sparsity, gamma, 8, scope))
        bars = chart(at, "Kept units per layer")["data"]
        assert [decode(t["y"]).tolist() for t in bars] == list(plan.kept_counts.values())
        assert metrics(at)["Achieved block sparsity"] == f"{plan.stats['achieved_block_sparsity']:.1%}"
        assert at.session_state["plan"].kept == plan.kept
        overlay = decode(chart(at, "encoder self-attention heads · pruned")["data"][1]["z"])
        assert (overlay == 0).sum(1).tolist() == plan.kept_counts["enc_self"]


def test_prune_and_compare_measures_a_pruned_t5_and_saves_it(at, t5, tmp_path):
    from nirvana.checkpoints.loading import load_model
    from nirvana.t5.measure import seq2seq_perplexity
    from nirvana.t5.slicing import apply_t5_plan
    from ui.evals import ppl_text

    score(at, "magnitude")
    at.switch_page("pages/allocation.py").run()
    at.slider(key="sparsity").set_value(0.4).run()
    plan = at.session_state["plan"]
    at.switch_page("pages/prune.py").run()
    no_errors(at)
    assert "pruning_method" not in [s.key for s in at.selectbox]  # NIRVANA only on a T5
    at.button(key="apply_plan").click().run()
    no_errors(at)
    pruned = at.session_state["pruned"]
    expected = apply_t5_plan(t5.model, plan)
    assert (
        pruned.params == sum(p.numel() for p in expected.parameters()) < sum(p.numel() for p in t5.model.parameters())
    )
    at.number_input(key="ppl_tokens").set_value(256).run()
    at.selectbox(key="ppl_window").set_value(128).run()
    at.button(key="measure_ppl").click().run()
    no_errors(at)
    want = seq2seq_perplexity(expected, t5.tokenizer, "wikitext2", seq_len=128, max_tokens=256, use_cache=False)
    assert metrics(at)["Pruned perplexity"] == ppl_text(want.ppl)  # a random T5's: 3 digits past 1e5
    at.text_area(key="t5_prompts").set_value("summarize: The cat sat on the mat.").run()
    at.number_input(key="max_new_tokens").set_value(4).run()
    at.button(key="generate").click().run()
    no_errors(at)
    _, after = at.session_state["evals"]["generate"]
    assert [r["prompt"] for r in after] == ["summarize: The cat sat on the mat."] and after[0]["chat"] is False
    at.multiselect(key="speed_batches").set_value([1]).run()
    at.number_input(key="speed_new_tokens").set_value(2).run()
    at.number_input(key="speed_repeats").set_value(1).run()
    at.button(key="measure_speed").click().run()
    no_errors(at)
    assert "Decode speed-up, batch 1" in metrics(at)
    at.text_input(key="save_dir").set_value(str(tmp_path / "t5-pruned")).run()
    at.button(key="save_pruned").click().run()
    no_errors(at)
    reloaded = load_model(str(tmp_path / "t5-pruned"), dtype="float32", device="cpu")
    assert reloaded.plan.kept == plan.kept
    runs = list((tmp_path / "runs").iterdir())
    assert runs, "the prune was recorded as a run"
    assert json.loads(next((tmp_path / "runs").glob("*/plan.json")).read_text())["format"] == "nirvana-t5-plan"
    # The saved folder loads back as a pruned T5: the Model page says so and Saliency refuses to score it.
    at.switch_page("pages/model.py").run()
    at.radio(key="model_source").set_value("Local directory").run()
    at.text_input(key="model_dir").set_value(str(tmp_path / "t5-pruned")).run()
    at.button(key="load_model").click().run()
    no_errors(at)
    assert any("already pruned" in i.value for i in at.info)
    at.switch_page("pages/saliency.py").run()
    at.button(key="compute_saliency").click().run()
    assert not at.exception and [e.value for e in at.error if "already pruned" in e.value]
    assert "scores" not in at.session_state


def test_accuracy_tab_runs_lm_eval_seq2seq_on_a_pruned_t5(at, monkeypatch):
    from ui import accuracy

    seen = []
    real = accuracy.run

    def spy(model, tokenizer, model_key, tasks, limit, *args, **kwargs):
        seen.append((type(model).__name__, tuple(tasks), limit))
        return real(model, tokenizer, model_key, tasks, limit, *args, **kwargs)

    monkeypatch.setattr(accuracy, "run", spy)
    score(at, "magnitude")
    at.switch_page("pages/allocation.py").run()
    at.slider(key="sparsity").set_value(0.3).run()
    at.switch_page("pages/prune.py").run()
    at.button(key="apply_plan").click().run()
    at.multiselect(key="acc_tasks").set_value(["arc_easy"]).run()
    at.number_input(key="acc_limit").set_value(2).run()
    at.button(key="measure_acc").click().run()
    no_errors(at)
    assert len(seen) == 2 and all(t == ("arc_easy",) and n == 2 for _, t, n in seen)
    _, after = at.session_state["evals"]["accuracy"]
    assert 0 <= after["tasks"]["arc_easy"]["acc"] <= 1 and after["limit"] == 2


def test_sweep_of_a_t5_measures_every_point_and_loads_a_plan(at, t5):
    from nirvana.pruning.allocation import Allocation, allocate
    from nirvana.t5.anatomy import t5_shape
    from nirvana.t5.measure import seq2seq_perplexity
    from nirvana.t5.slicing import apply_t5_plan

    score(at, "magnitude")
    at.switch_page("pages/sweep.py").run()
    no_errors(at)
    at.text_input(key="t5_sweep_sparsities").set_value("0.2, 0.5").run()
    at.text_input(key="t5_sweep_gammas").set_value("1").run()
    at.number_input(key="sweep_tokens").set_value(256).run()
    at.checkbox(key="sweep_speed").set_value(False).run()
    at.button(key="run_sweep").click().run()
    no_errors(at)
    rows = at.session_state["t5_sweep"]["rows"]
    assert [(r["axis"], r["sparsity"]) for r in rows] == [
        ("dense", 0.0),
        ("sparsity", 0.2),
        ("sparsity", 0.5),
        ("gamma", 0.2),
    ]
    plan = allocate(magnitude_scores(t5), t5_shape(t5.model), Allocation(0.5))
    want = seq2seq_perplexity(apply_t5_plan(t5.model, plan), t5.tokenizer, "wikitext2", seq_len=256, max_tokens=256,
                              use_cache=False)  # fmt: skip
    assert rows[2]["quality"] == pytest.approx(want.ppl, rel=1e-6)
    assert rows[2]["achieved_block_sparsity"] == plan.stats["achieved_block_sparsity"]
    assert "Against target sparsity" in charts_by_title(at) and "Against γ" not in charts_by_title(at)  # one γ point
    at.selectbox(key="t5_sweep_pick").set_value(3).run()
    at.button(key="load_sweep_plan").click().run()
    no_errors(at)
    assert at.title[0].value == "3 · Allocation" and at.slider(key="t5_gamma").value == 1.0
    assert at.checkbox(key="t5_gamma_star").value is False


def test_calibration_page_says_it_is_for_decoder_only_models(at):
    at.switch_page("pages/calibration.py").run()
    no_errors(at)
    assert any("decoder-only" in i.value for i in at.info)
