"""The conftest fixture that gives every test the torch thread count the one before it started with."""

from __future__ import annotations

import torch

STARTED_WITH: list[int] = []


def test_a_test_that_changes_the_thread_count_for_the_process():
    STARTED_WITH.append(torch.get_num_threads())
    torch.set_num_threads(STARTED_WITH[0] + 1)  # what a benchmark worker's --threads does, process-wide
    assert torch.get_num_threads() == STARTED_WITH[0] + 1


def test_the_next_test_starts_with_the_count_from_before_it():
    if STARTED_WITH:  # run after the test above (file order), not alone
        assert torch.get_num_threads() == STARTED_WITH[0]
