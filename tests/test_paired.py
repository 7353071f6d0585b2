"""Paired differences (`nirvana.measure.paired`): known answers for the mean, its standard error, the text and
what counts as resolved."""

from __future__ import annotations

import math

import pytest

from nirvana.measure import paired


def test_paired_difference_is_the_mean_and_standard_error_of_per_problem_differences():
    a, b = [1.0, 2.0, 3.0, 4.0], [0.5, 1.0, 2.5, 3.5]
    diff = paired.paired_difference(a, b)
    d = [0.5, 1.0, 0.5, 0.5]
    sd = math.sqrt(sum((x - 0.625) ** 2 for x in d) / 3)
    assert diff == pytest.approx({"mean": 0.625, "stderr": sd / 2, "n": 4})
    assert paired.paired_difference(a, b[:2])["n"] == 2  # the common first problems only


def test_paired_text_calls_resolved_only_beyond_two_standard_errors():
    assert paired.paired_text({"mean": -0.25, "stderr": 0.0645, "n": 8}) == "-0.2500 ± 0.0645 (3.9 se, resolved)"
    assert paired.paired_text({"mean": 0.005, "stderr": 0.011, "n": 200}, 100, 1) == "+0.5 ± 1.1 (0.5 se)"
    # two models that agree on every problem: no difference and no error, nothing resolved
    assert paired.paired_text({"mean": 0.0, "stderr": 0.0, "n": 5}) == "+0.0000 ± 0.0000 (0.0 se)"
    # a difference with no spread (every problem moved the same way) is resolved
    assert paired.paired_text({"mean": 1.0, "stderr": 0.0, "n": 5}, 100, 1) == "+100.0 ± 0.0 (inf se, resolved)"
    assert paired.paired_text(None) == "-"


def test_paired_or_none_needs_both_sides_and_two_common_problems():
    assert paired.paired_or_none(None, [1.0, 0.0]) is None and paired.paired_or_none([1.0, 0.0], []) is None
    assert paired.paired_or_none([1.0, 0.0, 1.0], [1.0]) is None  # one common problem: no standard error
    assert paired.paired_or_none([1.0, 0.0], [0.0, 0.0]) == paired.paired_difference([1.0, 0.0], [0.0, 0.0])
