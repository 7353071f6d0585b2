"""What a first-time visitor hit in a browser (issue 43), on the tiny model: every bad value the Sweep page
accepts gives a clean message, the cache-hit scoring time, the paper table's gaps, the calibration note, the
next-step links."""

from __future__ import annotations

import pytest

from tests.test_app_pages import app_env, at, compute, no_errors, small_data_dir, tiny  # noqa: F401


def sweep_page(at):  # noqa: F811
    compute(at, criterion="magnitude")
    at.switch_page("pages/sweep.py").run()
    no_errors(at)
    return at


@pytest.mark.parametrize(
    ("key", "text", "bad"),
    [
        ("sweep_sparsities", "0.1, 1.5", "`1.5`"),
        ("sweep_sparsities", "0.1, -0.2", "`-0.2`"),
        ("sweep_sparsities", "0.1, abc", "`abc`"),
        ("sweep_sparsities", "nan", "`nan`"),
        ("sweep_gammas", "0", "`0`"),
        ("sweep_gammas", "abc, 2", "`abc`"),
        ("sweep_gammas", "-1, inf", "`-1`, `inf`"),
    ],
)
def test_sweep_page_rejects_every_bad_value_with_a_clean_message(at, key, text, bad):  # noqa: F811
    sweep_page(at)
    at.text_input(key=key).set_value(text).run()
    assert not at.exception, [e.value for e in at.exception]
    [error] = [e.value for e in at.error]
    assert bad in error and "not accepted" in error and "e.g." in error
    assert ("[0, 0.95]" if key == "sweep_sparsities" else "positive number") in error
    assert "run_sweep" not in [b.key for b in at.button]  # nothing to run until the entries are fixed


def test_sweep_page_without_a_swept_point_says_what_to_enter(at):  # noqa: F811
    sweep_page(at)
    at.text_input(key="sweep_sparsities").set_value("0").run()
    at.text_input(key="sweep_gammas").set_value("").run()
    no_errors(at)
    assert any("at least one sparsity above 0" in i.value for i in at.info)


def test_sweep_page_ignores_the_disabled_gamma_box_of_a_baseline(at):  # noqa: F811
    sweep_page(at)
    at.text_input(key="sweep_gammas").set_value("abc").run()
    at.multiselect(key="sweep_methods").set_value(["flap"]).run()
    no_errors(at)
    assert "run_sweep" in [b.key for b in at.button]


def test_generations_keep_newlines_and_indentation(at, monkeypatch):  # noqa: F811
    import ui.evals
    from tests.test_app_pages import apply_a_plan

    code = {"dense": "def f(n):\n    if n < 2:\n        return n", "pruned": "def f(n):\n    return n"}
    apply_a_plan(at, 0.5)
    pruned_key = at.session_state["pruned"].model_key

    def generated(model, tokenizer, model_key, prompts, *args, **kwargs):  # code, as a code model writes it
        output = code["pruned" if model_key == pruned_key else "dense"]
        return [
            {"id": i, "prompt": p, "output": output, "new_tokens": 9, "mode": "greedy"} for i, p in enumerate(prompts)
        ]

    monkeypatch.setattr(ui.evals, "generate", generated)
    at.text_area(key="prompts").set_value("def fibonacci(n):").run()
    at.button(key="generate").click().run()
    no_errors(at)
    assert [c.value for c in at.code] == [code["dense"], code["pruned"]]
    assert not any("return n" in d.value.to_string() for d in at.dataframe)  # no table cell: newlines collapse there


def test_saliency_says_cached_for_a_memo_hit_with_the_earlier_time(at):  # noqa: F811
    compute(at, criterion="magnitude")
    [first] = [m for m in at.metric if m.label == "Scoring time"]
    assert first.value.endswith(" s") and not first.delta
    at.button(key="compute_saliency").click().run()  # the same scores again: the shared memo's
    no_errors(at)
    [again] = [m for m in at.metric if m.label == "Scoring time"]
    assert again.value == "cached" and again.delta == f"computed in {first.value} earlier"


def test_paper_reference_tables_say_not_reported_instead_of_none(at):  # noqa: F811
    from tests.test_app_pages import apply_a_plan

    apply_a_plan(at, 0.5)
    tables = [d.value for d in at.dataframe if "hardware" in d.value.columns or "WikiText-2 perplexity" in d.value]
    assert len(tables) == 3
    for table in tables:
        assert not table.isna().any().any() and "None" not in table.astype(str).to_numpy()
    accuracy, unverified = tables[1], tables[2]
    assert accuracy["llm_pruner"].tolist()[-1] == "not reported"
    assert unverified["WikiText-2 perplexity"].tolist() == ["8.5", "13.4", "≈ 49"]


