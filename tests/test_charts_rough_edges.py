"""The charts a first-time visitor read wrong (issue 43): repeated colours, bars on log axes, legends on
titles, the Pareto chart's methods and marked point."""

from __future__ import annotations

import csv
import json

import pytest
from conftest import decode

from nirvana import charts
from tests.test_app_pages import ROOT


def as_json(fig) -> dict:
    return json.loads(fig.to_json())


def test_series_styles_never_repeat_a_colour_and_mark_the_level():
    series = [(c, s) for s in (0.2, 0.5) for c in ("nirvana", "taylor", "wanda", "wanda", "magnitude", "random")]
    series += [("dense", 0.0), ("nirvana", 0.2), ("nirvana", 0.5), ("unknown", 0.5)]
    styles = charts.series_styles(series, charts.CRITERION_COLORS)
    colors = [s["color"] for s in styles]
    assert len(set(colors)) == len(colors) == 16
    assert styles[0]["symbol"] == styles[1]["symbol"] != styles[6]["symbol"]  # same sparsity, same marker
    assert styles[0]["pattern"] == "" and styles[6]["pattern"] == "/"
    assert charts.shade("#000000", 0.5) == "#808080" and charts.shade("#ffffff", -1) == "#000000"


def test_evidence_accuracy_chart_gives_every_variant_its_own_colour():
    from ui.accuracy import evidence_chart

    with open(ROOT / "benchmarks/accuracy/accuracy-smollm2-135m.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    data = as_json(evidence_chart(rows))["data"]
    assert len(data) >= 15
    colors = [t["marker"]["color"] for t in data]
    assert len(set(colors)) == len(colors)
    pattern = {t["name"]: t["marker"]["pattern"]["shape"] for t in data}
    assert pattern["nirvana s=0.2 gamma*"] == pattern["wanda s=0.2 gamma*"] != pattern["nirvana s=0.5 gamma*"]


def every_figure() -> dict[str, object]:
    """One figure of every builder in nirvana/charts.py (and the app's accuracy and loss charts)."""
    import numpy as np

    from nirvana.recovery.train import RecoveryStep
    from ui import accuracy, recovery

    attn, mlp = np.array([[1.0, 10.0], [100.0, 0.5]]), np.arange(1, 25, dtype=float).reshape(2, 12)
    rows = [
        {"criterion": c, "allocation": a, "sparsity": s, "value": v}
        for c in ("nirvana", "magnitude")
        for a in ("global", "uniform")
        for s, v in ((0.2, 20.0), (0.5, 80.0))
    ]
    result = {"tasks": {"piqa": {"acc": 0.6, "acc_stderr": 0.02}, "mbpp_bpb": {"bpb": 1.2, "bpb_stderr": 0.1}}}
    with open(ROOT / "benchmarks/accuracy/accuracy-smollm2-135m.csv", newline="") as f:
        acc_rows = list(csv.DictReader(f))
    step = RecoveryStep(1, 2, 3.0, 3.1, 10, 1.0, 1.0, 1.0)
    return {
        "kv_heatmap": charts.kv_heatmap(attn, attn > 5),
        "neuron_heatmap": charts.neuron_heatmap(mlp, mlp > 5),
        "layer_totals": charts.layer_totals(attn, mlp),
        "kept_units_bars": charts.kept_units_bars(
            [1, 2],
            [6, 8],
            2,
            12,
            [1, 1],
            [7, 7],
            compare=("taylor", [2, 1], [8, 6]),
            methods=[("flap", [2, 2], [4, 9])],
        ),
        "kind_kept_bars": charts.kind_kept_bars({"a": [1, 2]}, {"a": 2}, {"a": "A"}),
        "bar_chart": charts.bar_chart(["a", "b"], [0.1, 0.2], 1, title="KL", y_title="KL"),
        "sweep_chart": charts.sweep_chart(
            [0.1, 0.5],
            {"perplexity": [20, 90]},
            x_title="s",
            title="t",
            marker_x=0.2,
            marker_label="γ*",
            log_y=("perplexity",),
        ),
        "methods_sweep_chart": charts.methods_sweep_chart(
            {"nirvana": ([0, 0.5], {"perplexity": [20, 90]}), "flap": ([0, 0.5], {"perplexity": [20, 95]})},
            x_title="s",
            title="t",
            log_y=("perplexity",),
        ),
        "criteria_chart": charts.criteria_chart(rows, y_title="perplexity", reference=18.0),
        "variance_kept_chart": charts.variance_kept_chart(
            {"attention": [0.9, 0.8], "mlp": [0.7, 0.6], "embedding": 0.95},
            4,
            8,
            {"attention": [0.9, 0.7], "mlp": [0.6, 0.5]},
        ),
        "gamma_chart": charts.gamma_chart([{"sparsity": 0.2, "gamma": g, "kl": 1 / g} for g in (0.5, 1, 2)], 1.0),
        "pareto_chart": charts.pareto_chart(
            [1.0, 1.5, 2.0], [20.0, 30.0, 90.0], ["dense", "a", "b"], x_title="speed", y_title="perplexity"
        ),
        "accuracy.chart": accuracy.chart(result, result),
        "accuracy.bpb_chart": accuracy.bpb_chart(result, result),
        "accuracy.evidence_chart": accuracy.evidence_chart(acc_rows),
        "recovery.loss_chart": recovery.loss_chart([step]),
    }


FIGURES = every_figure()


def _axis(layout: dict, ref: str) -> dict:
    """The layout axis a trace's `xaxis`/`yaxis` reference ("y2" -> layout["yaxis2"])."""
    return layout.get(ref[0] + "axis" + ref[1:], {})


@pytest.mark.parametrize("name", list(FIGURES))
def test_no_bar_stands_on_a_log_axis(name):
    spec = as_json(FIGURES[name])
    for trace in spec["data"]:
        if trace["type"] == "bar":
            axis = _axis(spec["layout"], trace.get("yaxis", "y"))
            assert axis.get("type", "linear") != "log", f"{name}: a bar on a log axis ({trace.get('name')})"


def test_the_per_layer_totals_are_dots_on_a_log_axis():
    spec = as_json(FIGURES["layer_totals"])
    assert [t["type"] for t in spec["data"]] == ["scatter", "scatter"] and spec["layout"]["yaxis"]["type"] == "log"
    assert all("markers" in t["mode"] for t in spec["data"])


@pytest.mark.parametrize("name", list(FIGURES))
def test_every_legend_sits_at_the_right_below_the_title(name):
    layout = as_json(FIGURES[name])["layout"]
    assert layout["title"]["text"] and layout["title"]["x"] == 0.01  # the title: top left, in the top margin
    if layout.get("showlegend") is False:
        return
    legend = layout.get("legend", {})
    assert {k: legend.get(k) for k in charts.LEGEND} == charts.LEGEND, f"{name}: legend {legend}"


def test_pareto_chart_has_a_colour_and_marker_per_method_and_log_perplexity():
    speed, ppl = [10.0, 12.0, 15.0, 13.0, 14.0], [20.0, 30.0, 90.0, 35.0, 50.0]
    fig = charts.pareto_chart(
        speed,
        ppl,
        ["dense", "a", "b", "c", "d"],
        x_title="decode tokens/s",
        y_title="WikiText-2 perplexity",
        methods=["dense", "nirvana", "nirvana", "flap", "llm-pruner"],
        sparsities=[0.0, 0.2, 0.5, 0.2, 0.5],
        gammas=[None, 2.25, 2.25, None, float("nan")],
        log_y=True,
        highlight=(13.0, 35.0, "recommended"),
    )
    spec = as_json(fig)
    data = {t["name"]: t for t in spec["data"]}
    assert list(data) == ["dense", "NIRVANA", "FLAP", "LLM-Pruner", "Pareto front", "recommended"]
    symbols = [data[n]["marker"]["symbol"] for n in ("dense", "NIRVANA", "FLAP", "LLM-Pruner")]
    colors = [data[n]["marker"]["color"] for n in ("dense", "NIRVANA", "FLAP", "LLM-Pruner")]
    assert symbols == ["star", "circle", "diamond", "square"] and len(set(colors)) == 4
    assert colors[1:] == [charts.METHOD_COLORS[m] for m in ("nirvana", "flap", "llm-pruner")]
    assert spec["layout"]["yaxis"]["type"] == "log"
    nirvana = data["NIRVANA"]
    assert decode(nirvana["customdata"]).tolist() == [1, 2]  # the point index, what a click on the page reads
    assert nirvana["hovertemplate"].startswith("%{text}<br>decode tokens/s %{x:.4g}<br>WikiText-2 perplexity")
    assert nirvana["text"] == ["a<br>sparsity 0.20<br>γ 2.25", "b<br>sparsity 0.50<br>γ 2.25"]
    assert data["FLAP"]["text"] == ["c<br>sparsity 0.20"] and data["LLM-Pruner"]["text"] == ["d<br>sparsity 0.50"]
    star = data["recommended"]
    assert star["x"] == [13.0] and star["text"] == ["recommended"] and star["marker"]["symbol"] == "star"
    linear = as_json(charts.pareto_chart(speed, ppl, list("abcde"), x_title="x", y_title="KL"))
    assert linear["layout"]["yaxis"]["type"] == "linear" and linear["data"][0]["name"] == "plans"
