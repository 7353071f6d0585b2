"""Calibration batches: N sequences of T tokens drawn from a text pool with a seed.

As in the reference: documents with at least T tokens are drawn at random and a random
T-token window is taken from each. Short documents are joined (with "\n\n") into longer
ones first, so pools of short lines (PTB, WikiText lines) still yield full windows.
A user-supplied `.npy` of token ids `[N, T]` bypasses all of this for exact reproducibility.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from nirvana.data.text import check_text_name, load_text
from nirvana.data.tokens import corpus_ids
from nirvana.errors import InvalidInput
from nirvana.guard.safety import TEXT_ROOTS_ENV, check_file_size, check_local_path

MAX_SAMPLES, MAX_SEQ_LEN = 4096, 8192


@dataclass
class CalibrationBatch:
    """Token ids `[N, T]` plus where they came from; `hash` keys every cache built on it."""

    input_ids: torch.Tensor  # [N, T] int64
    source: str
    seed: int | None
    fallback_reason: str | None = None
    # Indices of the source documents (lines of the text) that the drawn windows came from,
    # counting every document merged into a drawn window's document; pass them as `exclude`
    # to draw another batch that shares no document with this one (the KL anchor set does).
    documents_used: tuple[int, ...] = field(default=(), repr=False)

    @property
    def hash(self) -> str:
        return tensor_hash(self.input_ids)

    @property
    def shape(self) -> tuple[int, int]:
        return tuple(self.input_ids.shape)

    def describe(self) -> dict:
        n, t = self.shape
        return {"source": self.source, "seed": self.seed, "samples": n, "seq_len": t, "hash": self.hash}

    def check_vocab(self, vocab_size: int) -> None:
        """Raise `InvalidInput` unless every token id is in [0, vocab_size) (a .npy made for another tokenizer?)."""
        lo, hi = int(self.input_ids.min()), int(self.input_ids.max())
        if lo < 0 or hi >= vocab_size:
            raise InvalidInput(
                f"calibration batch {self.source} holds token ids in [{lo}, {hi}] but the model's vocabulary has "
                f"{vocab_size} ids [0, {vocab_size}); was it tokenized for another model?"
            )


def tensor_hash(ids: torch.Tensor) -> str:
    arr = np.ascontiguousarray(ids.detach().cpu().numpy().astype(np.int64))
    return hashlib.sha256(str(arr.shape).encode() + arr.tobytes()).hexdigest()[:16]


def validate_size(samples: int, seq_len: int) -> None:
    for label, value, hi in (("samples N", samples, MAX_SAMPLES), ("seq_len T", seq_len, MAX_SEQ_LEN)):
        if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or not 1 <= value <= hi:
            raise InvalidInput(f"{label} must be an integer in [1, {hi}], got {value!r}.")


def _token_documents(tokenizer, documents: list[str], min_len: int) -> list[tuple[list[int], range]]:
    """Tokenize documents, merging consecutive short ones until each has >= min_len tokens.

    Returns (token ids, range of source-document indices merged into it) per merged document.
    """
    out, first, buffer = [], 0, []
    for i, doc in enumerate(documents):
        buffer.append(doc)
        if sum(len(d) for d in buffer) < min_len:  # characters >= tokens for BPE text: cheap pre-check
            continue
        ids = corpus_ids(tokenizer, "\n\n".join(buffer))
        if len(ids) >= min_len:
            out.append((ids, range(first, i + 1)))
            first, buffer = i + 1, []
    return out


def calibration_batch(
    tokenizer,
    source: str = "wikitext2-valid",
    *,
    samples: int = 32,
    seq_len: int = 128,
    seed: int = 0,
    fallback: bool = False,
    exclude: set[int] | None = None,
) -> CalibrationBatch:
    """Draw `samples` windows of `seq_len` tokens from `source` (dataset name, text file or .npy).

    `exclude` holds indices of source documents (`Text.documents`) never to draw from: a merged
    document that contains any of them is skipped, so a batch drawn with
    `exclude=set(other.documents_used)` shares no text with `other`, whatever either's T (used to
    keep the KL anchor set disjoint from calibration candidates). Example:
        >>> batch = calibration_batch(tok, "pydoc", samples=4, seq_len=32, seed=0)
        >>> batch.input_ids.shape
        torch.Size([4, 32])
    """
    if str(source).endswith(".npy"):
        return load_npy(source)
    validate_size(samples, seq_len)
    text = load_text(source, fallback=fallback)
    pool = _token_documents(tokenizer, text.documents, seq_len)
    exclude = set(exclude) if exclude else None
    candidates = [i for i, (_, docs) in enumerate(pool) if not exclude or exclude.isdisjoint(docs)]
    if not candidates:
        raise InvalidInput(
            f"{text.label} has no document of at least {seq_len} tokens"
            f"{' outside the excluded set' if exclude else ''}; use a smaller seq_len T or a larger text."
        )
    available = sum(len(pool[i][0]) for i in candidates)
    if samples * seq_len > available:
        raise InvalidInput(
            f"asked for N x T = {samples} x {seq_len} = {samples * seq_len} tokens but {text.label} has only "
            f"{available} tokens in documents of at least {seq_len} tokens; use fewer samples N, a shorter "
            "seq_len T or a larger text."
        )
    rng = np.random.default_rng(seed)
    replace = len(candidates) < samples
    picks = rng.choice(len(candidates), size=samples, replace=replace)
    rows = []
    for p in picks:
        ids = pool[candidates[p]][0]
        start = int(rng.integers(0, len(ids) - seq_len + 1))
        rows.append(ids[start : start + seq_len])
    used = sorted({doc for p in picks for doc in pool[candidates[p]][1]})
    return CalibrationBatch(
        torch.tensor(rows, dtype=torch.long), f"{text.label}", seed, text.fallback_reason, tuple(used)
    )


def check_calibration_source(source: str, samples: int, seq_len: int) -> None:
    """What `calibration_batch` refuses before reading any text or tokenizing: a missing .npy file, a
    text name `load_text` does not know, N or T out of range (the same messages)."""
    if str(source).endswith(".npy"):
        _check_npy_path(source)  # N and T are the file's own
        return
    validate_size(samples, seq_len)
    check_text_name(source)


def _check_npy_path(path: str | Path) -> Path:
    path = Path(path)
    check_local_path(path, TEXT_ROOTS_ENV, "calibration file")
    if not path.exists():
        raise InvalidInput(f"calibration file {str(path)!r} does not exist; pass a .npy of int token ids [N, T].")
    return path


def load_npy(path: str | Path) -> CalibrationBatch:

    path = _check_npy_path(path)
    check_file_size(path, "npy")
    try:
        arr = np.load(path, allow_pickle=False)  # never unpickle user files
    except ValueError as exc:
        raise InvalidInput(f"{str(path)!r} is not a plain .npy array ({exc}); save token ids with np.save.") from exc
    if arr.ndim != 2 or not np.issubdtype(arr.dtype, np.integer) or arr.size == 0:
        raise InvalidInput(f"{str(path)!r} must hold a non-empty integer array [N, T]; got {arr.dtype} {arr.shape}.")
    validate_size(int(arr.shape[0]), int(arr.shape[1]))
    return CalibrationBatch(torch.from_numpy(arr.astype(np.int64)), f"npy:{path.name}", None)
