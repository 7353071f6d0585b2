"""AppTest of the pruning methods in the app (issue 22): the picker, LLM-Pruner and FLAP beside
NIRVANA on Allocation, pruning with any method on Prune & compare, methods as sweep series, the
baselines table on Evidence, and bad settings shown as an error box.

A tiny random Llama with 6 layers (SmolLM2's tokenizer): LLM-Pruner's default layer range is then
[1, 5), so the first and last layers are the ones it never prunes. Expected figures come from the
library on the same scores.
"""

from __future__ import annotations

import json

import pytest
from conftest import decode
from test_app_pages import (
    ROOT,
    TIMEOUT,
    chart,
    compute,
    metrics,
    no_errors,
    small_data_dir,  # noqa: F401 (the fixture, requested by name in `at`)
    sweep_kl,
)

from nirvana.methods import METHODS
from ui.methods import EXPLAIN


@pytest.fixture
def at(monkeypatch, tiny6_dir, request):
    import streamlit as st
    from streamlit.testing.v1 import AppTest

    monkeypatch.setenv("NIRVANA_APP_MODEL", str(tiny6_dir))
    monkeypatch.setenv("NIRVANA_DATA_DIR", str(request.getfixturevalue("small_data_dir")))
    st.cache_data.clear()
    st.cache_resource.clear()
    app = AppTest.from_file(str(ROOT / "app.py"), default_timeout=TIMEOUT)
    app.run()
    yield app
    st.cache_data.clear()
    st.cache_resource.clear()


@pytest.fixture
def tiny6(tiny6_dir):
    from nirvana.checkpoints.loading import load_model

    return load_model(str(tiny6_dir), dtype="float32", device="cpu")


def library_plan(lm, at, name: str, sparsity: float, settings: dict | None = None):
    """The plan the library makes for `name` on the session's calibration batch (its scores from the disk cache)."""
    from nirvana.methods import method_config
    from nirvana.methods.run import method_plan
    from nirvana.models.shapes import model_shape
    from nirvana.pipeline import PruneSettings, score

    batch = at.session_state["calib_batch"]
    scores, _ = score(lm, PruneSettings(sparsity=0.0, method=name, method_settings=settings), batch=batch)
    return method_plan(scores, model_shape(lm.model), sparsity, name, method_config(name, settings))


def test_every_method_has_a_two_sentence_how_to_read_it_and_a_colour():
    from nirvana.charts import METHOD_COLORS
    from ui.methods import EXPLAIN

    assert set(EXPLAIN) == set(METHODS) == set(METHOD_COLORS)  # the app's side of every row of the table
    assert len(set(METHOD_COLORS.values())) == len(METHODS)
    for name, text in EXPLAIN.items():
        sentences = [s for s in text.replace("e.g.", "eg").split(". ") if s]
        assert len(sentences) == 2 and text.endswith("."), (name, text)


def test_allocation_draws_llm_pruner_and_flap_beside_nirvana(at, tiny6):
    compute(at, criterion="magnitude")
    at.switch_page("pages/allocation.py").run()
    at.slider(key="sparsity").set_value(0.15).run()  # LLM-Pruner cannot reach the default 0.2 on this model
    picker = at.multiselect(key="alloc_methods")
    assert picker.options == [m.label for name, m in METHODS.items() if name != "nirvana"]
    picker.set_value(["llm-pruner", "flap"]).run()
    no_errors(at)
    assert any("How to read LLM-Pruner" in i.value for i in at.info)
    assert any(EXPLAIN["flap"] in i.value for i in at.info)
    traces = {t["name"]: t for t in chart(at, "Kept units per layer")["data"] if t["name"] in ("LLM-Pruner", "FLAP")}
    kv = {}
    for name, label in (("llm-pruner", "LLM-Pruner"), ("flap", "FLAP")):
        rows = [decode(t["y"]).tolist() for t in chart(at, "Kept units per layer")["data"] if t["name"] == label]
        want = library_plan(tiny6, at, name, 0.15)
        assert rows == [want.kept_kv_groups, want.kept_neurons], name
        kv[name] = rows
    assert set(traces) == {"LLM-Pruner", "FLAP"}
    groups, neurons = kv["llm-pruner"]
    assert groups[0] == groups[-1] == 2 and neurons[0] == neurons[-1] == 48  # first and last layers untouched
    assert len(set(neurons[1:-1])) == 1 and neurons[1] < 48  # the same cut in every layer of its range
    table = next(d.value for d in at.dataframe if "layers untouched" in d.value.columns)
    assert table["method"].tolist() == ["NIRVANA (this page's plan)", "LLM-Pruner", "FLAP"]
    assert table["layers untouched"].iloc[1] == 2


