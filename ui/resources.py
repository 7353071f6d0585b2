"""Cached resources: the shared model singleton, calibration batches, scores, plans, evaluations.

- The loaded model is an `st.cache_resource` singleton shared by every session. It is NEVER
  modified: pruning goes through `apply_plan`, which returns a copy, and that copy lives in the
  session that made it. Gradient scoring temporarily sets `requires_grad` and `.grad` on the
  shared model, so heavy work runs under `nirvana.guard.locks.heavy_work` (one job per device).
- Fast pure functions (plans) use `st.cache_data`, keyed by content.
- Long work with progress (scores, evaluations) cannot use `st.cache_data`, which would record
  and replay the progress updates; it goes through `Memo`, a small content-keyed LRU shared by
  sessions. Scores are additionally cached on disk by the library.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace

import streamlit as st
import torch

from nirvana.checkpoints.facts import describe
from nirvana.checkpoints.loaded import LoadedModel
from nirvana.checkpoints.loading import load_model
from nirvana.data.calibration import calibration_batch
from nirvana.guard.locks import heavy_work
from nirvana.measure import duration
from nirvana.models.family import family
from nirvana.models.shapes import ModelShape, model_shape
from nirvana.models.weights import input_device
from nirvana.pipeline import PruneSettings, score
from nirvana.pruning.allocation import Allocation, allocate
from nirvana.scoring.criteria import CRITERIA
from nirvana.store.keys import content_key


@dataclass(frozen=True)
class ModelSpec:
    """What to load: registry name / hub id / directory, dtype, device, quantization."""

    name: str
    dtype: str = "auto"
    device: str = "auto"
    quantization: str | None = None

    @property
    def key(self) -> str:
        return content_key(asdict(self))

    def label(self) -> str:
        extra = [x for x in (self.dtype if self.dtype != "auto" else "", self.quantization or "") if x]
        return self.name + (f" ({', '.join(extra)})" if extra else "")


@st.cache_resource(max_entries=3, show_spinner=False)
def _load_cached(name: str, dtype: str, device: str, quantization: str | None) -> LoadedModel:
    return load_model(name, dtype=dtype, device=device, quantization=quantization)


def load(spec: ModelSpec) -> LoadedModel:
    """The shared, cached model for `spec` (loads on first use). Never mutate `.model`."""
    return _load_cached(spec.name, spec.dtype, spec.device, spec.quantization)


def is_loaded(spec: ModelSpec) -> bool:
    """True when `spec` is already in the resource cache (so loading is instant)."""
    return spec.key in _loaded_keys()


@st.cache_resource(show_spinner=False)
def _loaded_keys() -> set:
    return set()


def mark_loaded(spec: ModelSpec) -> None:
    _loaded_keys().add(spec.key)


def hold_device(model, progress=None):
    """One heavy job per device across sessions and processes (`nirvana.guard.locks.heavy_work`).

    It also serialises gradient scoring on the shared model, which writes `.grad` on its weights.
    """

    on_wait = (lambda message: progress(0.0, message)) if progress else None
    return heavy_work(str(input_device(model)), on_wait, who="an explorer session")


class Memo:
    """A thread-safe, bounded, content-keyed LRU for results of long work with progress."""

    def __init__(self, max_entries: int = 64):
        self._data: OrderedDict[str, object] = OrderedDict()
        self._lock = threading.Lock()
        self.max_entries = max_entries

    def get(self, key: str):
        with self._lock:
            if key in self._data:
                self._data.move_to_end(key)
                return self._data[key]
        return None

    def put(self, key: str, value) -> None:
        with self._lock:
            self._data[key] = value
            self._data.move_to_end(key)
            while len(self._data) > self.max_entries:
                self._data.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._data.clear()

    def get_or_compute(self, key: str, compute: Callable[[], object]):
        value = self.get(key)
        if value is None:
            value = compute()
            self.put(key, value)
        return value


@st.cache_resource(show_spinner=False)
def memo(namespace: str) -> Memo:
    """The shared memo of one kind of result ("scores", "ppl", "speed", "sweep", ...)."""
    return Memo()


@st.cache_data(max_entries=32, show_spinner=False)
def calibration(_tokenizer, model_key: str, source: str, samples: int, seq_len: int, seed: int):
    """`calibration_batch`, cached by (model, source, N, T, seed); tokenizing the pool takes seconds."""

    return calibration_batch(_tokenizer, source, samples=samples, seq_len=seq_len, seed=seed, fallback=True)


def scores_for(lm: LoadedModel, spec: ModelSpec, criterion: str, batch, seed: int, micro_batch: int, progress=None):
    """The pipeline's `score` on `batch`, through the shared memo (and the library's disk cache), one job per device.

    A memo hit is marked `meta["cache_hit"]` as a disk hit is (on a copy: the memo's Scores are shared), so the
    page says "cached" rather than the earlier computation's `seconds` as if it had just taken them."""

    settings = PruneSettings(sparsity=0.0, criterion=criterion, seed=seed, micro_batch=micro_batch)
    key = content_key("scores", spec.key, criterion, batch.hash if settings.needs_data else None, seed)
    computed = []

    def compute():
        computed.append(True)
        with hold_device(lm.model, progress):
            return score(lm, settings, progress, batch=batch)[0]

    scores = memo("scores").get_or_compute(key, compute)
    if not computed:
        scores = replace(scores, meta={**scores.meta, "cache_hit": True})
    return key, scores


@st.cache_data(max_entries=512, show_spinner=False)
def plan_for(_scores, scores_key: str, shape: dict, allocation: Allocation):
    """`allocate` (pure tensor work, ~10 ms) cached by scores and the allocation; returns a fresh copy."""

    return allocate(_scores, ModelShape.from_dict(shape), allocation)


@st.cache_data(max_entries=16, show_spinner=False)
def model_facts(_lm: LoadedModel, spec_key: str) -> dict:
    """`describe(lm)`: the architecture facts of the Model page."""
    return describe(_lm)


@st.cache_data(max_entries=16, show_spinner=False)
def shape_dict(_lm: LoadedModel, spec_key: str) -> dict:

    return model_shape(_lm.model).to_dict()


@st.cache_resource(show_spinner=False)
def matmul_rate(device: str, dtype: str) -> float:
    """This machine's matrix-multiply rate (`nirvana.guard.duration`): measured once, then read from disk."""
    return duration.matmul_rate(device, getattr(torch, dtype))


def device_dtype(lm: LoadedModel) -> tuple[str, str]:
    """(device, dtype name) of the model's weights: the key of its machine rate."""
    weight = next(p for p in lm.model.parameters() if p.is_floating_point())
    return str(input_device(lm.model)), str(weight.dtype).removeprefix("torch.")


def scoring_seconds(lm: LoadedModel, spec_key: str, criteria: list[str], choice: dict) -> float | None:
    """About how long scoring `criteria` on N x T tokens takes here (None: a T5, or nothing to estimate)."""
    if not family(lm.model).decoder_shape:  # the cost model reads a decoder-only shape
        return None
    steps = [duration.scoring_step(CRITERIA[c].uses_gradients, CRITERIA[c].needs_data) for c in criteria]
    steps = [s for s in steps if s]
    if not steps:
        return None
    rate = matmul_rate(*device_dtype(lm))
    shape = ModelShape.from_dict(shape_dict(lm, spec_key))
    tokens = choice["samples"] * choice["seq_len"]
    return sum(duration.estimate_seconds(shape, s, tokens, choice["seq_len"], rate) for s in steps)
