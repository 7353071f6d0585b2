"""Quality of a T5 encoder-decoder: perplexity of a continuation, KL to dense, generations (its FLOPs and
measured speed: `nirvana.t5.speed`).

One split everywhere (docs/METHOD-T5.md): a window of T tokens is a pair, its first `T // 2` tokens
the encoder's input and the rest the decoder's target, read under teacher forcing (decoder inputs =
targets shifted right by the decoder start token, `model._shift_right`). It is the split the saliency
is computed on (`nirvana.t5.scoring.split_windows`), so the units are scored on the function
they are measured on. The windows themselves are the decoder-only path's (`perplexity.make_windows`:
the joined text, one BOS only when the tokenizer has one, which T5's has not; no `</s>` is added).

    ppl  = exp(sum of target-token NLL / (windows * (T - T // 2)))        fp32 log-softmax, fp64 sums
    KL   = mean over target tokens of KL(P_dense || P_model), nats, on held-out pairs

The decoder-only modules (`perplexity`, `kl`, `generation`) keep their shapes of results; this module
returns the same fields where they mean the same thing.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from importlib.resources import files

import torch
import torch.nn as nn
import torch.nn.functional as F

from nirvana.data.text import Text
from nirvana.errors import InvalidInput, OutOfMemory
from nirvana.measure.generation import Sampling, generate_one, normalize_prompts
from nirvana.measure.kl import DEFAULT_MAX_CACHE_BYTES, token_kl
from nirvana.measure.perplexity import PerplexityResult, WindowScorer, perplexity
from nirvana.models.weights import input_device
from nirvana.progress import Progress
from nirvana.t5.anatomy import check_t5
from nirvana.t5.scoring import split_windows

PAIRING = "first seq_len // 2 tokens of each window -> encoder; the rest scored by the decoder under teacher forcing"
T5_PROMPTS = files("nirvana") / "assets" / "prompts_t5.json"  # package data: {"flan-t5": [...], "t5": [...]}


def _pair_logits(model: nn.Module, encoder_ids: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Decoder logits `[n, T_dec, V]` of pairs (encoder ids `[n, T_enc]`, targets `[n, T_dec]`), teacher forced."""
    device = input_device(model)
    enc, tgt = encoder_ids.to(device), targets.to(device)
    try:
        return model(input_ids=enc, decoder_input_ids=model._shift_right(tgt), use_cache=False).logits
    except torch.OutOfMemoryError as exc:
        raise OutOfMemory(
            f"a batch of {enc.shape[0]} pairs of {enc.shape[1]} + {tgt.shape[1]} tokens did not fit; "
            "use a smaller batch size."
        ) from exc


# ---- perplexity of a continuation given its prefix -------------------------------------------------------------


@dataclass
class Seq2SeqPerplexityResult(PerplexityResult):
    """`PerplexityResult`'s fields for a T5: `predicted_tokens` are the decoder's targets (windows x (T - T//2))."""

    encoder_tokens: int = 0  # windows * (seq_len // 2): the prefixes the encoder reads
    pairing: str = PAIRING


@torch.no_grad()
def pair_nll(model: nn.Module, windows: torch.Tensor, batch_size: int = 4, progress: Progress = None):
    """(sum of the targets' NLL in nats (fp64), number of target tokens) over `windows: [W, T]` split in halves."""
    encoder_ids, targets = split_windows(windows)
    total, count, n = 0.0, 0, windows.shape[0]
    for start in range(0, n, batch_size):
        tgt = targets[start : start + batch_size]
        logits = _pair_logits(model, encoder_ids[start : start + batch_size], tgt)  # (b, T_dec, V)
        # fp32 log-softmax whatever the model dtype, as the decoder-only perplexity
        nll = F.cross_entropy(
            logits.float().reshape(-1, logits.shape[-1]), tgt.to(logits.device).reshape(-1), reduction="sum"
        )
        total += float(nll.double())
        count += tgt.numel()
        if progress:
            done = min(start + batch_size, n)
            progress(done / n, f"perplexity (continuation | prefix): {done}/{n} windows")
    return total, count


