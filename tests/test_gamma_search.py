"""Gamma search: KL per gamma from cached scores, no new backward pass, best = argmin, paired differences to
gamma* over anchor sequences."""

from __future__ import annotations

import json
import math

import pytest

import nirvana.scoring.criteria as scorers
import nirvana.search.gamma as gs
from nirvana.cli import main
from nirvana.errors import InvalidInput
from nirvana.measure.kl import DenseReference, kl_per_sequence, kl_to_dense
from nirvana.models.shapes import model_shape
from nirvana.pruning.allocation import Allocation, allocate, default_gamma
from nirvana.pruning.slicing import apply_plan
from nirvana.scoring.criteria import compute_scores
from tests.conftest import random_batch
from tests.tiny import tiny_model


def _setup():
    model = tiny_model("llama")
    scores = compute_scores(model, "nirvana", random_batch(n=4, t=16))
    anchor = random_batch(n=6, t=16, seed=9).input_ids
    return model, scores, DenseReference(model, anchor, chunk_size=3)


def test_each_point_matches_a_direct_measurement_and_best_is_argmin():
    model, scores, ref = _setup()
    result = gs.gamma_search(model, scores, ref, gammas=[0.5, 4.0], sparsities=[0.3, 0.5], align=1)
    assert len(result.points) == 4 and result.sparsities == [0.3, 0.5]
    for p in result.points:
        plan = allocate(scores, model_shape(model), Allocation(p.sparsity, p.gamma, 1))
        assert p.kl == pytest.approx(kl_to_dense(apply_plan(model, plan), ref), rel=1e-6)
    for s in (0.3, 0.5):
        pts = [p for p in result.points if p.sparsity == s]
        assert result.best(s).kl == min(p.kl for p in pts)
    blob = json.loads(json.dumps(result.to_dict()))
    assert set(blob["best"]) == {"0.3", "0.5"}


def test_every_point_carries_its_paired_kl_difference_to_gamma_star():
    model, scores, ref = _setup()
    star = round(default_gamma(model_shape(model)), 4)
    result = gs.gamma_search(model, scores, ref, gammas=[0.5, star, 8.0], sparsities=[0.4], align=1)
    by_gamma = {p.gamma: p for p in result.points}
    assert by_gamma[star].vs_default == {"mean": 0.0, "stderr": 0.0, "n": 6}  # 6 anchor sequences
    for gamma in (0.5, 8.0):
        plan = allocate(scores, model_shape(model), Allocation(0.4, gamma, 1))
        star_plan = allocate(scores, model_shape(model), Allocation(0.4, star, 1))
        d = kl_per_sequence(apply_plan(model, plan), ref) - kl_per_sequence(apply_plan(model, star_plan), ref)
        want = {"mean": float(d.mean()), "stderr": float(d.std() / math.sqrt(6)), "n": 6}
        assert by_gamma[gamma].vs_default == pytest.approx(want, rel=1e-6, abs=1e-12)
        assert by_gamma[gamma].vs_default["mean"] == pytest.approx(by_gamma[gamma].kl - by_gamma[star].kl, abs=1e-12)
    assert result.to_dict()["best"]["0.4"]["vs_default"]["n"] == 6
    # gamma* off the grid: nothing to pair with
    off_grid = gs.gamma_search(model, scores, ref, gammas=[0.5, 8.0], sparsities=[0.4])
    assert all(p.vs_default is None for p in off_grid.points)


def test_default_grid_has_at_least_8_gammas_and_includes_gamma_star():
    shape = model_shape(tiny_model("llama"))
    grid = gs.gamma_grid(shape)
    assert len(grid) >= 8 and grid == sorted(grid)
    assert round(default_gamma(shape), 4) in grid
    with pytest.raises(InvalidInput):
        gs.gamma_grid(shape, [1.0, -2.0])


def test_search_never_scores_and_identical_plans_are_measured_once(monkeypatch):
    model, scores, ref = _setup()
    monkeypatch.setattr(scorers, "gradient_saliency", lambda *a, **k: pytest.fail("gamma search must not score"))
    calls = []
    real = gs.kl_per_sequence
    monkeypatch.setattr(gs, "kl_per_sequence", lambda m, r: calls.append(1) or real(m, r))
    # gammas 1.0 and 1.0000001 give the same unit counts: one KL measurement for both
    result = gs.gamma_search(model, scores, ref, gammas=[1.0, 1.0000001, 3.0], sparsities=[0.4], align=1)
    assert len(result.points) == 3 and len(calls) == 2
    assert result.points[0].kl == result.points[1].kl


def test_gamma_search_cli_reuses_cached_scores(tiny_with_tokenizer_dir, capsys, monkeypatch):
    calls = []
    real = scorers.gradient_saliency
    monkeypatch.setattr(scorers, "gradient_saliency", lambda *a, **k: calls.append(1) or real(*a, **k))
    args = ["gamma-search", "--model", str(tiny_with_tokenizer_dir), "--sparsity", "0.3", "--samples", "2"]
    args += ["--seq-len", "32", "--anchor-samples", "4", "--anchor-seq-len", "16", "--json"]
    assert main(args) == 0
    first = json.loads(capsys.readouterr().out)
    assert len(calls) == 1  # one backward pass for the whole grid
    assert len(first["points"]) >= 8 and first["scores_cached"] is False
    assert main(args) == 0
    second = json.loads(capsys.readouterr().out)
    assert len(calls) == 1 and second["scores_cached"] is True  # a second search: zero backward passes
    assert [p["kl"] for p in second["points"]] == pytest.approx([p["kl"] for p in first["points"]])
