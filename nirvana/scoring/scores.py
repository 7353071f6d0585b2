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

import torch
from filelock import FileLock
from safetensors.torch import load_file, save_file

from nirvana.errors import InvalidInput, PlanMismatch
from nirvana.guard.memory import oom_guard
from nirvana.models.family import FAMILIES
from nirvana.models.fingerprint import model_fingerprint
from nirvana.progress import Progress
from nirvana.store.atomic import atomic_path
from nirvana.store.keys import content_key
from nirvana.store.paths import cache_dir

# A score file's JSON names its family by "format"; a decoder-only file (the first format) has none and gives its
# tensors' shapes as "attn_shape" / "mlp_shape", a T5's as "shapes". Files of every format ever written load.
SCORE_FORMATS = {"decoder-only": None, "t5": "nirvana-t5-scores"}


@dataclass
class Scores:
    """Unit scores of one model, per unit kind of its family: `units[kind]` is [layers, units], higher = more
    important (decoder-only: `attn` [L, Hkv] per KV group, `mlp` [L, I] per neuron; a T5: its five kinds)."""

    units: dict[str, torch.Tensor]  # {kind: [layers, units] float32, CPU}
    criterion: str
    fingerprint: str
    calibration: dict | None = None  # CalibrationBatch.describe(), None for data-free criteria
    meta: dict = field(default_factory=dict)  # seconds, peak memory, method, ...
    # Per-channel statistics a method needs after slicing (FLAP: mean input of every o_proj /
    # down_proj channel, [L, Hq*d] and [L, I]); saved beside the units' scores, absent in older files.
    extra: dict[str, torch.Tensor] = field(default_factory=dict)
    family: str = "decoder-only"  # nirvana.models.family.FAMILIES

    def __post_init__(self) -> None:
        if self.family not in FAMILIES:
            raise InvalidInput(f"unknown family {self.family!r}; accepted: {', '.join(FAMILIES)}.")
        kinds = FAMILIES[self.family].units
        if not isinstance(self.units, dict) or set(self.units) != set(kinds):
            got = ", ".join(sorted(self.units)) if isinstance(self.units, dict) else repr(self.units)
            raise PlanMismatch(f"{self.family} scores need the kinds {', '.join(kinds)}; got {got}.")

    @property
    def attn(self) -> torch.Tensor:
        """Decoder-only: [L, Hkv], one score per KV group."""
        return self.units["attn"]

    @property
    def mlp(self) -> torch.Tensor:
        """Decoder-only: [L, I], one score per MLP neuron."""
        return self.units["mlp"]

    @property
    def num_layers(self) -> int:
        return next(iter(self.units.values())).shape[0]

    def metadata(self) -> dict:
        fmt = SCORE_FORMATS[self.family]
        head = {} if fmt is None else {"format": fmt}
        where = {"criterion": self.criterion, "fingerprint": self.fingerprint, "calibration": self.calibration}
        shapes = {k: list(v.shape) for k, v in self.units.items()}
        sizes = {f"{k}_shape": v for k, v in shapes.items()} if fmt is None else {"shapes": shapes}
        return {**head, **where, **sizes, "meta": self.meta}

    def save(self, path: str | Path) -> Path:
        """Write `<path>.safetensors` and `<path>.json` atomically; return the safetensors path."""
        path = Path(path)
        stem = path.with_suffix("") if path.suffix in {".safetensors", ".json"} else path
        stem.parent.mkdir(parents=True, exist_ok=True)
        st, js = stem.with_suffix(".safetensors"), stem.with_suffix(".json")
        # The inner block commits first: the JSON lands last, and a score file without it is never read.
        with atomic_path(js) as tmp_js, atomic_path(st) as tmp_st:
            tensors = {k: v.contiguous() for k, v in {**self.extra, **self.units}.items()}
            save_file(tensors, str(tmp_st))
            tmp_js.write_text(json.dumps(self.metadata(), indent=1))
        return st

    @classmethod
    def load(cls, path: str | Path) -> Scores:
        """A score file of any family (its JSON's `format` says which); `PlanMismatch` says what is wrong."""
        path = Path(path)
        stem = path.with_suffix("") if path.suffix in {".safetensors", ".json"} else path
        st, js = stem.with_suffix(".safetensors"), stem.with_suffix(".json")
        if not st.exists() or not js.exists():
            raise PlanMismatch(f"score file {str(st)!r} or its metadata {js.name} is missing; recompute the scores.")
        try:
            meta = json.loads(js.read_text())
            tensors = load_file(str(st))
            family = {fmt: name for name, fmt in SCORE_FORMATS.items()}[meta.get("format")]
        except Exception as exc:
            raise PlanMismatch(f"score file {str(st)!r} is unreadable ({exc!r}); delete it and recompute.") from exc
        kinds = FAMILIES[family].units
        missing = [k for k in kinds if k not in tensors]
        if missing:
            raise PlanMismatch(
                f"score file {str(st)!r} lacks the {family} scores {', '.join(missing)}; recompute them."
            )
        return cls(
            {k: tensors[k] for k in kinds},
            meta["criterion"],
            meta["fingerprint"],
            meta.get("calibration"),
            meta.get("meta", {}),
            {k: v for k, v in tensors.items() if k not in kinds},
            family,
        )


def score_cache_path(fingerprint: str, criterion: str, calibration_hash: str | None, extra: dict | None = None) -> Path:
    key = content_key(fingerprint, criterion, calibration_hash, extra or {})
    return cache_dir() / "scores" / f"{criterion}-{fingerprint}-{key}"


def load_cached(path, use_cache: bool, progress=None):
    """The score file at `path` (marked `cache_hit`) when the cache is on and it exists, else None."""
    if not (use_cache and Path(path).with_suffix(".json").exists()):
        return None
    cached = Scores.load(path)
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
    label: str | None = None,
    use_cache: bool = True,
    progress: Progress = None,
):
    """`score`'s result for `model`, computed once per (fingerprint, `criterion`, calibration hash, `key`) and cached.

    Under `computed_once`, a cached file (`load`) is returned with `cache_hit`; otherwise `memory()` plans and
    checks the peak (raising `OutOfMemory` before anything runs) and `score(fingerprint, plan)` builds the result in
    eval mode under `oom_guard("scoring (<label>)")`; its `meta` gets `seconds` first, and it is saved to the cache.

    `score` returns a `Scores` whose `meta` holds what the caller records (`cache_hit` etc.);
    `memory` (None: no check) returns the plan handed to `score`, e.g. the micro-batch it chose.
    `label` (default `criterion`) names the step in the OOM message and the final progress message.
    """
    label = label or criterion
    fingerprint = model_fingerprint(model)
    path = score_cache_path(fingerprint, criterion, calibration["hash"] if calibration else None, key)
    with computed_once(path, use_cache):
        cached = load_cached(path, use_cache, progress)
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
