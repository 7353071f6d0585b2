"""Time planning (`nirvana.measure.duration`): the machine's rate measured once and cached, the cost model's
known answers and orderings, the estimate's wording, and the Saliency page saying it before scoring."""

from __future__ import annotations

import json

import pytest
import torch
from test_app_pages import app_env, small_data_dir  # noqa: F401 (fixtures, requested by name)

from nirvana.measure import duration
from nirvana.measure.flops import flops_breakdown
from nirvana.models.shapes import model_shape
from tests.tiny import tiny_model


def test_the_rate_is_measured_once_then_read_from_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("NIRVANA_CACHE_DIR", str(tmp_path))
    rate = duration.matmul_rate()
    assert rate > 1e6  # any machine multiplies faster than a megaflop
    (path,) = (tmp_path / "machine").glob("matmul-*.json")
    record = json.loads(path.read_text())
    assert record["flops_per_s"] == rate and record["threads"] == torch.get_num_threads()
    record["flops_per_s"] = 123.0
    path.write_text(json.dumps(record))
    assert duration.matmul_rate() == 123.0  # read, not measured again
    assert duration.matmul_rate(refresh=True) > 1e6


def test_known_answer_and_the_steps_order():
    shape = model_shape(tiny_model("llama"))
    parts = flops_breakdown(shape, (16 + 1) / 2)
    tokens, rate = 4 * 16, 1e9
    grad = duration.estimate_seconds(shape, "gradient scoring", tokens, 16, rate)
    expected = tokens * 3 * (parts["projections"] + parts["attention"] + parts["lm_head"])
    expected /= rate * duration.STEPS["gradient scoring"].efficiency
    assert grad == pytest.approx(expected)
    forward = duration.estimate_seconds(shape, "forward scoring", tokens, 16, rate)
    evaluation = duration.estimate_seconds(shape, "evaluation", tokens, 16, rate)
    body, head = parts["projections"] + parts["attention"], parts["lm_head"]
    assert forward == pytest.approx(tokens * body / (rate * duration.STEPS["forward scoring"].efficiency))
    assert evaluation == pytest.approx(tokens * (body + head) / (rate * duration.STEPS["evaluation"].efficiency))
    assert evaluation < grad
    assert duration.estimate_seconds(shape, "evaluation", 2 * tokens, 16, rate) == pytest.approx(2 * evaluation)
    with pytest.raises(KeyError, match="known: gradient scoring"):
        duration.estimate_seconds(shape, "sweeping", tokens, 16, rate)


@pytest.mark.parametrize(
    "seconds, text",
    [(0.2, "about 1 s"), (7.4, "about 7 s"), (42, "about 40 s"), (300, "about 5 min"), (9000, "about 2.5 h")],
)
def test_about_says_an_estimate_with_its_precision(seconds, text):
    assert duration.about(seconds) == text


def test_scoring_step_of_criteria_and_methods():
    from nirvana.methods import METHODS
    from nirvana.scoring.criteria import CRITERIA

    step = {n: duration.scoring_step(c.uses_gradients, c.needs_data) for n, c in CRITERIA.items()}
    assert step["nirvana"] == step["taylor"] == "gradient scoring" and step["wanda"] == "forward scoring"
    assert step["magnitude"] is None and step["random"] is None
    assert duration.scoring_step(METHODS["flap"].uses_gradients, METHODS["flap"].needs_data) == "forward scoring"


def test_sweep_and_calibration_search_estimates():
    from nirvana.pruning.allocation import Allocation
    from nirvana.search.calibration import AnchorSpec, selection_seconds
    from nirvana.search.sweep import SweepSettings, sweep_seconds

    shape, rate = model_shape(tiny_model("llama")), 1e9
    one = SweepSettings((0.2,), (), Allocation(0.2), "perplexity", tokens=512, speed=False, dense=False)
    dense_eval = duration.estimate_seconds(shape, "evaluation", 512, 512, rate)
    assert sweep_seconds(shape, one, rate) == pytest.approx((1 - 0.2 * duration.block_share(shape)) * dense_eval)
    more = SweepSettings((0.1, 0.2, 0.5), (1.0, 2.0), Allocation(0.2), "perplexity", tokens=512)
    assert sweep_seconds(shape, more, rate) > 5 * sweep_seconds(shape, one, rate)  # 6 points, with decode timing
    assert sweep_seconds(shape, SweepSettings((0.2,), (), Allocation(0.2), "zeroshot7"), rate) is None
    anchor = AnchorSpec(samples=8, seq_len=16)
    reference = duration.estimate_seconds(shape, "evaluation", 8 * 16, 16, rate)
    scoring = duration.estimate_seconds(shape, "gradient scoring", 4 * 32, 32, rate)
    assert selection_seconds(shape, 3, 4, 32, anchor, rate) == pytest.approx(reference + 3 * (scoring + reference))


@pytest.mark.usefixtures("app_env")
def test_the_sweep_and_calibration_pages_say_how_long_before_they_start():
    from test_app_pages import compute, no_errors, started_app

    at = compute(started_app(), criterion="magnitude")
    at.switch_page("pages/sweep.py").run()
    no_errors(at)
    assert any("points (the dense model first" in c.value and "on this machine" in c.value for c in at.caption)
    at.switch_page("pages/calibration.py").run()
    no_errors(at)
    assert any(c.value.startswith("The selection takes about") for c in at.caption)
