"""KL-guided calibration selection (METHOD.md section 4).

Draw K candidate calibration batches (seeds 0..K-1 by default) from a pool; for each: score
(`compute_scores`, disk-cached), allocate at the target sparsity and gamma, slice a copy
(`apply_plan`; the dense model is never touched) and measure KL(P_dense || P_pruned) on a fixed
anchor set. The candidate with the smallest KL wins; every candidate's KL is reported.

The anchor set (default 128 x 64 tokens, seed 42, same pool) is drawn first and the candidates
are drawn with `exclude=anchor.documents_used`, so no candidate shares a source document with
the anchor (our rule: selection must not be judged on text it calibrated on). The result is
cached on disk as JSON under `<cache>/calib_select/`, keyed by everything that determines it.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field

from nirvana.data.calibration import CalibrationBatch, calibration_batch
from nirvana.errors import InvalidInput
from nirvana.measure.duration import estimate_seconds
from nirvana.measure.kl import DenseReference, kl_to_dense
from nirvana.models.fingerprint import model_fingerprint
from nirvana.models.shapes import model_shape
from nirvana.progress import Progress, sub_progress
from nirvana.pruning.allocation import Allocation
from nirvana.pruning.slicing import prune_and_measure
from nirvana.scoring.criteria import DATA_CRITERIA, compute_scores
from nirvana.store.atomic import atomic_write_text
from nirvana.store.keys import content_key
from nirvana.store.paths import cache_dir

DEFAULT_POOL = "wikitext2-valid"
DEFAULT_CANDIDATES = 8


@dataclass(frozen=True)
class AnchorSpec:
    """Where the KL anchor set comes from: `samples` windows of `seq_len` tokens, drawn with `seed`."""

    source: str = DEFAULT_POOL
    samples: int = 128
    seq_len: int = 64
    seed: int = 42


@dataclass
class Candidate:
    seed: int
    kl: float  # mean nats per anchor token
    calibration: dict  # CalibrationBatch.describe()
    score_seconds: float
    scores_cached: bool
    achieved_block_sparsity: float


@dataclass
class Selection:
    """Every candidate's KL and the chosen seed; `settings` and `anchor` say what was compared."""

    fingerprint: str
    settings: dict  # criterion, sparsity, gamma, align, allocation, pool, samples, seq_len, seeds
    anchor: dict  # AnchorSpec fields + hash + documents
    candidates: list[Candidate]
    chosen_seed: int
    key: str
    seconds: float
    from_cache: bool = False
    notes: list[str] = field(default_factory=list)

    @property
    def chosen(self) -> Candidate:
        return next(c for c in self.candidates if c.seed == self.chosen_seed)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> Selection:
        data = dict(data)
        data["candidates"] = [Candidate(**c) for c in data["candidates"]]
        return cls(**data)


def anchor_batch(tokenizer, spec: AnchorSpec = AnchorSpec()) -> CalibrationBatch:
    """The fixed KL anchor set `[samples, seq_len]`; its `documents_used` are excluded from candidates.

    Only the default pool falls back to the embedded corpus (and says so); other sources must exist.
    """
    return calibration_batch(
        tokenizer,
        spec.source,
        samples=spec.samples,
        seq_len=spec.seq_len,
        seed=spec.seed,
        fallback=spec.source == DEFAULT_POOL,
    )


def candidate_batch(
    tokenizer, anchor: CalibrationBatch, *, source: str, samples: int, seq_len: int, seed: int
) -> CalibrationBatch:
    """One calibration candidate `[samples, seq_len]`, drawn only from documents the anchor does not use."""
    return calibration_batch(
        tokenizer,
        source,
        samples=samples,
        seq_len=seq_len,
        seed=seed,
        fallback=source == DEFAULT_POOL,
        exclude=set(anchor.documents_used),
    )


def selection_path(key: str):
    return cache_dir() / "calib_select" / f"{key}.json"


def check_selection(criterion: str, pool: str, candidates: int, seeds: list[int] | None = None) -> list[int]:
    """The candidate seeds of a selection (`seeds`, else 0..candidates-1), after the checks that need no
    model: a data-driven criterion, a text pool (not one fixed .npy batch), distinct seeds."""
    if criterion not in DATA_CRITERIA:
        raise InvalidInput(
            f"calibration selection needs a data-driven criterion; got {criterion!r}, accepted: "
            f"{', '.join(DATA_CRITERIA)}."
        )
    if str(pool).endswith(".npy"):
        raise InvalidInput(
            "calibration selection draws K batches from a text pool; a .npy of token ids is one fixed batch. "
            "Pass a dataset name or a .txt/.jsonl file as the pool."
        )
    seeds = list(seeds) if seeds is not None else list(range(candidates))
    if not seeds or len(set(seeds)) != len(seeds):
        raise InvalidInput(f"candidate seeds must be a non-empty list of distinct integers, got {seeds!r}.")
    return seeds


