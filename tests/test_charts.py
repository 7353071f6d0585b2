"""Figure builders: the data inside each figure is the data given (known answers), hovers and overlays."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from conftest import decode

from nirvana import charts
from nirvana.models.shapes import model_shape
from nirvana.pruning.allocation import Allocation, allocate
from nirvana.scoring.scores import Scores


def as_json(fig) -> dict:
    return json.loads(fig.to_json())


@pytest.fixture
def scores():
    gen = torch.Generator().manual_seed(0)
    attn = torch.rand((3, 2), generator=gen) * 10 ** torch.arange(3).float()[:, None]  # (L=3, Hkv=2)
    mlp = torch.rand((3, 10), generator=gen)  # (L=3, I=10)
    return attn, mlp


def test_kv_heatmap_is_log10_of_scores_with_raw_scores_in_hover(scores):
    attn, _ = scores
    spec = as_json(charts.kv_heatmap(attn))
    trace = spec["data"][0]
    np.testing.assert_allclose(decode(trace["z"]), np.log10(attn.numpy()), rtol=1e-5)
    np.testing.assert_allclose(decode(trace["customdata"]), attn.numpy(), rtol=1e-6)
    assert "layer %{y}" in trace["hovertemplate"] and "KV group %{x}" in trace["hovertemplate"]
    assert spec["layout"]["yaxis"]["title"]["text"] == "layer"
    bar = trace["colorbar"]
    values = [float(t) for t in bar["ticktext"]]  # labels are scores; positions are their log10
    np.testing.assert_allclose(decode(bar["tickvals"]), np.log10(values), rtol=1e-6)
    assert min(values) >= attn.min().item() and max(values) <= attn.max().item()


def test_zero_scores_stay_finite_on_the_log_scale():
    z = charts.log10_scores(np.array([[0.0, 1e-3], [1.0, 10.0]]))
    assert np.isfinite(z).all() and z[0, 0] == pytest.approx(-4.0)  # a decade below the smallest positive


def test_kv_overlay_marks_exactly_the_pruned_cells(scores):
    attn, _ = scores
    pruned = np.array([[True, False], [False, False], [False, True]])
    spec = as_json(charts.kv_heatmap(attn, pruned))
    overlay, crosses = spec["data"][1], spec["data"][2]
    np.testing.assert_array_equal(decode(overlay["z"]), pruned.astype(np.float32))
    assert sorted(zip(decode(crosses["y"]).tolist(), decode(crosses["x"]).tolist())) == [(0, 0), (2, 1)]


def test_sorted_neuron_bins_are_rank_ordered_means(scores):
    _, mlp = scores
    mean, frac, edges = charts.bin_neurons(mlp, mode="sorted", bins=5)
    ordered = np.sort(mlp.numpy(), axis=1)[:, ::-1]
    np.testing.assert_allclose(mean, ordered.reshape(3, 5, 2).mean(axis=2), rtol=1e-6)
    assert frac is None and edges.tolist() == [[0, 1], [2, 3], [4, 5], [6, 7], [8, 9]]
    assert (np.diff(mean, axis=1) <= 1e-7).all()  # best first


def test_index_bins_follow_positions_and_pruned_fraction(scores):
    _, mlp = scores
    pruned = np.zeros((3, 10), dtype=bool)
    pruned[1, :3] = True  # layer 1, neurons 0-2
    mean, frac, _ = charts.bin_neurons(mlp, pruned, mode="index", bins=5)
    np.testing.assert_allclose(mean, mlp.numpy().reshape(3, 5, 2).mean(axis=2), rtol=1e-6)
    assert frac[1].tolist() == [1.0, 0.5, 0.0, 0.0, 0.0] and frac[0].sum() == 0 and frac[2].sum() == 0


def test_sorted_overlay_puts_pruned_neurons_at_the_low_end(scores):
    """A plan prunes a layer's lowest-scoring neurons, so in the sorted view they sit at the right."""
    _, mlp = scores
    pruned = np.zeros((3, 10), dtype=bool)
    for layer in range(3):
        pruned[layer, np.argsort(mlp[layer].numpy())[:4]] = True
    spec = as_json(charts.neuron_heatmap(mlp, pruned, mode="sorted", bins=10))
    overlay = decode(spec["data"][1]["z"])
    np.testing.assert_array_equal(overlay, np.tile([0] * 6 + [1] * 4, (3, 1)))
    assert "pruned %{customdata[3]:.0%}" in spec["data"][0]["hovertemplate"]