def test_allocation_says_when_a_method_cannot_reach_the_sparsity_and_keeps_going(at):
    compute(at, criterion="magnitude")
    at.switch_page("pages/allocation.py").run()
    at.multiselect(key="alloc_methods").set_value(["llm-pruner"]).run()
    at.slider(key="sparsity").set_value(0.25).run()  # LLM-Pruner on [1, 5) of this model: 0.175 or 0.317
    assert not at.exception
    assert any("llm-pruner" in e.value and "cannot reach" in e.value for e in at.error), [e.value for e in at.error]
    names = {t["name"] for t in chart(at, "Kept units per layer")["data"]}
    assert "global ranking" in names and "LLM-Pruner" not in names  # NIRVANA's plan is still drawn
    at.slider(key="sparsity").set_value(0.15).run()
    no_errors(at)


def test_a_bad_method_setting_shows_an_error_box_not_a_traceback(at):
    compute(at, criterion="magnitude")
    at.switch_page("pages/allocation.py").run()
    at.slider(key="sparsity").set_value(0.15).run()
    at.multiselect(key="alloc_methods").set_value(["llm-pruner"]).run()
    at.text_input(key="method_settings_llm-pruner").set_value('{"attn_layers": [0, 6]}').run()
    assert not at.exception
    assert any("outside what this 6-layer model allows" in e.value for e in at.error), [e.value for e in at.error]
    at.text_input(key="method_settings_llm-pruner").set_value("{not json").run()
    assert not at.exception and any("not JSON" in e.value for e in at.error)
    at.text_input(key="method_settings_llm-pruner").set_value('{"taylor": "param_mix"}').run()
    no_errors(at)
    assert at.slider(key="sparsity")  # the page is still there


def test_prune_and_compare_with_flap_gives_a_pruned_model_with_biases_and_a_comparison(at, tiny6, tmp_path):
    from nirvana.checkpoints.pruned import load_pruned
    from nirvana.models.architectures import layer_projections

    compute(at, criterion="magnitude")  # the session's calibration batch (FLAP needs no NIRVANA plan)
    at.switch_page("pages/prune.py").run()
    picker = at.selectbox(key="prune_method")
    assert picker.options == [m.label for m in METHODS.values()]
    picker.set_value("flap").run()
    no_errors(at)
    assert any(EXPLAIN["flap"] in i.value for i in at.info)
    at.slider(key="method_sparsity").set_value(0.3).run()
    at.button(key="prune_with_method").click().run()
    no_errors(at)
    pruned = at.session_state["pruned"]
    want = library_plan(tiny6, at, "flap", 0.3)
    assert pruned.plan.layers == want.layers and pruned.plan.settings.method == "flap"
    assert all(p.o_proj.bias is not None and p.down_proj.bias is not None for p in layer_projections(pruned.model))
    assert pruned.report["added_bias_params"] > 0
    assert any("added bias parameters" in s.value for s in at.success)
    at.number_input(key="ppl_tokens").set_value(256).run()
    at.selectbox(key="ppl_window").set_value(128).run()
    at.button(key="measure_ppl").click().run()
    no_errors(at)
    m = {x.label: x.value for x in at.metric}
    assert float(m["Pruned perplexity"]) != float(m["Dense perplexity"])
    at.text_area(key="prompts").set_value("Hello there").run()
    at.number_input(key="max_new_tokens").set_value(3).run()
    at.button(key="generate").click().run()
    no_errors(at)
    assert [x.value for x in at.markdown if x.value.startswith("**1. `Hello there`**")] and len(at.code) == 2
    at.multiselect(key="speed_batches").set_value([1]).run()
    at.number_input(key="speed_new_tokens").set_value(2).run()
    at.number_input(key="speed_repeats").set_value(1).run()
    at.button(key="measure_speed").click().run()
    no_errors(at)
    at.text_input(key="save_dir").set_value(str(tmp_path / "flap")).run()
    at.button(key="save_pruned").click().run()
    no_errors(at)
    assert load_pruned(tmp_path / "flap").plan.settings.method == "flap"


