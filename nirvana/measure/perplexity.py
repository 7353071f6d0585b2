"""Perplexity by the paper's convention (METHOD.md section 6).

The documents are joined with "\n\n" and tokenized once; one BOS goes at the very start (when
the tokenizer has one); the ids are cut into non-overlapping windows of `seq_len` tokens and
the remainder is dropped. Every window is scored on its own (no context carried over), so its
first token is only context: a window of S tokens yields S - 1 predicted tokens.

    tokens           = windows * seq_len        tokens fed to the model (what `max_tokens` caps)
    predicted_tokens = windows * (seq_len - 1)  tokens whose NLL is averaged
    ppl              = exp(sum of NLL / predicted_tokens), accumulated in float64 from fp32 log-softmax

Results are cached on disk by content: model fingerprint + hash of the exact windows + settings.
"""

from __future__ import annotations

import hashlib
import math
import time
import weakref
from collections.abc import Callable
from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F

from nirvana.data.calibration import tensor_hash
from nirvana.data.text import Text, load_text
from nirvana.data.tokens import corpus_ids
from nirvana.errors import InvalidInput, OutOfMemory
from nirvana.models.fingerprint import model_fingerprint
from nirvana.models.weights import input_device
from nirvana.progress import Progress
from nirvana.store.evalcache import eval_cache_path, load_cached, save_cached

DEFAULT_SEQ_LEN = 512


@dataclass
class PerplexityResult:
    """One perplexity figure and exactly what it was measured on."""

    dataset: str
    split: str
    origin: str  # file path, hub id or embedded corpus
    ppl: float
    nll: float  # mean NLL per predicted token, nats
    seq_len: int
    windows: int
    tokens: int  # windows * seq_len: tokens fed to the model
    predicted_tokens: int  # windows * (seq_len - 1): tokens the mean is over
    text_tokens: int  # tokens in the whole joined text (BOS included), before windowing
    bos: bool  # whether one BOS was put at the start
    batch_size: int
    seconds: float
    fingerprint: str
    windows_hash: str
    fallback_reason: str | None = None  # set when the embedded corpus stood in for the dataset
    cache_hit: bool = False

    def to_dict(self) -> dict:
        return asdict(self)


_TOKEN_CACHE: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # tokenizer -> {text sha256: ids}


def _token_ids(tokenizer, text: str) -> list[int]:
    """Token ids of a whole corpus, memoised per tokenizer object and text: dense and pruned models
    share a tokenizer, and tokenizing WikiText-2 test (1.3 MB) costs seconds of CPU every time."""
    key = hashlib.sha256(text.encode()).hexdigest()
    try:
        per_tokenizer = _TOKEN_CACHE.setdefault(tokenizer, {})
    except TypeError:  # not weak-referenceable: no memo
        per_tokenizer = {}
    if key not in per_tokenizer:
        per_tokenizer.clear()  # one corpus per tokenizer is enough and bounds the memory
        per_tokenizer[key] = list(corpus_ids(tokenizer, text))
    return per_tokenizer[key]


