"""The score container shared by every criterion, and its on-disk cache.

`Scores.attn: [L, Hkv]` holds one score per KV group (the attention unit), `Scores.mlp: [L, I]`
one per MLP neuron. Higher means more important. Cached as safetensors (tensors) plus JSON
(metadata) under `<cache>/scores/`, keyed by model fingerprint, criterion and calibration hash.
`cached_scores` is the one cached-scoring sequence every scorer goes through (NIRVANA's criteria, the
baselines, T5): cache path, one computation across processes, memory check, OOM guard, save.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

import torch
from filelock import FileLock
from safetensors.torch import load_file, save_file

from nirvana.errors import PlanMismatch
from nirvana.guard.memory import oom_guard
from nirvana.models.fingerprint import model_fingerprint
from nirvana.progress import Progress
from nirvana.store.atomic import atomic_path
from nirvana.store.keys import content_key
from nirvana.store.paths import cache_dir


@dataclass
class Scores:
    family: ClassVar[str] = "decoder-only"  # nirvana.models.family.FAMILIES
    attn: torch.Tensor  # [L, Hkv] float32, CPU
    mlp: torch.Tensor  # [L, I] float32, CPU
    criterion: str
    fingerprint: str
    calibration: dict | None = None  # CalibrationBatch.describe(), None for data-free criteria
    meta: dict = field(default_factory=dict)  # seconds, peak memory, method, ...
    # Per-channel statistics a method needs after slicing (FLAP: mean input of every o_proj /
    # down_proj channel, [L, Hq*d] and [L, I]); saved beside attn/mlp, absent in older files.
    extra: dict[str, torch.Tensor] = field(default_factory=dict)

    @property
    def num_layers(self) -> int:
        return self.attn.shape[0]

    def metadata(self) -> dict:
        return {
            "criterion": self.criterion,
            "fingerprint": self.fingerprint,
            "calibration": self.calibration,
            "attn_shape": list(self.attn.shape),
            "mlp_shape": list(self.mlp.shape),
            **{"meta": self.meta},
        }

    def save(self, path: str | Path) -> Path:
        """Write `<path>.safetensors` and `<path>.json` atomically; return the safetensors path."""
        path = Path(path)
        stem = path.with_suffix("") if path.suffix in {".safetensors", ".json"} else path
        stem.parent.mkdir(parents=True, exist_ok=True)
        st, js = stem.with_suffix(".safetensors"), stem.with_suffix(".json")
        # The inner block commits first: the JSON lands last, and a score file without it is never read.
        with atomic_path(js) as tmp_js, atomic_path(st) as tmp_st:
            tensors = {**{k: v.contiguous() for k, v in self.extra.items()}, "attn": self.attn.contiguous()}
            save_file({**tensors, "mlp": self.mlp.contiguous()}, str(tmp_st))
            tmp_js.write_text(json.dumps(self.metadata(), indent=1))
        return st

    @classmethod
    def load(cls, path: str | Path) -> Scores:
        path = Path(path)
        stem = path.with_suffix("") if path.suffix in {".safetensors", ".json"} else path
        st, js = stem.with_suffix(".safetensors"), stem.with_suffix(".json")
        if not st.exists() or not js.exists():
            raise PlanMismatch(f"score file {str(st)!r} or its metadata {js.name} is missing; recompute the scores.")
        try:
            meta = json.loads(js.read_text())
            tensors = load_file(str(st))
        except Exception as exc:
            raise PlanMismatch(f"score file {str(st)!r} is unreadable ({exc}); delete it and recompute.") from exc
        return cls(
            tensors["attn"],
            tensors["mlp"],
            meta["criterion"],
            meta["fingerprint"],
            meta.get("calibration"),
            meta.get("meta", {}),
            {k: v for k, v in tensors.items() if k not in ("attn", "mlp")},
        )


def score_cache_path(fingerprint: str, criterion: str, calibration_hash: str | None, extra: dict | None = None) -> Path:
    key = content_key(fingerprint, criterion, calibration_hash, extra or {})
    return cache_dir() / "scores" / f"{criterion}-{fingerprint}-{key}"


def load_cached(path, use_cache: bool, progress=None, load: Callable = Scores.load):
    """The score file at `path` (read by `load`, marked `cache_hit`) when the cache is on and it exists, else None."""
    if not (use_cache and Path(path).with_suffix(".json").exists()):
        return None
    cached = load(path)
    cached.meta["cache_hit"] = True
    if progress:
        progress(1.0, "scores loaded from cache")
    return cached


def computed_once(path: Path, use_cache: bool = True):
    """Hold the score file `path` while checking the cache and computing into it: of several
    processes that need the same scores at once (a grid's Ray tasks, two app sessions), one
    computes and the others then load its file. A file lock (`filelock`), so the OS drops it when
    its holder dies; shared by every process that sees the same cache folder."""
    if not use_cache:
        return contextlib.nullcontext()
    path.parent.mkdir(parents=True, exist_ok=True)
    return FileLock(f"{path}.lock")


def cached_scores(
    model,
    criterion: str,
    calibration: dict | None,
    key: dict,
    score: Callable,
    *,
    memory: Callable | None = None,
    load: Callable = Scores.load,
    label: str | None = None,
    use_cache: bool = True,
    progress: Progress = None,
):
    """`score`'s result for `model`, computed once per (fingerprint, `criterion`, calibration hash, `key`) and cached.

    Under `computed_once`, a cached file (`load`) is returned with `cache_hit`; otherwise `memory()` plans and
    checks the peak (raising `OutOfMemory` before anything runs) and `score(fingerprint, plan)` builds the result in
    eval mode under `oom_guard("scoring (<label>)")`; its `meta` gets `seconds` first, and it is saved to the cache.

    `score` returns a `Scores` (or `Seq2SeqScores`) whose `meta` holds what the caller records (`cache_hit` etc.);
    `memory` (None: no check) returns the plan handed to `score`, e.g. the micro-batch it chose.
    `label` (default `criterion`) names the step in the OOM message and the final progress message.
    """
    label = label or criterion
    fingerprint = model_fingerprint(model)
    path = score_cache_path(fingerprint, criterion, calibration["hash"] if calibration else None, key)
    with computed_once(path, use_cache):
        cached = load_cached(path, use_cache, progress, load)
        if cached is not None:
            return cached
        plan = memory() if memory is not None else None
        start = time.perf_counter()
        was_training = model.training
        model.eval()
        try:
            with oom_guard(f"scoring ({label})"):
                scores = score(fingerprint, plan)
        finally:
            model.train(was_training)
        scores.meta = {"seconds": round(time.perf_counter() - start, 3), **scores.meta}
        if use_cache:
            scores.save(path)
    if progress:
        progress(1.0, f"{label} scores in {scores.meta['seconds']:.1f} s")
    return scores


def check_scores_match(scores: Scores, model, source: str = "the given Scores") -> None:
    """Scores from a file belong to the model they were computed on (content fingerprint)."""
    fingerprint = model_fingerprint(model)
    if scores.fingerprint != fingerprint:
        raise PlanMismatch(
            f"{source} holds scores of model fingerprint {scores.fingerprint}, not of this model ({fingerprint}); "
            "score this model, or pass the model they came from."
        )