def test_prune_with_llm_pruner_refuses_an_unreachable_sparsity_with_a_message(at):
    at.switch_page("pages/prune.py").run()
    at.selectbox(key="prune_method").set_value("llm-pruner").run()
    at.slider(key="method_sparsity").set_value(0.25).run()
    at.button(key="prune_with_method").click().run()
    assert not at.exception
    assert any("cannot reach" in e.value for e in at.error), [e.value for e in at.error]
    assert "pruned" not in at.session_state and at.button(key="prune_with_method")
    at.slider(key="method_sparsity").set_value(0.15).run()
    at.button(key="prune_with_method").click().run()
    no_errors(at)
    assert at.session_state["pruned"].plan.settings.method == "llm-pruner"


def test_the_sweep_draws_one_series_per_chosen_method(at, tiny6):
    compute(at, criterion="magnitude")
    at.switch_page("pages/sweep.py").run()
    picker = at.multiselect(key="sweep_methods")
    assert picker.options == [m.label for m in METHODS.values()] and picker.value == ["nirvana"]
    picker.set_value(["nirvana", "llm-pruner", "flap"]).run()
    no_errors(at)
    at.radio(key="sweep_metric").set_value("kl").run()
    at.text_input(key="sweep_sparsities").set_value("0.15, 0.25").run()  # LLM-Pruner cannot reach 0.25 here
    at.text_input(key="sweep_gammas").set_value("2").run()
    at.checkbox(key="sweep_speed").uncheck().run()
    at.button(key="run_sweep").click().run()
    assert not at.exception
    assert [e.value for e in at.error if "LLM-Pruner at sparsity 0.25" in e.value], [e.value for e in at.error]
    rows, _ = at.session_state["sweep"]
    assert [(r["method"], r["axis"], r["sparsity"]) for r in rows] == [
        ("dense", "dense", 0.0),
        ("nirvana", "sparsity", 0.15),
        ("nirvana", "sparsity", 0.25),
        ("nirvana", "gamma", 0.2),  # the gamma axis sits at the Allocation page's sparsity (default 0.2)
        ("llm-pruner", "sparsity", 0.15),
        ("flap", "sparsity", 0.15),
        ("flap", "sparsity", 0.25),
    ]
    flap = library_plan(tiny6, at, "flap", 0.25)
    assert rows[-1]["achieved_block_sparsity"] == flap.stats["achieved_block_sparsity"]
    spec = chart(at, "Against sparsity")
    quality = [t for t in spec["data"] if t["xaxis"] == "x"]  # the first subplot: KL to dense
    assert [t["name"] for t in quality] == ["NIRVANA", "LLM-Pruner", "FLAP"]
    assert [decode(t["x"]).tolist() for t in quality] == [[0.0, 0.15, 0.25], [0.0, 0.15], [0.0, 0.15, 0.25]]
    kl = {r["method"]: r["quality"] for r in rows if r["sparsity"] == 0.15}
    assert [decode(t["y"]).tolist()[1] for t in quality] == pytest.approx([kl["nirvana"], kl["llm-pruner"], kl["flap"]])
    assert len({t["marker"]["color"] for t in quality}) == 3
    at.selectbox(key="sweep_pick").set_value(6).run()  # FLAP at 0.25: loads it on Prune & compare
    at.button(key="load_sweep_plan").click().run()
    no_errors(at)
    assert at.title[0].value == "5 · Prune & compare" and at.selectbox(key="prune_method").value == "flap"
    assert at.slider(key="method_sparsity").value == 0.25


