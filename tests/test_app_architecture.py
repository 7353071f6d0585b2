"""The Allocation page's architecture view: every layer's attention and MLP to scale, kept against removed."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import decode
from test_app_pages import app_env, chart, compute, no_errors, small_data_dir, started_app  # noqa: F401 (fixtures)

from nirvana.models.shapes import model_shape
from nirvana.pruning.allocation import Allocation, allocate
from nirvana.scoring.criteria import compute_scores
from tests.tiny import tiny_model
from ui import architecture


def test_the_blocks_are_the_plans_widths_to_scale_and_a_layer_lists_its_units():
    model = tiny_model("llama")
    shape, scores = model_shape(model), compute_scores(model, "magnitude", None, use_cache=False)
    plan = allocate(scores, shape, Allocation(0.5, align=1))
    fig = architecture.figure(shape, plan, scores)
    names = [t.name for t in fig.data]
    assert names == ["attention kept", "attention removed", "MLP kept", "MLP removed"]
    traces = {t.name: {k: np.asarray(getattr(t, k), dtype=float) for k in ("x", "base")} for t in fig.data}
    attn_unit, mlp_unit = shape.unit_params()
    kept = np.array(plan.kept_kv_groups) * attn_unit / 1e6
    np.testing.assert_allclose(traces["attention kept"]["x"], kept)
    np.testing.assert_allclose(
        traces["attention kept"]["x"] + traces["attention removed"]["x"], np.array(shape.num_kv_heads) * attn_unit / 1e6
    )
    np.testing.assert_allclose(traces["MLP kept"]["x"], np.array(plan.kept_neurons) * mlp_unit / 1e6)
    np.testing.assert_allclose(traces["MLP removed"]["base"], traces["MLP kept"]["base"] + traces["MLP kept"]["x"])
    table = architecture.units_table(1, "mlp", plan, scores)
    assert len(table) == shape.intermediate[1] and int(table["kept"].sum()) == plan.kept_neurons[1]
    assert set(table.loc[table["kept"], "neuron"]) == set(plan.layers[1].kept_neurons)
    assert table["score"].is_monotonic_decreasing
    attn = architecture.units_table(0, "attention", plan, scores)
    assert set(attn.loc[attn["kept"], "KV group"]) == set(plan.layers[0].kept_kv_groups)


@pytest.mark.usefixtures("app_env")
def test_the_allocation_page_draws_it_and_follows_the_slider():
    at = compute(started_app(), criterion="magnitude")
    at.switch_page("pages/allocation.py").run()
    for sparsity in (0.2, 0.5):
        at.slider(key="sparsity").set_value(sparsity).run()
        no_errors(at)
        kept = decode(chart(at, "Where the width went")["data"][2]["x"])  # MLP kept, per layer
        plan = at.session_state["plan"]
        hidden = plan.model["hidden_size"]
        np.testing.assert_allclose(kept, np.array(plan.kept_neurons) * 3 * hidden / 1e6)
