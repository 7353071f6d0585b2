"""`sweep --method`: a baseline sweeps sparsity from one scoring, its rows say the method; bad input exits 2."""

from __future__ import annotations

import dataclasses
import json

import pytest
from test_bad_input import run_cli

from nirvana.errors import InvalidInput
from nirvana.pruning.allocation import Allocation
from nirvana.search.sweep import SweepSettings


def _args(model_dir, out, *more):
    base = ["sweep", "--model", str(model_dir), "--samples", "2", "--seq-len", "16", "--metric", "kl"]
    return [*base, "--no-speed", "--out", str(out), *more]


def test_a_baseline_sweeps_sparsity_from_one_scoring(tiny_with_tokenizer_dir, tmp_path, monkeypatch):
    from nirvana.methods import METHODS

    calls = []
    real = METHODS["flap"]

    def counted(*args, **kwargs):
        calls.append(1)
        return real.scorer(*args, **kwargs)

    monkeypatch.setitem(METHODS, "flap", dataclasses.replace(real, scorer=counted))
    out = tmp_path / "flap.json"
    code, err = run_cli(
        _args(tiny_with_tokenizer_dir, out, "--method", "flap", "--sparsities", "0.2,0.5", "--no-cache")
    )
    assert code == 0, err
    rows = json.loads(out.read_text())["rows"]
    assert [(r["axis"], r["method"], r["sparsity"]) for r in rows] == [
        ("dense", "dense", 0.0),
        ("sparsity", "flap", 0.2),
        ("sparsity", "flap", 0.5),
    ]
    assert (
        all(r["gamma"] is None for r in rows)
        and rows[2]["achieved_block_sparsity"] > rows[1]["achieved_block_sparsity"]
    )
    assert rows[0]["quality"] == 0.0 and all(r["quality"] > 0 for r in rows[1:])
    assert len(calls) == 1  # scored once; every point re-allocates the same scores


def test_slicegpt_sweeps_sparsity_rotating_afresh_at_each_point(tiny_with_tokenizer_dir, tmp_path):
    out = tmp_path / "slicegpt.json"
    more = ("--method", "slicegpt", "--sparsities", "0.2,0.5", "--samples", "4")
    code, err = run_cli(_args(tiny_with_tokenizer_dir, out, *more))
    assert code == 0, err
    document = json.loads(out.read_text())
    rows = document["rows"]
    assert [(r["axis"], r["method"], r["sparsity"]) for r in rows] == [
        ("dense", "dense", 0.0),
        ("sparsity", "slicegpt", 0.2),
        ("sparsity", "slicegpt", 0.5),
    ]
    assert document["scores"]["method"] == "slicegpt" and document["scores"]["calibration"]["samples"] == 4
    assert rows[2]["achieved_block_sparsity"] > rows[1]["achieved_block_sparsity"] > 0  # widths of 8 on D = 32
    # each width is its own model (every unit is kept, so only the width tells the points apart)
    assert 0 < rows[1]["quality"] < rows[2]["quality"]
    assert rows[0]["ideal_speedup"] == 1.0 < rows[1]["ideal_speedup"] < rows[2]["ideal_speedup"]


def test_nirvana_sweep_keeps_gamma_and_says_its_method(tiny_with_tokenizer_dir, tmp_path):
    out = tmp_path / "n.json"
    code, err = run_cli(
        _args(tiny_with_tokenizer_dir, out, "--sparsities", "0.5", "--gammas", "1", "--criterion", "magnitude")
    )
    assert code == 0, err
    rows = json.loads(out.read_text())["rows"]
    assert [(r["axis"], r["method"]) for r in rows] == [
        ("dense", "dense"),
        ("sparsity", "nirvana"),
        ("gamma", "nirvana"),
    ]
    assert rows[2]["gamma"] == 1.0


@pytest.mark.parametrize(
    "more, message",
    [
        (["--method", "flap", "--gammas", "1,2"], "gamma is NIRVANA's attention / MLP split"),
        (["--method", "sparsegpt"], "unknown method 'sparsegpt'; accepted: nirvana, llm-pruner, flap, slicegpt"),
        (["--method", "slicegpt"], "32 < 576. Use more samples"),  # the PCA needs D tokens
        (["--method", "flap", "--method-settings", '{"metric": "L2"}'], "flap metric must be one of"),
        (["--method", "flap", "--gamma", "2"], "gamma is a setting of method nirvana"),
        (["--metric", "bleu"], "unknown --metric 'bleu'"),
        (["--method", "flap", "--sparsity", "0.3"], "--sparsity is the centre of NIRVANA's gamma sweep"),
    ],
)
def test_bad_sweep_input_exits_2_and_writes_nothing(more, message, tmp_path):
    out = tmp_path / "x.json"
    code, err = run_cli(_args("smollm2-135m", out, *more))
    assert code == 2 and message in err, err
    assert not out.exists()


def test_sweep_settings_check_the_method_and_a_baseline_has_no_gamma_points():
    from nirvana.search.sweep import sweep_points

    with pytest.raises(InvalidInput, match="unknown method"):
        SweepSettings((0.2,), (), Allocation(0.5), "kl", method="sparsegpt")
    # the app passes its gamma field for every series: a baseline's sweep simply has no gamma axis
    flap = SweepSettings((0.2,), (1.0,), Allocation(0.5), "kl", method="flap")
    assert [axis for axis, _ in sweep_points(flap)] == ["dense", "sparsity"]