def test_evidence_shows_the_committed_baselines_table_and_what_is_missing(at):
    import nirvana.bench.baselines as bench
    from nirvana.bench.baselines_report import ablations, variants
    from nirvana.bench.rows import read_rows

    at.switch_page("pages/evidence.py").run()
    no_errors(at)
    path = bench.DEFAULT_OUT / "baselines-smollm2-135m.csv"
    rows = read_rows(path)
    assert rows, "benchmarks/baselines/baselines-smollm2-135m.csv is committed"
    table = next(d.value for d in at.dataframe if "Avg 7 (%)" in d.value.columns)
    measured = variants(rows)
    names = table["model"].tolist()
    assert set(names) == {v["variant"] for v in measured} | {v["variant"] for v in ablations("smollm2-135m")}
    assert names[0] == "dense"
    for v in measured:
        line = table[table["model"] == v["variant"]].iloc[0]
        if v.get("ppl_wikitext2") is not None:
            assert line["WikiText-2 ppl"] == round(v["ppl_wikitext2"], 2)
        if "average" in v:
            assert line["Avg 7 (%)"] == round(100 * v["average"], 1)
    flap = next(r for r in rows if r["variant"] == "flap s=0.2" and r["measure"] == "ppl")  # a known row, read raw
    assert table[table["model"] == "flap s=0.2"]["WikiText-2 ppl"].iloc[0] == round(float(flap["ppl_wikitext2"]), 2)
    assert any("bench baselines" in c.value and "same calibration batch" in c.value for c in at.caption)
    captions = [c for image in at.get("image") for c in image.captions]
    assert any(c.startswith("baselines-smollm2-135m.png") for c in captions), captions  # the committed PNG


def test_evidence_says_which_rows_of_a_partial_baselines_grid_are_missing(at, monkeypatch, tmp_path):
    import csv

    import nirvana.bench.baselines as bench
    from nirvana.bench.rows import read_rows

    rows = read_rows(bench.DEFAULT_OUT / "baselines-smollm2-135m.csv")
    kept = [r for r in rows if r["measure"] == "ppl" and r["variant"] in ("dense", "flap s=0.2")]
    with open(tmp_path / "baselines-smollm2-135m.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=bench.COLUMNS)
        writer.writeheader()
        writer.writerows(kept)
    monkeypatch.setattr(bench, "DEFAULT_OUT", tmp_path)
    at.switch_page("pages/evidence.py").run()
    no_errors(at)
    table = next(d.value for d in at.dataframe if "Avg 7 (%)" in d.value.columns)
    assert {"dense", "flap s=0.2"} <= set(table["model"]) and table["Avg 7 (%)"].iloc[0] != table["Avg 7 (%)"].iloc[0]
    warning = next(w.value for w in at.warning if "Partial grid" in w.value)
    config = bench.BaselinesConfig(best_gamma=bench.best_gammas("smollm2-135m", bench.SPARSITIES))
    assert f"2 of the {len(bench.plan_jobs(config))} rows" in warning
    assert "dense: the 7 zero-shot tasks, LAMBADA" in warning
    assert "flap s=0.2: the 7 zero-shot tasks, LAMBADA" in warning and "flap s=0.2 + LoRA: perplexity" in warning
    assert "llm-pruner s=0.5: perplexity + speed, the 7 zero-shot tasks, LAMBADA" in warning


def test_flap_on_a_model_whose_o_proj_has_a_bias_says_so(monkeypatch, tmp_path, smollm2, request):
    """A Llama with attention_bias (o_proj has a bias): FLAP's compensation has nowhere to go."""
    import streamlit as st
    from streamlit.testing.v1 import AppTest

    from tests.tiny import tiny_model

    tiny_model("llama", vocab_size=len(smollm2.tokenizer), attention_bias=True).save_pretrained(tmp_path / "biased")
    smollm2.tokenizer.save_pretrained(tmp_path / "biased")
    monkeypatch.setenv("NIRVANA_APP_MODEL", str(tmp_path / "biased"))
    monkeypatch.setenv("NIRVANA_DATA_DIR", str(request.getfixturevalue("small_data_dir")))
    st.cache_data.clear()
    st.cache_resource.clear()
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=TIMEOUT)
    at.switch_page("pages/prune.py").run()
    at.selectbox(key="prune_method").set_value("flap").run()
    at.button(key="prune_with_method").click().run()
    assert not at.exception
    assert any("o_proj already has a bias" in e.value and '{"bias": false}' in e.value for e in at.error)
    at.text_input(key="method_settings_flap").set_value('{"bias": false}').run()  # the way out the message names
    at.button(key="prune_with_method").click().run()
    no_errors(at)
    assert at.session_state["pruned"].report["added_bias_params"] == 0
    st.cache_data.clear()
    st.cache_resource.clear()


