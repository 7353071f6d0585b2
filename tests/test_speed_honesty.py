"""A speed-up above its FLOPs ideal is not a result (`nirvana.measure.speed_check`): the rule on known ratios,
`compare_speeds` driven by a fake clock (a slowed dense round, all of them, none), the committed benchmarks'
flag (`nirvana.bench.baselines_report.speed_flag`) on made-up rows, and the Prune page's warning and Re-measure.

No figure here depends on how fast this machine is: the timed run (`nirvana.measure.speed._run_once`) is
replaced by one that returns set durations.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from test_app_pages import app_env, apply_a_plan, at, compute, metrics, no_errors, small_data_dir  # noqa: F401

import nirvana.measure.speed as speed
from nirvana.bench.baselines_report import speed_flag, speed_ideal
from nirvana.measure.flops import phase_flops
from nirvana.measure.speed_check import (
    DISTURBED,
    MESSAGES,
    NOISY,
    OK,
    check_against_reference,
    judge,
    round_ratios,
    worst,
)
from tests.tiny import tiny_model

PROMPT, NEW = 8, 4  # prompt tokens, new tokens of the fake measurements


# ---- the rule on known ratios ----------------------------------------------------------------------------------------


def test_the_rule_on_known_ratios():
    # every round 3.5x against an ideal of 1.25x: disturbed, with the message the app and reports show
    check = judge([3.4, 3.5, 3.6, 3.5, 3.5], ideal=1.25)
    assert check.verdict == DISTURBED and not check.ok
    assert check.message == "disturbed: the machine was busy during the measurement; re-measure"
    assert (check.ratio, check.low, check.high, check.rounds) == (3.5, 3.5, 3.5, 5)
    # below the ideal and the rounds agree: a result
    assert judge([1.10, 1.12, 1.15, 1.13, 1.11], ideal=1.25).verdict == OK
    # up to 10% above the ideal is accepted (timer noise, cache); beyond it, one figure is disturbed
    assert judge([1.37], ideal=1.25).verdict == OK and judge([1.38], ideal=1.25).verdict == DISTURBED
    # above the ideal, but the lower quartile is not: the rounds disagree, so noisy, not disturbed
    assert judge([1.0, 1.1, 1.5, 1.6, 1.7], ideal=1.25).verdict == NOISY
    # below the ideal but the middle half spreads over more than 30% of the median: noisy
    wide = judge([0.6, 0.7, 1.0, 1.1, 1.2], ideal=1.5)
    assert wide.verdict == NOISY and wide.message.startswith("noisy:")
    assert (wide.low, wide.high) == (0.7, 1.1)  # the quartiles of five rounds: the 2nd and 4th
    # one odd round of five moves neither the median nor the verdict
    assert judge([1.1, 1.1, 1.1, 1.1, 9.0], ideal=1.25).verdict == OK
    assert worst([OK, NOISY]) == NOISY and worst([NOISY, DISTURBED, OK]) == DISTURBED and worst([]) == OK


def test_round_ratios_pair_the_rounds_and_fall_back_to_the_medians():
    d = {"prefill_runs": [1.0, 3.0], "prefill_tokens_per_s": 10.0}
    p = {"prefill_runs": [0.5, 1.0], "prefill_tokens_per_s": 30.0}
    assert round_ratios(d, p, "prefill") == [2.0, 3.0]  # dense seconds / pruned seconds, round by round
    assert round_ratios({"prefill_tokens_per_s": 10.0}, {"prefill_tokens_per_s": 30.0}, "prefill") == [3.0]


def test_points_timed_one_at_a_time_are_checked_against_the_dense_point():
    rows = [
        {"method": "dense", "decode_tokens_per_s": 10.0, "ideal_speedup": 1.0},
        {"method": "nirvana", "decode_tokens_per_s": 12.0, "ideal_speedup": 1.3},
        {"method": "nirvana", "decode_tokens_per_s": 30.0, "ideal_speedup": 1.6},
        {"method": "flap", "decode_tokens_per_s": None, "ideal_speedup": 1.3},
    ]
    out = check_against_reference(rows, rows[0], "decode_tokens_per_s", "ideal_speedup")
    assert [r["decode_verdict"] for r in out] == [OK, OK, DISTURBED, None]
    assert [r["decode_speedup"] for r in out] == [1.0, 1.2, 3.0, None]


# ---- compare_speeds on a fake clock --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def models():
    """A tiny dense Llama and a narrower one standing for its pruned copy (MLP 48 -> 16, one KV group fewer)."""
    return tiny_model("llama"), tiny_model("llama", intermediate_size=16, num_attention_heads=2, num_key_value_heads=1)


def ideals(dense, pruned) -> dict[str, float]:
    d, p = phase_flops(dense, PROMPT, NEW), phase_flops(pruned, PROMPT, NEW)
    return {phase: d[phase] / p[phase] for phase in ("prefill", "decode")}


def fake_clock(monkeypatch, dense, pruned, slow_rounds=(), slowdown=4.0, warmup=1, order=None):
    """Replace the timed run: dense takes 1 s (prefill) and 2 s (decode), times `slowdown` in `slow_rounds`
    (counted after the warm-up); the pruned model 0.9 x its ideal speed-up. Records the order of the runs."""
    ideal = ideals(dense, pruned)
    calls = {"dense": 0}

    def run_once(model, ids, new_tokens, pad):
        if model is dense:
            i = calls["dense"] - warmup
            calls["dense"] += 1
            factor = slowdown if i in slow_rounds else 1.0
            prefill, decode = 1.0 * factor, 2.0 * factor
        else:
            prefill, decode = 1.0 / (0.9 * ideal["prefill"]), 2.0 / (0.9 * ideal["decode"])
        if order is not None:
            order.append("dense" if model is dense else "pruned")
        mem = SimpleNamespace(extra=0, peak=0)
        return {
            "prefill": prefill,
            "prefill_cpu": prefill,
            "ttft": 0.1,
            "decode": decode,
            "decode_cpu": decode,
            "mem": mem,
        }

    monkeypatch.setattr(speed, "_run_once", run_once)
    return ideal


def compare(dense, pruned, rounds=5):
    return speed.compare_speeds(dense, pruned, batch_sizes=(1,), prompt_len=PROMPT, new_tokens=NEW, repeats=rounds)


def test_an_undisturbed_measurement_within_the_ideal_is_a_result(monkeypatch, models):
    order = []
    ideal = fake_clock(monkeypatch, *models, order=order)
    out = compare(*models)
    assert order == ["dense", "pruned"] * 6  # interleaved: one warm-up round, then five, dense first in each
    (row,) = out["rows"]
    assert out["verdict"] == row["verdict"] == OK and row["message"] == ""
    for phase in ("prefill", "decode"):
        assert row[f"{phase}_ideal"] == pytest.approx(ideal[phase]) and ideal[phase] > 1.2
        assert row[f"{phase}_ratio"] == pytest.approx(0.9 * ideal[phase], rel=1e-3)
        assert row[f"{phase}_rounds"] == 5 and row[f"{phase}_verdict"] == OK


def test_every_dense_round_slowed_is_flagged_disturbed(monkeypatch, models):
    ideal = fake_clock(monkeypatch, *models, slow_rounds=range(5), slowdown=4.0)
    out = compare(*models)
    (row,) = out["rows"]
    assert out["verdict"] == DISTURBED and row["message"] == MESSAGES[DISTURBED]
    for phase in ("prefill", "decode"):
        assert row[f"{phase}_ratio"] == pytest.approx(3.6 * ideal[phase], rel=1e-3)  # 4 x 0.9 x ideal
        assert row[f"{phase}_verdict"] == DISTURBED


def test_one_slowed_dense_round_of_five_leaves_the_median_alone(monkeypatch, models):
    ideal = fake_clock(monkeypatch, *models, slow_rounds=(2,), slowdown=4.0)
    (row,) = compare(*models)["rows"]
    assert row["verdict"] == OK and row["decode_ratio"] == pytest.approx(0.9 * ideal["decode"], rel=1e-3)
    assert row["decode_ratio_high"] == pytest.approx(row["decode_ratio"], rel=1e-3)  # the upper quartile too


def test_two_slowed_dense_rounds_of_five_make_the_spread_too_wide(monkeypatch, models):
    fake_clock(monkeypatch, *models, slow_rounds=(1, 3), slowdown=4.0)
    (row,) = compare(*models)["rows"]
    assert row["verdict"] == NOISY and row["decode_ratio_high"] > 3 * row["decode_ratio_low"]


def test_a_single_slowed_round_is_disturbed(monkeypatch, models):
    fake_clock(monkeypatch, *models, slow_rounds=(0,), slowdown=4.0)
    (row,) = compare(*models, rounds=1)["rows"]
    assert row["decode_rounds"] == 1 and row["decode_verdict"] == DISTURBED


# ---- the committed benchmarks' flag ----------------------------------------------------------------------------------


def test_the_baselines_report_flags_a_speed_up_above_its_ideal():
    counts = {"block_params_before": "100", "block_params_after": "80", "params_before": "130", "params_after": "110"}
    dense = {"method": "dense", "prefill_tokens_per_s": "100", "decode_tokens_per_s": "10"}
    dense |= {"prefill_tokens_per_cpu_s": "", "decode_tokens_per_cpu_s": ""}  # not measured: left out
    fine = {"method": "nirvana", **counts, "prefill_tokens_per_s": "120", "decode_tokens_per_s": "11"}
    fine |= {"prefill_tokens_per_cpu_s": "200", "decode_tokens_per_cpu_s": "20"}
    assert speed_ideal(fine) == 1.25  # 100 / 80 block parameters (130 / 110 is smaller)
    flag = speed_flag(fine, dense)
    assert flag == {"ideal": 1.25, "speedups": {"prefill": 1.2, "decode": 1.1}, "disturbed": False}
    # 1.4x decode > 1.1 x 1.25x: disturbed, even with prefill within the ideal
    fast = {**fine, "decode_tokens_per_s": "14"}
    assert speed_flag(fast, dense)["disturbed"] is True
    # per CPU second too, where both rows have it
    cpu_dense = {**dense, "decode_tokens_per_cpu_s": "10"}
    assert speed_flag(fine, cpu_dense)["speedups"]["decode per CPU-s"] == 2.0
    assert speed_flag(fine, cpu_dense)["disturbed"] is True
    # a sliced residual stream: all parameters shrink more than the blocks, and that ratio is the bound
    sliced = {**fine, "params_before": "130", "params_after": "90", "decode_tokens_per_s": "14"}
    assert speed_ideal(sliced) == pytest.approx(130 / 90) and speed_flag(sliced, dense)["disturbed"] is False
    assert speed_flag(dense, dense) is None and speed_flag({"method": "flap"}, dense) is None


def test_the_baselines_table_shows_disturbed_instead_of_a_speed_up():
    from nirvana.bench.baselines_report import _speed_cells

    dense = {"method": "dense", "prefill_tokens_per_s": 100.0, "decode_tokens_per_s": 10.0}
    counts = {"block_params_before": 100, "block_params_after": 80}
    fine = {"method": "nirvana", **counts, "prefill_tokens_per_s": 120.0, "decode_tokens_per_s": 11.0}
    fast = {**fine, "prefill_tokens_per_s": 440.0}
    assert _speed_cells(dense, dense) == ["reference", "1.00"]
    assert _speed_cells(fine, dense) == ["1.20 / 1.10", "1.25"]
    assert _speed_cells(fast, dense) == ["**disturbed**: re-measure", "1.25"]


# ---- the Prune page ------------------------------------------------------------------------------------------------


def test_the_prune_page_warns_on_a_disturbed_speed_and_re_measures(at, monkeypatch):  # noqa: F811 (the fixture)
    apply_a_plan(at, 0.5)
    pruned_params = at.session_state["pruned"].params
    slow = {"dense": 5.0}  # the dense runs' slowdown: 5x, then 1x after the re-measure

    def run_once(model, ids, new_tokens, pad):
        is_dense = sum(p.numel() for p in model.parameters()) > pruned_params
        seconds = slow["dense"] if is_dense else 1.0  # pruned as fast as an undisturbed dense: within its ideal
        mem = SimpleNamespace(extra=0, peak=0)
        return {"prefill": seconds, "prefill_cpu": seconds, "ttft": 0.1, "decode": seconds, "decode_cpu": seconds,
                "mem": mem}  # fmt: skip

    monkeypatch.setattr(speed, "_run_once", run_once)
    at.multiselect(key="speed_batches").set_value([1]).run()
    at.number_input(key="speed_new_tokens").set_value(2).run()
    at.number_input(key="speed_repeats").set_value(3).run()
    at.button(key="measure_speed").click().run()
    no_errors(at)
    warning = " ".join(w.value for w in at.warning)
    assert "batch 1, decode: **disturbed: the machine was busy during the measurement; re-measure**" in warning
    assert metrics(at)["Decode speed-up, batch 1"] == "—"  # no figure: the verdict instead
    table = at.dataframe[0].value
    assert table["decode verdict"].tolist() == ["disturbed"] and table["decode speed-up (measured)"].isna().all()
    slow["dense"] = 1.0
    at.button(key="remeasure_speed").click().run()
    no_errors(at)
    assert not [w for w in at.warning if "disturbed" in w.value]
    assert metrics(at)["Decode speed-up, batch 1"] == "1.00×"
    assert at.dataframe[0].value["decode verdict"].tolist() == ["ok"]


def test_a_sweep_shows_measured_speed_only_when_no_point_is_disturbed():
    import pandas as pd

    from ui.speed import sweep_checked, sweep_speed_shown

    rows = [
        {"method": "dense", "decode_tokens_per_s": 10.0, "ideal_speedup": 1.0},
        {"method": "nirvana", "decode_tokens_per_s": 12.0, "ideal_speedup": 1.3},
    ]
    fine = sweep_checked(rows)
    assert [r["decode_speedup"] for r in fine] == [1.0, 1.2] and sweep_speed_shown(pd.DataFrame(fine))
    disturbed = sweep_checked([*rows, {"method": "flap", "decode_tokens_per_s": 30.0, "ideal_speedup": 1.6}])
    assert disturbed[2]["decode_verdict"] == DISTURBED and disturbed[2]["decode_speedup"] is None
    assert not sweep_speed_shown(pd.DataFrame(disturbed))  # the charts fall back to the ideal speed-up


def test_the_sweep_page_flags_a_point_faster_than_its_ideal(at, monkeypatch):  # noqa: F811 (the fixture)
    seen = []  # the dense model is the first one timed (the sweep's reference point comes first)

    def run_once(model, ids, new_tokens, pad):
        if not seen:
            seen.append(model)
        seconds = 5.0 if model is seen[0] else 1.0  # the dense point timed while the machine was busy
        mem = SimpleNamespace(extra=0, peak=0)
        return {"prefill": seconds, "prefill_cpu": seconds, "ttft": 0.1, "decode": seconds, "decode_cpu": seconds,
                "mem": mem}  # fmt: skip

    monkeypatch.setattr(speed, "_run_once", run_once)
    compute(at, criterion="magnitude")
    at.switch_page("pages/sweep.py").run()
    at.radio(key="sweep_metric").set_value("kl").run()
    at.text_input(key="sweep_sparsities").set_value("0.5").run()
    at.text_input(key="sweep_gammas").set_value("1").run()
    assert at.checkbox(key="sweep_speed").value  # decode speed measured
    at.button(key="run_sweep").click().run()
    no_errors(at)
    warning = " ".join(w.value for w in at.warning)
    assert warning.startswith(MESSAGES[DISTURBED]) and "sparsity: s=0.50" in warning
    table = next(d.value for d in at.dataframe if "decode_verdict" in d.value.columns)
    assert table["decode_verdict"].tolist()[:2] == [OK, DISTURBED] and table["decode_speedup"].isna().tolist()[1]
