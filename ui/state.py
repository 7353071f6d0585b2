"""Per-session state: which model, which scores, which plan, which pruned copy.

Session state holds only this session's results; the shared model comes from
`ui.resources.load`. Changing the model clears everything computed for the old one.

`NIRVANA_APP_MODEL` sets the model the app starts on (default: the embedded SmolLM2), so tests
can point the app at a tiny model folder.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Generic, TypeVar

import streamlit as st
import torch
import torch.nn as nn

from nirvana.checkpoints.options import DEFAULT_MODEL
from nirvana.methods import METHODS
from nirvana.pruning.allocation import Allocation
from ui.errors import guard
from ui.resources import ModelSpec, is_loaded, load, mark_loaded

T = TypeVar("T")

# Keys of widgets whose values must survive page switches (streamlit drops the state of widgets
# that are not drawn on a run; app.py re-assigns these each run to keep them).
PERSISTENT_WIDGETS = (
    *("model_source", "model_embedded", "model_hub", "model_dir", "model_dtype", "model_device", "model_quant"),
    *("calib_source", "calib_path", "calib_samples", "calib_seq_len", "calib_seed", "criterion", "criterion2"),
    *("neuron_mode", "sparsity", "gamma", "align"),
    *("kl_pool", "kl_candidates", "kl_samples", "kl_seq_len", "kl_anchor", "kl_criterion"),
    *("ppl_dataset", "ppl_tokens", "ppl_window", "prompts", "max_new_tokens", "chat_template"),
    *("speed_batches", "speed_new_tokens", "speed_repeats"),
    *("sweep_metric", "sweep_sparsities", "sweep_gammas", "sweep_tokens", "sweep_speed"),
    *("evidence_measure", "evidence_criteria", "evidence_alloc", "evidence_model"),
    *("alloc_methods", "prune_method", "method_sparsity", "sweep_methods", "reconstruct"),
    *("t5_gamma", "t5_gamma_star", "t5_scope", "t5_sweep_metric", "t5_sweep_sparsities", "t5_sweep_gammas"),
    *(f"method_settings_{name}" for name in METHODS),  # ui.methods.settings_key: one box per method
)


@dataclass
class PrunedCopy:
    """The session's pruned copy (Prune & compare), under the session key "pruned": the model and what identifies it.

    `plan_key` names the plan; `model_key` the weights (a reconstructed copy's differ from the plan's alone), which
    the memoised evaluations are keyed by. `request`: a baseline's settings as the page asked for them.
    """

    model: nn.Module
    plan: object  # PruningPlan
    plan_key: str
    model_key: str
    params: int
    seconds: float  # slicing (and reconstruction) time
    report: dict
    request: dict | None = None
    run_id: str | None = None
    reconstructed: bool = False


class Slot(Generic[T]):
    """One of the session's results, kept under its attribute's name in `st.session_state` (AppTests and the
    widgets see the same key); assigning None removes it. `of_model`: computed for the session's model, so
    forgotten when the model changes."""

    def __init__(self, of_model: bool = True):
        self.of_model = of_model

    def __set_name__(self, owner, name: str) -> None:
        self.key = name

    def __get__(self, obj, owner=None) -> T | None:
        return self if obj is None else st.session_state.get(self.key)

    def __set__(self, obj, value: T | None) -> None:
        if value is None:
            st.session_state.pop(self.key, None)
        else:
            st.session_state[self.key] = value


class Session:
    """The session's results as typed attributes: `state.session.plan = plan`, `state.session.scores`. Every
    page reads and writes them here, never by a key of its own; `forget` drops some, `set_spec` all those of
    the previous model."""

    scores = Slot[tuple]()  # (scores key, Scores) of the Saliency or Calibration page
    scores2 = Slot[tuple]()  # (key, Scores) of the second criterion, when the Saliency page compares two
    calib_info = Slot[dict]()  # the calibration batch described, with its fallback reason
    calib_batch = Slot[object]()  # the CalibrationBatch: the baseline methods score on the same batch
    kl_selection = Slot[object]()  # the Calibration page's KL-guided selection
    plan = Slot[object]()  # the PruningPlan the Allocation page (or a run reloaded) made
    pruned = Slot[PrunedCopy]()  # the Prune & compare page's pruned copy
    evals = Slot[dict]()  # memoised evaluations of the pruned copy: {key: result}
    sweep = Slot[tuple]()  # (rows, settings) of the Sweep page
    searched = Slot[dict]()  # {method:settings -> {sparsity: plan}}: the plans a searching method (Tyr) found
    t5_sweep = Slot[dict]()  # the T5 Sweep: {"rows", "metric", "scores_key"}
    recommendation = Slot[object](of_model=False)  # the Recommend box's choice, marked on the Sweep chart
    recovered = Slot[dict](of_model=False)  # {"model", "key", "run_id"}: the recovered copy (Recover tab)
    rec_ppl_result = Slot[tuple](of_model=False)  # (before, after) perplexity of the recovery
    recovery_rate = Slot[float](of_model=False)  # training FLOPs per second measured, for the next estimate
    recovery_job = Slot[object](of_model=False)  # the Recover tab's RecoveryJob (a training thread), if one ran
    autorun_saliency = Slot[bool](of_model=False)  # the Overview's "start here" asks the Saliency page to score

    @classmethod
    def slots(cls) -> dict[str, Slot]:
        return {name: v for name, v in vars(cls).items() if isinstance(v, Slot)}

    def forget(self, *names: str) -> None:
        """Drop these results (they were built on something that changed)."""
        unknown = set(names) - set(self.slots())
        assert not unknown, f"not a session result: {sorted(unknown)}"
        for name in names:
            setattr(self, name, None)


session = Session()


def default_spec() -> ModelSpec:
    return ModelSpec(os.environ.get("NIRVANA_APP_MODEL", DEFAULT_MODEL))


def on_cpu() -> bool:
    return not torch.cuda.is_available()


def default_calibration() -> dict:
    """Defaults that keep CPU work short: N=8, T=128 (one forward+backward ~10 s for SmolLM2 here)."""
    return {"samples": 8 if on_cpu() else 32, "seq_len": 128, "seed": 0}


def allocation(shape) -> Allocation | None:
    """The Allocation page's sliders (sparsity, gamma, align) as an `Allocation` resolved for `shape`.

    Before that page has been opened, gamma is None and resolves to the model's gamma*. None (with
    an error box) when the settings do not fit the model.
    """
    with guard("reading the Allocation page's settings") as g:
        resolved = Allocation(
            float(st.session_state.get("sparsity", 0.2)),
            st.session_state.get("gamma"),
            int(st.session_state.get("align", 8)),
        ).resolve(shape)
    return None if g.failed else resolved


def keep_widget_state() -> None:
    """Re-assign persistent widget values so they survive switching pages."""
    for key in PERSISTENT_WIDGETS:
        if key in st.session_state:
            st.session_state[key] = st.session_state[key]


def spec() -> ModelSpec:
    if "model_spec" not in st.session_state:
        st.session_state.model_spec = default_spec()
    return st.session_state.model_spec


def set_spec(new: ModelSpec) -> None:
    """Switch model: results of the previous model no longer apply."""
    if st.session_state.get("model_spec") != new:
        session.forget(*(name for name, slot in Session.slots().items() if slot.of_model))
        st.session_state.pop("gamma", None)
    st.session_state.model_spec = new


def model():
    """The session's model (shared, cached); shows a status box the first time it loads.

    Returns None when loading failed (the error box is already on the page).
    """

    current = spec()
    if is_loaded(current):
        return load(current)
    lm = None
    with guard(f"loading {current.label()}"):
        start = time.perf_counter()
        with st.status(
            f"Loading {current.label()} (the embedded model is converted from GGUF once, ~20 s)…", expanded=False
        ) as box:
            lm = load(current)
            box.update(label=f"Loaded {current.label()} in {time.perf_counter() - start:.1f} s", state="complete")
        mark_loaded(current)
        st.session_state.load_seconds = lm.load_seconds
    return lm