def test_a_flap_run_reopened_in_a_new_session_applies_with_its_biases(at):
    from streamlit.testing.v1 import AppTest

    from nirvana.models.architectures import layer_projections

    at.switch_page("pages/prune.py").run()
    at.selectbox(key="prune_method").set_value("flap").run()
    at.button(key="prune_with_method").click().run()
    no_errors(at)
    made = at.session_state["pruned"].plan
    fresh = AppTest.from_file(str(ROOT / "app.py"), default_timeout=TIMEOUT)  # as after a restart
    fresh.run()
    fresh.switch_page("pages/runs.py").run()
    fresh.button(key="load_run_plan").click().run()
    no_errors(fresh)
    fresh.switch_page("pages/prune.py").run()
    assert any("made by FLAP" in i.value for i in fresh.info)
    fresh.button(key="apply_plan").click().run()
    no_errors(fresh)
    pruned = fresh.session_state["pruned"]
    assert pruned.plan.layers == made.layers
    assert all(p.o_proj.bias is not None for p in layer_projections(pruned.model))  # the scores came from disk


def test_allocation_shows_slicegpt_as_a_kept_width_and_its_pca_spectrum(at, tiny6):
    """SliceGPT keeps every unit: a width and the variance it keeps, from the dense spectra (no new pass per slider)."""
    from nirvana.methods import method_config
    from nirvana.methods.run import data_plan
    from nirvana.methods.slicegpt.spectrum import dense_spectra

    compute(at, criterion="magnitude")
    at.switch_page("pages/allocation.py").run()
    at.multiselect(key="alloc_methods").set_value(["slicegpt"]).run()
    no_errors(at)
    assert any("rotation comes first" in i.value for i in at.info)  # its "how to read it" box
    names = {t["name"] for t in chart(at, "Kept units per layer")["data"]}
    assert "SliceGPT" not in names  # no per-layer head and neuron counts to draw
    batch = at.session_state["calib_batch"]
    spectra = dense_spectra(tiny6.model, batch)  # the disk cache the app filled
    for sparsity in (0.2, 0.35):
        at.slider(key="sparsity").set_value(sparsity).run()
        no_errors(at)
        width = data_plan(tiny6.model, "slicegpt", method_config("slicegpt"), sparsity, None).stats["slicegpt"]
        width = width["hidden_kept"]
        fig = chart(at, f"Variance kept by {width} of 32 hidden dimensions")
        lines = {t["name"]: decode(t["y"]).tolist() for t in fig["data"]}
        want = spectra.kept(width)
        assert lines["after attention (MLP input), dense spectrum"] == pytest.approx(want["attention"])
        assert lines["after the MLP (layer output), dense spectrum"] == pytest.approx(want["mlp"])
        assert metrics(at)["Hidden width kept"] == f"{width} of 32"
    table = next(d.value for d in at.dataframe if "hidden width kept" in d.value.columns)
    assert table["method"].tolist() == ["NIRVANA (this page's plan)", "SliceGPT"]
    assert table["hidden width kept"].tolist() == [32, width] and table["KV groups pruned"].iloc[1] == 0


