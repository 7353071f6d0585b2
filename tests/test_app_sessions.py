"""Two AppTest sessions share the cached model but nothing else: one session's pruning is its own."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # `ui` is the app's package, not installed with the library
    sys.path.insert(0, str(ROOT))


@pytest.fixture
def app_env(monkeypatch, tiny_with_tokenizer_dir):
    monkeypatch.setenv("NIRVANA_APP_MODEL", str(tiny_with_tokenizer_dir))
    import streamlit as st

    st.cache_data.clear()
    st.cache_resource.clear()
    yield Path(tiny_with_tokenizer_dir)
    st.cache_data.clear()
    st.cache_resource.clear()


def _session():
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
    at.run()
    return at


def test_one_sessions_pruning_is_invisible_to_another_and_the_cached_model_is_unchanged(app_env):
    from nirvana.models.fingerprint import model_fingerprint
    from nirvana.models.shapes import count_parameters, model_shape
    from ui.resources import ModelSpec, load

    a, b = _session(), _session()
    b.switch_page("pages/model.py").run()  # B loads the shared model first
    cached = load(ModelSpec(str(app_env)))  # the st.cache_resource singleton both sessions use
    before = {k: v.clone() for k, v in cached.model.state_dict().items()}
    fingerprint, params = model_fingerprint(cached.model), count_parameters(cached.model)

    a.switch_page("pages/saliency.py").run()
    a.selectbox(key="criterion").set_value("magnitude").run()
    a.button(key="compute_saliency").click().run()
    a.switch_page("pages/allocation.py").run()
    a.slider(key="sparsity").set_value(0.6).run()
    a.switch_page("pages/prune.py").run()
    a.button(key="apply_plan").click().run()
    assert not a.exception and not a.error
    pruned = a.session_state["pruned"].model
    assert pruned is not cached.model and count_parameters(pruned) < params
    assert sum(model_shape(pruned).intermediate) < sum(model_shape(cached.model).intermediate)

    # The shared model: same object for a new session, same weights, same fingerprint.
    assert load(ModelSpec(str(app_env))) is cached
    assert model_fingerprint(cached.model) == fingerprint and count_parameters(cached.model) == params
    after = cached.model.state_dict()
    assert after.keys() == before.keys()
    assert all(torch.equal(after[k], before[k]) for k in before)
    assert all(p.grad is None for p in cached.model.parameters())  # scoring left no gradients behind

    # Session B sees none of A's results: no scores, no plan, no pruned copy; its pages say so.
    b.switch_page("pages/allocation.py").run()
    assert not b.exception
    assert any("No saliency scores yet" in i.value for i in b.info)
    for key in ("scores", "plan", "pruned"):
        assert key not in b.session_state
    b.switch_page("pages/prune.py").run()
    assert any("No pruning plan yet" in i.value for i in b.info)
    b.switch_page("pages/model.py").run()
    assert {m.label: m.value for m in b.metric}["Parameters"] == f"{params / 1e6:.1f} M"