def test_evidence_lists_every_benchmarked_model_and_meets_the_best_other_method(at):  # noqa: F811
    from tests.test_app_pages import metrics

    at.switch_page("pages/evidence.py").run()
    no_errors(at)
    picker = at.selectbox(key="evidence_model")
    assert picker.options[0].startswith("smollm2-135m (baselines, quality, accuracy, γ)")
    assert any(o.startswith("gemma3-270m (baselines") for o in picker.options)
    assert any(o.startswith("qwen2.5-coder-0.5b (baselines") for o in picker.options)
    assert metrics(at)["NIRVANA beats the best other criterion"] == "0 of 4"  # loss-Taylor wins every sparsity
    table = next(d.value for d in at.dataframe if "best other" in d.value.columns)
    baselines = table[table["source"] == "benchmarks/baselines/baselines-smollm2-135m.csv"]
    first = baselines[baselines["measure"] == "WikiText-2 perplexity"].iloc[0]
    assert first["best other"] == "llm-pruner s=0.2" and first["better"] == "LLM-Pruner"  # not magnitude
    quality = table[table["source"] == "benchmarks/quality/quality-smollm2-135m.csv"]
    assert set(quality["best other"]) == {"taylor scores, NIRVANA's allocation"}
    picker.set_value("gemma3-270m").run()
    no_errors(at)
    assert any("No quality benchmark for `gemma3-270m`" in i.value for i in at.info)
    table = next(d.value for d in at.dataframe if "best other" in d.value.columns)
    assert set(table["source"]) == {"benchmarks/baselines/baselines-gemma3-270m.csv"}
    assert any("bench baselines --model gemma3-270m" in c.value for c in at.caption)
    assert any("No γ benchmark for `gemma3-270m`" in c.value for c in at.caption)


def note(at) -> list[str]:  # noqa: F811
    return [c.value for c in at.caption if "python -m nirvana prune` uses" in c.value]


def test_allocation_and_prune_say_when_the_cli_would_calibrate_differently(at):  # noqa: F811
    compute(at)  # the app's CPU default: N = 8 x T = 128
    at.switch_page("pages/allocation.py").run()
    no_errors(at)
    [line] = note(at)
    assert "N = 8 × T = 128 (the app's CPU default)" in line and "N = 32 × T = 128" in line
    assert "`--samples 8`" in line
    at.switch_page("pages/prune.py").run()
    no_errors(at)
    assert note(at) == [line]
    compute(at, calib_samples=32, calib_seed=3)
    at.switch_page("pages/allocation.py").run()
    [line] = note(at)
    assert "N = 32 × T = 128, seed 3;" in line and "`--seed 3`" in line and "CPU default" not in line
    compute(at, calib_seed=0)  # N = 32, seed 0: what the CLI does
    at.switch_page("pages/allocation.py").run()
    assert note(at) == []


def links(at) -> list[str]:  # noqa: F811
    """The labels of the page's links to other pages, sidebar menu excluded (those are the menu's bare titles)."""
    return [el.proto.label for el in at.get("page_link") if ": " in el.proto.label]


def test_every_main_result_ends_with_a_next_step_link(at):  # noqa: F811
    from tests.test_app_pages import apply_a_plan, sweep_kl

    compute(at, criterion="magnitude")
    assert links(at) == ["3 · Allocation: choose the sparsity and γ, and see which units go"]
    at.switch_page("pages/allocation.py").run()
    no_errors(at)
    assert [x.split(":")[0] for x in links(at)] == ["5 · Prune & compare"]
    sweep_kl(at, "0.5", "2")
    assert [x.split(":")[0] for x in links(at)] == ["7 · Evidence"]
    assert any(m.value.startswith("**Next step: pick a point above") for m in at.markdown)
    apply_a_plan(at, 0.5)
    assert [x.split(":")[0] for x in links(at)] == ["6 · Sweep", "7 · Evidence"]
    at.switch_page("pages/calibration.py").run()
    for key, value in (("kl_candidates", 2), ("kl_samples", 2), ("kl_seq_len", 32), ("kl_anchor", 2)):
        at.number_input(key=key).set_value(value).run()
    at.button(key="run_kl").click().run()
    no_errors(at)
    assert [x.split(":")[0] for x in links(at)] == ["3 · Allocation", "5 · Prune & compare"]