def make_windows(tokenizer, text: str, seq_len: int = DEFAULT_SEQ_LEN, max_tokens: int | None = None):
    """Token windows `[W, seq_len]` of `text` by the paper's convention, and the text's token count.

    Example:
        >>> windows, n = make_windows(tok, "one two three ...", seq_len=4)
        >>> windows.shape   # (n // 4, 4), remainder dropped
    """
    if not isinstance(seq_len, int) or isinstance(seq_len, bool) or seq_len < 2:
        raise InvalidInput(f"seq_len must be an integer >= 2 (one context and one predicted token), got {seq_len!r}.")
    if max_tokens is not None and (not isinstance(max_tokens, int) or max_tokens < seq_len):
        raise InvalidInput(f"max_tokens must be an integer >= seq_len ({seq_len}), got {max_tokens!r}.")
    ids = _token_ids(tokenizer, text)
    bos = getattr(tokenizer, "bos_token_id", None)
    if bos is not None:
        ids = [bos, *ids]
    windows = len(ids) // seq_len
    if max_tokens is not None:
        windows = min(windows, max_tokens // seq_len)
    if windows == 0:
        raise InvalidInput(
            f"the text has {len(ids)} tokens, fewer than one window of seq_len={seq_len}; use a smaller seq_len "
            "or a longer text."
        )
    return torch.tensor(ids[: windows * seq_len], dtype=torch.long).view(windows, seq_len), len(ids)


@torch.no_grad()
def window_nll(model, windows: torch.Tensor, batch_size: int = 4, progress: Progress = None) -> tuple[float, int]:
    """Sum of next-token NLL (nats, float64) over `windows: [W, S]`, and the count of predicted tokens."""
    device = input_device(model)
    total, count = 0.0, 0
    n = windows.shape[0]
    for start in range(0, n, batch_size):
        chunk = windows[start : start + batch_size].to(device)  # (b, S)
        try:
            logits = model(input_ids=chunk, use_cache=False).logits  # (b, S, V)
        except torch.OutOfMemoryError as exc:
            raise OutOfMemory(
                f"a batch of {chunk.shape[0]} windows of {chunk.shape[1]} tokens did not fit; use a smaller batch size."
            ) from exc
        # fp32 log-softmax whatever the model dtype: bf16 NLLs lose about 2 digits.
        nll = F.cross_entropy(
            logits[:, :-1].float().reshape(-1, logits.shape[-1]), chunk[:, 1:].reshape(-1), reduction="sum"
        )
        total += float(nll.double())
        count += chunk[:, 1:].numel()
        del logits
        if progress:
            done = min(start + batch_size, n)
            progress(done / n, f"perplexity: {done}/{n} windows")
    return total, count


@dataclass(frozen=True)
class WindowScorer:
    """How one kind of model turns token windows into a perplexity: its eval-cache kind (and any further
    key parts), its `(model, windows, batch_size, progress) -> (sum of NLL, predicted tokens)`, the result
    type, and the result's fields of its own (`extra(windows, seq_len) -> dict`)."""

    cache_kind: str
    nll: Callable[..., tuple[float, int]]
    result_type: type[PerplexityResult]
    cache_parts: tuple = ()
    extra: Callable[[torch.Tensor, int], dict] = lambda windows, seq_len: {}


NEXT_TOKEN = WindowScorer("ppl", window_nll, PerplexityResult)  # a decoder-only model's next-token NLL


def perplexity(
    model,
    tokenizer,
    dataset: str | Text = "wikitext2",
    *,
    seq_len: int = DEFAULT_SEQ_LEN,
    max_tokens: int | None = None,
    batch_size: int = 4,
    fallback: bool = False,
    use_cache: bool = True,
    progress: Progress = None,
    scorer: WindowScorer = NEXT_TOKEN,
) -> PerplexityResult:
    """Perplexity of `model` on `dataset` (a name for `load_text`, a file path, or a `Text`), cached on
    disk by model fingerprint, the windows' hash, the weights' dtype and the scorer's key. `scorer` says
    how windows are scored (a T5's: `seq2seq.seq2seq_perplexity`).

    Example:
        >>> r = perplexity(lm.model, lm.tokenizer, "wikitext2", max_tokens=16384)
        >>> r.ppl, r.tokens, r.seq_len      # (..., 16384, 512)
    """
    if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1:
        raise InvalidInput(f"batch_size must be a positive integer, got {batch_size!r}; use e.g. 4.")
    text = dataset if isinstance(dataset, Text) else load_text(dataset, fallback=fallback)
    windows, text_tokens = make_windows(tokenizer, text.joined("\n\n"), seq_len, max_tokens)
    fingerprint, windows_hash = model_fingerprint(model), tensor_hash(windows)
    dtype = str(next(model.parameters()).dtype).replace("torch.", "")
    path = eval_cache_path(scorer.cache_kind, fingerprint, windows_hash, dtype, *scorer.cache_parts)
    cached = load_cached(path) if use_cache else None
    if cached is not None:
        # The key is the token windows, so an alias (wikitext2 / wikitext2-test) or a copied file
        # hits the same entry: report the name and origin asked for now.
        cached.update(cache_hit=True, dataset=text.name, split=text.split, origin=text.origin)
        cached["fallback_reason"] = text.fallback_reason
        if progress:
            progress(1.0, f"perplexity of {text.label} loaded from cache")
        return scorer.result_type(**cached)
    was_training = model.training
    model.eval()
    start = time.perf_counter()
    try:
        total, count = scorer.nll(model, windows, batch_size, progress)
    finally:
        model.train(was_training)
    nll = total / count
    result = scorer.result_type(
        dataset=text.name,
        split=text.split,
        origin=text.origin,
        ppl=math.exp(nll),
        nll=nll,
        seq_len=seq_len,
        windows=windows.shape[0],
        tokens=windows.numel(),
        predicted_tokens=count,
        text_tokens=text_tokens,
        bos=getattr(tokenizer, "bos_token_id", None) is not None,
        batch_size=batch_size,
        seconds=round(time.perf_counter() - start, 3),
        fingerprint=fingerprint,
        windows_hash=windows_hash,
        fallback_reason=text.fallback_reason,
        **scorer.extra(windows, seq_len),
    )
    if use_cache:
        save_cached(path, result.to_dict())
    return result