def select_calibration(
    model,
    tokenizer,
    allocation: Allocation,
    *,
    criterion: str = "nirvana",
    candidates: int = DEFAULT_CANDIDATES,
    seeds: list[int] | None = None,
    pool: str = DEFAULT_POOL,
    samples: int = 32,
    seq_len: int = 128,
    anchor: AnchorSpec | None = None,
    micro_batch: int = 0,
    use_cache: bool = True,
    reference: DenseReference | None = None,
    progress: Progress = None,
) -> Selection:
    """Score K calibration candidates and keep the one whose pruned model is closest to dense (KL).

    Every candidate is pruned at `allocation` (resolved for the model here; gamma=None is gamma*).
    `reference` lets a caller share dense anchor log-probs across calls (it must be built on this
    anchor). Example:
        >>> sel = select_calibration(model, tok, Allocation(0.2), candidates=4)
        >>> sel.chosen_seed, [round(c.kl, 4) for c in sel.candidates]
    """
    seeds = check_selection(criterion, pool, candidates, seeds)
    anchor = anchor or AnchorSpec(source=pool)
    start_time = time.perf_counter()
    shape = model_shape(model)
    allocation = allocation.resolve(shape)
    fingerprint = model_fingerprint(model)
    anchor_ids = anchor_batch(tokenizer, anchor)
    settings = {
        "criterion": criterion,
        "sparsity": allocation.sparsity,
        "gamma": float(allocation.gamma),
        "align": allocation.align,
        "allocation": allocation.kind,
        "pool": pool,
        "samples": samples,
        "seq_len": seq_len,
        "seeds": seeds,
    }
    anchor_info = {**asdict(anchor), "hash": anchor_ids.hash, "documents": len(anchor_ids.documents_used)}
    key = content_key("calib_select", fingerprint, settings, anchor_info)
    path = selection_path(key)
    if use_cache and path.exists():
        cached = Selection.from_dict(json.loads(path.read_text()))
        cached.from_cache = True
        if progress:
            progress(1.0, f"calibration choice loaded from cache: seed {cached.chosen_seed}")
        return cached
    if reference is None:
        reference = DenseReference(model, anchor_ids.input_ids, progress=sub_progress(progress, 0.0, 0.05, "anchor: "))
    elif reference.input_ids.shape != anchor_ids.input_ids.shape or not bool(
        (reference.input_ids == anchor_ids.input_ids).all()
    ):
        raise InvalidInput("the dense reference was built on another anchor set; build it on anchor_batch(...).")
    results, notes = [], []
    k = len(seeds)
    for i, seed in enumerate(seeds):
        lo, hi = 0.05 + 0.95 * i / k, 0.05 + 0.95 * (i + 1) / k
        batch = candidate_batch(tokenizer, anchor_ids, source=pool, samples=samples, seq_len=seq_len, seed=seed)
        if batch.fallback_reason and not notes:
            notes.append(f"calibration pool fell back to the embedded corpus: {batch.fallback_reason}")
        scores = compute_scores(
            model,
            criterion,
            batch,
            seed=seed,
            micro_batch=micro_batch,
            use_cache=use_cache,
            progress=sub_progress(progress, lo, lo + (hi - lo) * 0.6, f"candidate {i + 1}/{k} (seed {seed}) scores: "),
        )
        plan, kl = prune_and_measure(
            model,
            scores,
            lambda pruned: kl_to_dense(
                pruned, reference, sub_progress(progress, lo + (hi - lo) * 0.6, hi, f"candidate {i + 1}/{k} ")
            ),
            allocation,
            shape=shape,
        )
        results.append(
            Candidate(
                seed,
                kl,
                batch.describe(),
                float(scores.meta.get("seconds", 0.0)),
                bool(scores.meta.get("cache_hit", False)),
                plan.stats["achieved_block_sparsity"],
            )
        )
        if progress:
            progress(hi, f"candidate {i + 1}/{k} (seed {seed}): KL {kl:.5f}")
    best = min(results, key=lambda c: (c.kl, c.seed))
    selection = Selection(
        fingerprint, settings, anchor_info, results, best.seed, key, round(time.perf_counter() - start_time, 3), False
    )
    selection.notes = notes
    if use_cache:
        atomic_write_text(path, json.dumps(selection.to_dict(), indent=1))
    return selection


def chosen_batch(tokenizer, selection: Selection) -> CalibrationBatch:
    """Redraw the winning candidate batch (deterministic from the seed, pool and anchor)."""
    s, a = selection.settings, selection.anchor
    spec = AnchorSpec(source=a["source"], samples=a["samples"], seq_len=a["seq_len"], seed=a["seed"])
    batch = candidate_batch(
        tokenizer,
        anchor_batch(tokenizer, spec),
        source=s["pool"],
        samples=s["samples"],
        seq_len=s["seq_len"],
        seed=selection.chosen_seed,
    )
    if batch.hash != selection.chosen.calibration["hash"]:
        raise InvalidInput(
            "the calibration pool changed since this selection was cached (the redrawn batch differs); "
            "rerun the selection with use_cache=False."
        )
    return batch


def selection_seconds(shape, candidates: int, samples: int, seq_len: int, anchor: AnchorSpec | None = None,
                      rate: float | None = None) -> float:  # fmt: skip
    """About how long `select_calibration` takes here (`nirvana.measure.duration`): the dense anchor log-probs
    once, then per candidate one gradient scoring pass of `samples x seq_len` tokens and the pruned model's
    anchor forward (counted at the dense size: an upper bound)."""
    anchor = anchor or AnchorSpec()
    tokens = anchor.samples * anchor.seq_len
    reference = estimate_seconds(shape, "evaluation", tokens, anchor.seq_len, rate)
    scoring = estimate_seconds(shape, "gradient scoring", samples * seq_len, seq_len, rate)
    return reference + candidates * (scoring + reference)
