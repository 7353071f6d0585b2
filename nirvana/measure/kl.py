"""KL(P_dense || P_pruned) on an anchor set: how far pruning moved the next-token distributions.

METHOD.md section 4: per anchor token, KL = sum over the vocabulary of p_dense (log p_dense -
log p_pruned); the reported figure is the mean over all anchor tokens (every position of every
anchor sequence), computed in fp32 (accumulated in fp64) whatever the model dtype. `kl_per_sequence` keeps
the mean per anchor sequence, for paired standard errors between two pruned models.

Memory decision: the reference anchor (128 x 64 tokens, vocabulary 49152) has 1.6 GB of dense
log-probs in fp32. Every KL measurement (each calibration candidate, each gamma, each benchmark
row) compares against the same dense distributions, so `DenseReference` computes them once and
keeps them in memory, in chunks of `chunk_size` sequences, as long as they fit in
`max_cache_bytes` (default 2 GiB). Chunks past that budget are not stored: the dense forward is
repeated for them at each measurement (identical numbers, twice the compute for those chunks).
`max_cache_bytes=0` gives the bounded-memory mode (peak ~ 3 chunks of [chunk, T, V] fp32).
"""

from __future__ import annotations

from collections.abc import Iterator

import torch

from nirvana.models.weights import input_device
from nirvana.progress import Progress

DEFAULT_MAX_CACHE_BYTES = 2 * 2**30


@torch.no_grad()
def log_probs(model: torch.nn.Module, input_ids: torch.Tensor) -> torch.Tensor:
    """fp32 log-softmax of the logits of `input_ids: [n, T]` -> `[n, T, V]` on the CPU (eval mode)."""
    was_training = model.training
    model.eval()
    try:
        logits = model(input_ids=input_ids.to(input_device(model)), use_cache=False).logits  # (n, T, V)
    finally:
        model.train(was_training)
    return logits.float().log_softmax(dim=-1).cpu()


def token_kl(dense_logp: torch.Tensor, pruned_logp: torch.Tensor) -> torch.Tensor:
    """KL(P_dense || P_pruned) per token: `[n, T, V]` log-probs each -> `[n, T]` (nats, fp32).

    Zero-probability dense entries (log p = -inf, e.g. masked vocabulary) contribute 0, not NaN.
    """
    dense_logp, pruned_logp = dense_logp.float(), pruned_logp.float()
    p = dense_logp.exp()
    terms = torch.where(p > 0, p * (dense_logp - pruned_logp), torch.zeros((), dtype=p.dtype))
    return terms.sum(-1)


class DenseReference:
    """The dense model's log-probs on a fixed anchor set `input_ids: [M, T]`, computed once.

    Example:
        >>> ref = DenseReference(model, anchor.input_ids)
        >>> kl_to_dense(apply_plan(model, plan), ref)      # mean nats per token
        0.0873...
    """

    def __init__(
        self,
        model: torch.nn.Module,
        input_ids: torch.Tensor,
        *,
        chunk_size: int = 8,
        max_cache_bytes: int = DEFAULT_MAX_CACHE_BYTES,
        progress: Progress = None,
    ):
        self.model = model
        self.input_ids = input_ids.detach().cpu()  # [M, T] int64
        self.chunk_size = max(1, int(chunk_size))
        self.starts = list(range(0, self.input_ids.shape[0], self.chunk_size))
        self._cache: list[torch.Tensor | None] = [None] * len(self.starts)
        vocab = model.get_output_embeddings().weight.shape[0]
        per_chunk = self.chunk_size * self.input_ids.shape[1] * vocab * 4
        self.cached_chunks = min(len(self.starts), max(0, int(max_cache_bytes)) // per_chunk)
        for i, start in enumerate(self.starts[: self.cached_chunks]):
            self._cache[i] = log_probs(model, self.input_ids[start : start + self.chunk_size])
            if progress:
                progress((i + 1) / len(self.starts), f"dense log-probs {i + 1}/{len(self.starts)} chunks")

    @property
    def num_tokens(self) -> int:
        return self.input_ids.numel()

    @property
    def cached_bytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self._cache if t is not None)

    def chunks(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """Yield (ids `[n, T]`, dense log-probs `[n, T, V]`) chunk by chunk, recomputing uncached ones."""
        for i, start in enumerate(self.starts):
            ids = self.input_ids[start : start + self.chunk_size]
            cached = self._cache[i]
            yield ids, cached if cached is not None else log_probs(self.model, ids)


def kl_per_sequence(model: torch.nn.Module, reference: DenseReference, progress: Progress = None) -> torch.Tensor:
    """Mean KL(P_dense || P_model) over each anchor sequence's tokens, `[M]` in fp64 (nats).

    Two models measured on the same anchor give paired per-sequence values: their difference's standard error
    (`nirvana.measure.paired`) says whether one really is closer to dense than the other."""
    parts, n_chunks = [], len(reference.starts)
    for i, (ids, dense_logp) in enumerate(reference.chunks()):
        parts.append(token_kl(dense_logp, log_probs(model, ids)).double().mean(-1))
        if progress:
            progress((i + 1) / n_chunks, f"KL chunk {i + 1}/{n_chunks}")
    return torch.cat(parts)


def kl_to_dense(model: torch.nn.Module, reference: DenseReference, progress: Progress = None) -> float:
    """Mean over anchor tokens of KL(P_dense || P_model), in nats (summed over the vocabulary). Every anchor
    sequence has the same length, so this is the mean of `kl_per_sequence`."""
    return float(kl_per_sequence(model, reference, progress).mean())
