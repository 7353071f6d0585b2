"""The criteria table: every row is complete, consistent with what it declares, and read by name."""

from __future__ import annotations

import inspect
import re

import pytest
import torch
from conftest import random_batch

import nirvana
from nirvana import charts
from nirvana.bench import quality_config as quality
from nirvana.errors import InvalidInput
from nirvana.scoring.criteria import CRITERIA, DATA_CRITERIA, Criterion, compute_scores, get_criterion
from tests.tiny import tiny_model

HEX = re.compile(r"^#[0-9a-f]{6}$")


def test_the_public_name_is_the_same_table():
    assert nirvana.CRITERIA is CRITERIA is CRITERIA
    assert list(CRITERIA) == ["nirvana", "taylor", "magnitude", "wanda", "random"]


@pytest.mark.parametrize("name", list(CRITERIA))
def test_every_row_is_complete(name):
    row = CRITERIA[name]
    assert isinstance(row, Criterion) and row.name == name and callable(row.score)
    assert row.label and row.description and HEX.match(charts.CRITERION_COLORS[name])
    assert ("method" in inspect.signature(row.score).parameters) == row.uses_gradients
    assert row.needs_data or not row.uses_gradients  # a gradient needs a forward pass on data
    with pytest.raises(AttributeError):
        row.needs_data = not row.needs_data  # frozen: the table cannot be edited by accident


def test_colours_are_distinct_and_derived_lists_follow_the_table():
    assert set(charts.CRITERION_COLORS) == set(CRITERIA)
    assert len(set(charts.CRITERION_COLORS.values())) == len(CRITERIA)
    assert DATA_CRITERIA == ("nirvana", "taylor", "wanda")
    assert quality.GRID_CRITERIA == ("nirvana", "magnitude", "random", "taylor", "wanda")  # the benchmark's order
    assert quality.DATA_DRIVEN == DATA_CRITERIA


@pytest.mark.parametrize("name", list(CRITERIA))
def test_every_row_scores_a_tiny_model_with_the_right_shapes(name):
    model = tiny_model("llama")  # L 2, Hkv 2, I 48
    scores = compute_scores(model, name, random_batch(), use_cache=False)
    assert scores.attn.shape == (2, 2) and scores.mlp.shape == (2, 48)
    assert scores.criterion == name
    assert torch.isfinite(scores.attn).all() and torch.isfinite(scores.mlp).all()
    assert (scores.attn >= 0).all() and (scores.mlp >= 0).all()
    assert ("method" in scores.meta) == CRITERIA[name].uses_gradients
    assert (scores.meta["seed"] is not None) == CRITERIA[name].seeded
    assert (scores.calibration is not None) == CRITERIA[name].needs_data


@pytest.mark.parametrize("name", [n for n, c in CRITERIA.items() if c.needs_data])
def test_rows_that_need_data_refuse_no_batch(name):
    with pytest.raises(InvalidInput, match=f"criterion '{name}' needs a calibration batch"):
        compute_scores(tiny_model("llama"), name, None, use_cache=False)


@pytest.mark.parametrize("name", [n for n, c in CRITERIA.items() if not c.needs_data])
def test_rows_without_data_score_without_a_batch(name):
    scores = compute_scores(tiny_model("llama"), name, None, use_cache=False)
    assert scores.calibration is None


@pytest.mark.parametrize("name", [n for n, c in CRITERIA.items() if c.seeded])
def test_seeded_rows_repeat_with_the_same_seed_and_change_with_another(name):
    model = tiny_model("llama")
    a, b, c = (compute_scores(model, name, None, seed=s, use_cache=False) for s in (3, 3, 4))
    assert torch.equal(a.attn, b.attn) and torch.equal(a.mlp, b.mlp)
    assert not torch.equal(a.mlp, c.mlp)


@pytest.mark.parametrize("name", [n for n, c in CRITERIA.items() if not c.seeded])
def test_unseeded_rows_ignore_the_seed(name):
    model, batch = tiny_model("llama"), random_batch()
    a = compute_scores(model, name, batch, seed=3, use_cache=False)
    b = compute_scores(model, name, batch, seed=4, use_cache=False)
    torch.testing.assert_close(a.mlp, b.mlp)


def test_an_unknown_name_lists_the_accepted_ones():
    with pytest.raises(InvalidInput) as err:
        get_criterion("obd")
    message = str(err.value)
    assert "unknown criterion 'obd'" in message
    assert "accepted: nirvana, taylor, magnitude, wanda, random" in message
    with pytest.raises(InvalidInput, match="accepted: nirvana, taylor"):
        compute_scores(tiny_model("llama"), "obd", random_batch(), use_cache=False)
    assert get_criterion("wanda") is CRITERIA["wanda"]