def test_neuron_heatmap_rejects_unknown_mode(scores):
    with pytest.raises(ValueError, match="sorted"):
        charts.bin_neurons(scores[1], mode="random")


def test_layer_totals_are_sums_per_layer(scores):
    attn, mlp = scores
    spec = as_json(charts.layer_totals(attn, mlp))
    np.testing.assert_allclose(decode(spec["data"][0]["y"]), attn.sum(1).numpy(), rtol=1e-6)
    np.testing.assert_allclose(decode(spec["data"][1]["y"]), mlp.sum(1).numpy(), rtol=1e-6)
    assert spec["layout"]["yaxis"]["type"] == "log"


def test_kept_bars_and_masks_match_a_real_plan(tiny_llama):
    shape = model_shape(tiny_llama)
    gen = torch.Generator().manual_seed(1)
    scores = Scores(
        {"attn": torch.rand((2, 2), generator=gen), "mlp": torch.rand((2, 48), generator=gen)}, "random", "fp"
    )
    plan = allocate(scores, shape, Allocation(0.5, 1.0, align=8))
    uniform = allocate(scores, shape, Allocation(0.5, 1.0, align=8, kind="uniform"))
    spec = as_json(
        charts.kept_units_bars(
            plan.kept_kv_groups, plan.kept_neurons, 2, 48, uniform.kept_kv_groups, uniform.kept_neurons
        )
    )
    ys = [decode(t["y"]).tolist() for t in spec["data"]]
    assert ys == [plan.kept_kv_groups, plan.kept_neurons, uniform.kept_kv_groups, uniform.kept_neurons]
    attn_mask, mlp_mask = charts.pruned_masks(plan)
    assert (~mlp_mask).sum(1).tolist() == plan.kept_neurons and (~attn_mask).sum(1).tolist() == plan.kept_kv_groups
    assert int(mlp_mask.sum()) == plan.stats["neurons_pruned"]


def test_pareto_front_known_answer():
    speed = [1.0, 2.0, 3.0, 2.5, 1.5]
    ppl = [10.0, 12.0, 20.0, 11.0, 15.0]
    # (2.0, 12) is beaten by (2.5, 11); (1.5, 15) by (2.5, 11); the others trade off.
    assert charts.pareto_front(speed, ppl) == [0, 3, 2]
    spec = as_json(charts.pareto_chart(speed, ppl, list("abcde"), x_title="tok/s", y_title="ppl", selected=1))
    assert decode(spec["data"][0]["customdata"]).tolist() == [0, 1, 2, 3, 4]
    assert decode(spec["data"][1]["x"]).tolist() == [1.0, 2.5, 3.0]
    assert decode(spec["data"][2]["x"]).tolist() == [2.0]


def test_sweep_chart_marks_gamma_star():
    spec = as_json(
        charts.sweep_chart(
            [0.5, 1, 2], {"KL": [0.3, 0.2, 0.25]}, x_title="γ", title="t", marker_x=2.25, marker_label="γ*"
        )
    )
    assert decode(spec["data"][0]["y"]).tolist() == [0.3, 0.2, 0.25]
    assert any(s.get("x0") == 2.25 for s in spec["layout"]["shapes"])
    assert spec["layout"]["annotations"][-1]["text"] == "γ*"


def test_bar_chart_highlights_one_bar():
    spec = as_json(charts.bar_chart(["a", "b", "c"], [3, 1, 2], 1, title="KL", y_title="nats"))
    colours = spec["data"][0]["marker"]["color"]
    assert colours[1] == charts.PRUNED and colours[0] == colours[2] == charts.UNIFORM


def test_charts_module_does_not_import_streamlit():
    import ast
    from pathlib import Path

    tree = ast.parse(Path(charts.__file__).read_text())
    names = {a.name for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom)) for a in n.names}
    modules = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert not any("streamlit" in (m or "") for m in names | modules)
