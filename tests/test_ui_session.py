"""The app's typed session (`ui.state.session`): each result under its own session-state key, None removes
it, an unknown name is refused, and a model change forgets exactly the results computed for the old model."""

from __future__ import annotations

import logging

import pytest
import streamlit as st

from ui import state
from ui.resources import ModelSpec

logging.getLogger("streamlit.runtime.scriptrunner_utils.script_run_context").setLevel(logging.ERROR)  # bare mode


@pytest.fixture(autouse=True)
def _empty_session():
    for key in list(st.session_state):
        del st.session_state[key]
    yield
    for key in list(st.session_state):
        del st.session_state[key]


def test_a_result_lives_under_its_own_key_and_none_removes_it():
    state.session.plan = "a plan"
    assert st.session_state["plan"] == "a plan" and state.session.plan == "a plan"
    st.session_state["sweep"] = ([1], {})  # what an AppTest sets is what the page reads
    assert state.session.sweep == ([1], {})
    state.session.plan = None
    assert "plan" not in st.session_state and state.session.plan is None


def test_forget_drops_the_named_results_and_refuses_a_name_that_is_not_one():
    state.session.plan, state.session.evals = "p", {"k": 1}
    state.session.forget("plan")
    assert state.session.plan is None and state.session.evals == {"k": 1}
    with pytest.raises(AssertionError, match="not a session result"):
        state.session.forget("plna")


def test_a_new_model_forgets_what_was_computed_for_the_old_one_and_keeps_the_rest():
    of_model = [name for name, slot in state.Session.slots().items() if slot.of_model]
    assert {"scores", "plan", "pruned", "evals", "sweep", "searched", "t5_sweep"} <= set(of_model)
    state.set_spec(ModelSpec("a"))
    for name in state.Session.slots():
        setattr(state.session, name, f"value of {name}")
    st.session_state["gamma"] = 3.0
    state.set_spec(ModelSpec("a"))  # the same model: nothing is forgotten
    assert all(getattr(state.session, name) is not None for name in state.Session.slots())
    state.set_spec(ModelSpec("b"))
    for name, slot in state.Session.slots().items():
        assert (getattr(state.session, name) is None) == slot.of_model, name
    assert "gamma" not in st.session_state