def test_prune_and_compare_with_slicegpt_rotates_on_the_session_batch(at, tmp_path):
    from nirvana.checkpoints.pruned import load_pruned

    compute(at, criterion="magnitude")
    at.switch_page("pages/prune.py").run()
    at.selectbox(key="prune_method").set_value("slicegpt").run()
    at.slider(key="method_sparsity").set_value(0.3).run()
    at.button(key="prune_with_method").click().run()
    no_errors(at)
    pruned = at.session_state["pruned"]
    sliced = pruned.model.config.nirvana_sliced_hidden
    assert sliced["embedding"] < 32 and pruned.plan.settings.method == "slicegpt"
    assert pruned.plan.settings.calibration["hash"] == at.session_state["calib_batch"].hash
    fig = chart(at, f"Variance kept by {sliced['embedding']} of 32 hidden dimensions")
    crosses = [decode(t["y"]).tolist() for t in fig["data"] if t["name"].endswith("this prune")]
    assert crosses == [sliced["variance_kept"]["attention"], sliced["variance_kept"]["mlp"]]
    at.multiselect(key="speed_batches").set_value([1]).run()
    at.number_input(key="speed_new_tokens").set_value(2).run()
    at.number_input(key="speed_repeats").set_value(1).run()
    at.button(key="measure_speed").click().run()
    no_errors(at)
    ideal = float(metrics(at)["Ideal speed-up at 512 context"].rstrip("×"))
    assert ideal > 1.0  # FLOPs from the sliced modules, not the dense hidden size
    at.text_input(key="save_dir").set_value(str(tmp_path / "s30")).run()
    at.button(key="save_pruned").click().run()
    no_errors(at)
    assert load_pruned(tmp_path / "s30").model.config.nirvana_sliced_hidden["embedding"] == sliced["embedding"]


def test_the_sweep_takes_slicegpt_as_a_series_rotated_at_each_sparsity(at):
    sweep_kl(at, "0.2, 0.4", methods=["slicegpt"])
    rows, _ = at.session_state["sweep"]
    assert [(r["method"], r["sparsity"]) for r in rows] == [("dense", 0.0), ("slicegpt", 0.2), ("slicegpt", 0.4)]
    assert 0 < rows[1]["quality"] < rows[2]["quality"] and 1.0 < rows[1]["ideal_speedup"] < rows[2]["ideal_speedup"]
    quality = [t for t in chart(at, "Against sparsity")["data"] if t["xaxis"] == "x"]
    assert [t["name"] for t in quality] == ["SliceGPT"]


def test_tyr_prunes_on_the_session_batch_and_its_search_is_drawn_on_allocation(at):
    """Tyr has no unit scores and no slider plan: Prune & compare runs its search (progress, the KL per generation),
    and the Allocation page draws the kept units it found at that sparsity, saying what to do at another."""
    compute(at, criterion="magnitude")
    at.switch_page("pages/prune.py").run()
    at.selectbox(key="prune_method").set_value("tyr").run()
    no_errors(at)
    assert any(EXPLAIN["tyr"] in i.value for i in at.info)
    small = {"generations": 2, "offspring": 4, "stage_tokens": [32, 64], "survivors": [2, 1], "kl_topk": 16}
    at.text_input(key="method_settings_tyr").set_value(json.dumps(small)).run()
    at.slider(key="method_sparsity").set_value(0.3).run()
    at.button(key="prune_with_method").click().run()
    no_errors(at)
    pruned = at.session_state["pruned"]
    assert pruned.plan.settings.method == "tyr" and len(pruned.plan.stats["tyr"]["iterations"]) == 1
    assert pruned.plan.settings.calibration["hash"] == at.session_state["calib_batch"].hash
    assert any("best sparse KL to dense per generation" in m.value for m in at.markdown)
    at.switch_page("pages/allocation.py").run()
    at.multiselect(key="alloc_methods").set_value(["tyr"]).run()
    at.text_input(key="method_settings_tyr").set_value(json.dumps(small)).run()
    at.slider(key="sparsity").set_value(0.3).run()
    no_errors(at)
    bars = {t["name"]: t for t in chart(at, "Kept units per layer")["data"]}
    assert any(name.startswith("Tyr-the-Pruner") for name in bars), list(bars)
    at.slider(key="sparsity").set_value(0.35).run()
    no_errors(at)
    assert any("Searched this session with these settings: 0.30" in i.value for i in at.info)