PAIR_SCORER = WindowScorer(
    "ppl-seq2seq",
    pair_nll,
    Seq2SeqPerplexityResult,
    cache_parts=(PAIRING,),
    extra=lambda windows, seq_len: {"encoder_tokens": windows.shape[0] * (seq_len // 2)},
)


def seq2seq_perplexity(
    model: nn.Module, tokenizer, dataset: str | Text = "wikitext2", **settings
) -> Seq2SeqPerplexityResult:
    """Perplexity of each window's second half given its first (encoder input), on `dataset`; `settings`
    are `perplexity`'s (seq_len, max_tokens, batch_size, fallback, use_cache, progress).

    The windows are `make_windows`' (so `tokens` = windows x seq_len as for a decoder-only model);
    the mean is over the decoder's targets. Cached on disk like `perplexity`. Example:
        >>> r = seq2seq_perplexity(lm.model, lm.tokenizer, "wikitext2", max_tokens=16384)
        >>> r.ppl, r.windows, r.predicted_tokens      # (..., 32, 8192)
    """
    check_t5(model)
    return perplexity(model, tokenizer, dataset, scorer=PAIR_SCORER, **settings)


# ---- KL to dense on held-out pairs -----------------------------------------------------------------------------


@torch.no_grad()
def pair_log_probs(model: nn.Module, encoder_ids: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """fp32 log-softmax of the decoder's logits on pairs -> `[n, T_dec, V]` on the CPU (eval mode)."""
    was_training = model.training
    model.eval()
    try:
        logits = _pair_logits(model, encoder_ids, targets)
    finally:
        model.train(was_training)
    return logits.float().log_softmax(dim=-1).cpu()


class Seq2SeqReference:
    """The dense T5's decoder log-probs on held-out pairs (windows `input_ids: [M, T]`, split in halves),
    computed once; chunks past `max_cache_bytes` are recomputed at each measurement (`kl.DenseReference`).

    Example:
        >>> ref = Seq2SeqReference(dense, heldout.input_ids)      # e.g. a calibration_batch of another seed
        >>> seq2seq_kl_to_dense(pruned, ref)                       # mean nats per target token
    """

    def __init__(
        self,
        model: nn.Module,
        input_ids: torch.Tensor,
        *,
        chunk_size: int = 8,
        max_cache_bytes: int = DEFAULT_MAX_CACHE_BYTES,
        progress: Progress = None,
    ):
        check_t5(model)
        self.model = model
        self.encoder_ids, self.targets = (
            t.detach().cpu() for t in split_windows(input_ids)
        )  # [M, T//2], [M, T - T//2]
        self.chunk_size = max(1, int(chunk_size))
        self.starts = list(range(0, self.targets.shape[0], self.chunk_size))
        self._cache: list[torch.Tensor | None] = [None] * len(self.starts)
        per_chunk = self.chunk_size * self.targets.shape[1] * model.get_output_embeddings().weight.shape[0] * 4
        self.cached_chunks = min(len(self.starts), max(0, int(max_cache_bytes)) // per_chunk)
        for i in range(self.cached_chunks):
            self._cache[i] = pair_log_probs(model, *self._pairs(i))
            if progress:
                progress((i + 1) / len(self.starts), f"dense log-probs {i + 1}/{len(self.starts)} chunks")

    @property
    def num_tokens(self) -> int:
        """Target tokens the KL is averaged over."""
        return self.targets.numel()

    def _pairs(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        s = slice(self.starts[i], self.starts[i] + self.chunk_size)
        return self.encoder_ids[s], self.targets[s]

    def chunks(self) -> Iterator[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
        """Yield (encoder ids, targets, dense log-probs `[n, T_dec, V]`) chunk by chunk."""
        for i in range(len(self.starts)):
            enc, tgt = self._pairs(i)
            cached = self._cache[i]
            yield enc, tgt, cached if cached is not None else pair_log_probs(self.model, enc, tgt)


def seq2seq_kl_to_dense(model: nn.Module, reference: Seq2SeqReference, progress: Progress = None) -> float:
    """Mean over the reference's target tokens of KL(P_dense || P_model) of the next decoder token, nats."""
    check_t5(model)
    total, n_chunks = torch.zeros((), dtype=torch.float64), len(reference.starts)
    for i, (enc, tgt, dense_logp) in enumerate(reference.chunks()):
        total += token_kl(dense_logp, pair_log_probs(model, enc, tgt)).double().sum()
        if progress:
            progress((i + 1) / n_chunks, f"KL chunk {i + 1}/{n_chunks}")
    return float(total / reference.num_tokens)


# ---- generations ------------------------------------------------------------------------------------------------


def t5_prompt_set(model: nn.Module) -> str:
    """ "t5" for T5 v1.0 (ReLU FFN, trained on prefixed tasks: "summarize:", "translate English to German:"),
    "flan-t5" for gated-GELU FFNs (v1.1 and FLAN-T5: instructions)."""
    check_t5(model)
    return "flan-t5" if getattr(model.config, "is_gated_act", False) else "t5"


def t5_default_prompts(model: nn.Module) -> list[dict]:
    """The default prompts [{id, prompt}] for this kind of T5 (`nirvana/assets/prompts_t5.json`)."""
    return json.loads(T5_PROMPTS.read_text())[t5_prompt_set(model)]


@torch.no_grad()
def generate_seq2seq(
    model: nn.Module,
    tokenizer,
    prompts=None,
    *,
    max_new_tokens: int = 48,
    do_sample: bool = False,
    seed: int = 0,
    temperature: float = 0.7,
    top_p: float = 0.9,
    chat: bool = False,
    progress: Progress = None,
) -> list[dict]:
    """One decoder output per prompt (the prompt is the encoder's input as written: a T5 has no chat template,
    so `chat=True` is refused).

    Rows as `generation.generate`'s: {id, prompt, output, new_tokens, seconds, mode, chat (False)}, plus
    `prompt_set` when the defaults were used. `prompts`: strings or {id, prompt}; None: `t5_default_prompts`.
    Greedy by default; sampling reseeds before every prompt. Example:
        >>> generate_seq2seq(lm.model, lm.tokenizer, ["translate English to German: Hello."])[0]["output"]
    """
    check_t5(model)
    if not isinstance(max_new_tokens, int) or isinstance(max_new_tokens, bool) or max_new_tokens < 1:
        raise InvalidInput(f"max_new_tokens must be a positive integer, got {max_new_tokens!r}.")
    if chat:
        raise InvalidInput("a T5 has no chat template: its prompt is the encoder's input as written; drop chat.")
    prompt_set = t5_prompt_set(model) if prompts is None else None
    items = normalize_prompts(t5_default_prompts(model) if prompts is None else list(prompts))
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else model.config.pad_token_id
    sampling = Sampling(do_sample, seed, temperature, top_p)
    rows = []
    for i, item in enumerate(items):
        enc = tokenizer(item["prompt"], return_tensors="pt")  # T5's tokenizer appends </s>
        # out[0, 0] is the decoder start token
        row = generate_one(model, tokenizer, item, enc, 1, max_new_tokens, pad, sampling) | {"chat": False}
        rows.append(row | ({"prompt_set": prompt_set} if prompt_set else {}))
        if progress:
            progress((i + 1) / len(items), f"generated {i + 1}/{len(items)}")
    return rows
