"""Measurements of a T5 encoder-decoder: perplexity of a continuation, KL to dense, generations, FLOPs, speed.

One split everywhere (docs/METHOD-T5.md): a window of T tokens is a pair, its first `T // 2` tokens
the encoder's input and the rest the decoder's target, read under teacher forcing (decoder inputs =
targets shifted right by the decoder start token, `model._shift_right`). It is the split the saliency
is computed on (`nirvana.scoring.seq2seq.split_windows`), so the units are scored on the function
they are measured on. The windows themselves are the decoder-only path's (`perplexity.make_windows`:
the joined text, one BOS only when the tokenizer has one, which T5's has not; no `</s>` is added).

    ppl  = exp(sum of target-token NLL / (windows * (T - T // 2)))        fp32 log-softmax, fp64 sums
    KL   = mean over target tokens of KL(P_dense || P_model), nats, on held-out pairs
    FLOPs: matmuls of the real linear shapes (multiply-add = 2), encoder and decoder apart
    speed: one timed encoder pass, then N greedy decode steps with the KV cache, per batch size

The decoder-only modules (`perplexity`, `kl`, `generation`, `flops`, `speed`) keep their shapes of
results; this module returns the same fields where they mean the same thing, under the names of the
two phases T5 has (`encoder`, `decode`) where they do not (there is no causal prefill).
"""

from __future__ import annotations

import json
import math
import statistics
import time
from collections.abc import Iterator
from dataclasses import dataclass
from importlib.resources import files

import torch
import torch.nn as nn
import torch.nn.functional as F
from transformers.cache_utils import DynamicCache, EncoderDecoderCache

from nirvana.data.calibration import tensor_hash
from nirvana.data.text import Text, load_text
from nirvana.errors import InvalidInput, OutOfMemory
from nirvana.measure.generation import normalize_prompts
from nirvana.measure.kl import DEFAULT_MAX_CACHE_BYTES, token_kl
from nirvana.measure.perplexity import DEFAULT_SEQ_LEN, PerplexityResult, make_windows
from nirvana.measure.speed import PeakMemory, device_info, memory_method, random_prompts, weights_bytes
from nirvana.models.fingerprint import model_fingerprint
from nirvana.models.t5 import block_weights, check_t5, kind_modules
from nirvana.models.weights import input_device
from nirvana.progress import Progress
from nirvana.scoring.seq2seq import split_windows
from nirvana.store.evalcache import eval_cache_path, load_cached, save_cached

PAIRING = "first seq_len // 2 tokens of each window -> encoder; the rest scored by the decoder under teacher forcing"
T5_PROMPTS = files("nirvana") / "assets" / "prompts_t5.json"  # package data: {"flan-t5": [...], "t5": [...]}
DEFAULT_BATCH_SIZES = (1, 8)


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


def seq2seq_perplexity(
    model: nn.Module,
    tokenizer,
    dataset: str | Text = "wikitext2",
    *,
    seq_len: int = DEFAULT_SEQ_LEN,
    max_tokens: int | None = None,
    batch_size: int = 4,
    fallback: bool = False,
    use_cache: bool = True,
    progress: Progress = None,
) -> Seq2SeqPerplexityResult:
    """Perplexity of each window's second half given its first (encoder input), on `dataset`.

    The windows are `make_windows`' (so `tokens` = windows x seq_len as for a decoder-only model);
    the mean is over the decoder's targets. Cached on disk like `perplexity`. Example:
        >>> r = seq2seq_perplexity(lm.model, lm.tokenizer, "wikitext2", max_tokens=16384)
        >>> r.ppl, r.windows, r.predicted_tokens      # (..., 32, 8192)
    """
    check_t5(model)
    if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1:
        raise InvalidInput(f"batch_size must be a positive integer, got {batch_size!r}; use e.g. 4.")
    text = dataset if isinstance(dataset, Text) else load_text(dataset, fallback=fallback)
    windows, text_tokens = make_windows(tokenizer, text.joined("\n\n"), seq_len, max_tokens)
    fingerprint, windows_hash = model_fingerprint(model), tensor_hash(windows)
    dtype = str(next(model.parameters()).dtype).replace("torch.", "")
    path = eval_cache_path("ppl-seq2seq", fingerprint, windows_hash, dtype, PAIRING)
    cached = load_cached(path) if use_cache else None
    if cached is not None:
        cached.update(cache_hit=True, dataset=text.name, split=text.split, origin=text.origin)
        cached["fallback_reason"] = text.fallback_reason
        if progress:
            progress(1.0, f"perplexity of {text.label} loaded from cache")
        return Seq2SeqPerplexityResult(**cached)
    was_training = model.training
    model.eval()
    start = time.perf_counter()
    try:
        total, count = pair_nll(model, windows, batch_size, progress)
    finally:
        model.train(was_training)
    result = Seq2SeqPerplexityResult(
        dataset=text.name,
        split=text.split,
        origin=text.origin,
        ppl=math.exp(total / count),
        nll=total / count,
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
        encoder_tokens=windows.shape[0] * (seq_len // 2),
    )
    if use_cache:
        save_cached(path, result.to_dict())
    return result


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
    device = input_device(model)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else model.config.pad_token_id
    sampling = {"do_sample": True, "temperature": temperature, "top_p": top_p} if do_sample else {"do_sample": False}
    rows = []
    for i, item in enumerate(items):
        enc = tokenizer(item["prompt"], return_tensors="pt").to(device)  # T5's tokenizer appends </s>
        if do_sample:
            torch.manual_seed(seed)
        start = time.perf_counter()
        out = model.generate(**enc, max_new_tokens=max_new_tokens, pad_token_id=pad, **sampling)  # (1, 1 + new)
        seconds = time.perf_counter() - start
        new = out[0, 1:]  # out[0, 0] is the decoder start token
        row = {
            "id": item["id"],
            "prompt": item["prompt"],
            "output": tokenizer.decode(new, skip_special_tokens=True).strip(),
            "new_tokens": int(new.numel()),
            "seconds": round(seconds, 3),
            "mode": f"sampled(seed={seed}, T={temperature}, top_p={top_p})" if do_sample else "greedy",
            "chat": False,
        }
        rows.append(row | ({"prompt_set": prompt_set} if prompt_set else {}))
        if progress:
            progress((i + 1) / len(items), f"generated {i + 1}/{len(items)}")
    return rows


# ---- FLOPs from the real linear shapes --------------------------------------------------------------------------


def _weights(module: nn.Module, names) -> int:
    return sum(getattr(module, n).weight.numel() for n in names if isinstance(getattr(module, n, None), nn.Linear))


def _heads(attention: nn.Module) -> int:
    return attention.q.out_features // attention.key_value_proj_dim  # a sliced module keeps n_heads dense


def seq2seq_flops(model: nn.Module, encoder_len: float, decoder_context: float) -> dict[str, float]:
    """Matmul FLOPs (multiply-add = 2) of one encoder token and one decoder token, by part.

        encoder token = 2 W_enc + 4 T_enc d sum_l H_enc[l]        (every token attends to all T_enc)
        decoder token = 2 (W_self + W_cross_q,o + W_ffn) + 4 c d sum H_self + 4 T_enc d sum H_cross + 2 V D
        cross K/V     = 2 W_cross_k,v per encoder token, computed once per sequence (the first decode step)

    W are the weights of the linears as they are (a pruned model at its kept widths), d the head size,
    `c` = `decoder_context` the self-attended positions. Norms, biases, softmax and activations are left out.
    """
    check_t5(model)
    d = model.config.d_kv
    ffn = ("wi", "wi_0", "wi_1", "wo")
    enc_self, dec_self, cross = (kind_modules(model, k) for k in ("enc_self", "dec_self", "cross"))
    w_enc = sum(_weights(m, "qkvo") for m in enc_self) + sum(_weights(m, ffn) for m in kind_modules(model, "enc_ffn"))
    w_dec = sum(_weights(m, "qkvo") for m in dec_self) + sum(_weights(m, "qo") for m in cross)
    w_dec += sum(_weights(m, ffn) for m in kind_modules(model, "dec_ffn"))
    head = model.get_output_embeddings()
    parts = {
        "encoder_projections": 2.0 * w_enc,
        "encoder_attention": 4.0 * encoder_len * d * sum(_heads(m) for m in enc_self),
        "cross_kv_per_encoder_token": 2.0 * sum(_weights(m, "kv") for m in cross),
        "decoder_projections": 2.0 * w_dec,
        "decoder_self_attention": 4.0 * decoder_context * d * sum(_heads(m) for m in dec_self),
        "decoder_cross_attention": 4.0 * encoder_len * d * sum(_heads(m) for m in cross),
        "lm_head": 2.0 * head.in_features * head.out_features,
    }
    parts["encoder_token"] = parts["encoder_projections"] + parts["encoder_attention"]
    parts["decoder_token"] = sum(parts[k] for k in ("decoder_projections", "decoder_self_attention"))
    parts["decoder_token"] += parts["decoder_cross_attention"] + parts["lm_head"]
    return parts | {"encoder_len": encoder_len, "decoder_context": decoder_context}


def seq2seq_phase_flops(model: nn.Module, prompt_len: int, new_tokens: int) -> dict[str, float]:
    """FLOPs per token of the two phases `measure_seq2seq_speed` times, and of one whole sequence.

    encoder: per prompt token. decode: per new token, step i attending to i decoder positions (mean
    (N + 1) / 2), plus the cross K/V of the T encoder states spread over the N steps (computed at the first).
    """
    f = seq2seq_flops(model, prompt_len, (new_tokens + 1) / 2)
    decode = f["decoder_token"] + f["cross_kv_per_encoder_token"] * prompt_len / new_tokens
    return {
        "encoder": f["encoder_token"],
        "decode": decode,
        "sequence": prompt_len * f["encoder_token"] + new_tokens * decode,
    }


def seq2seq_summary(model: nn.Module, context: int = DEFAULT_SEQ_LEN) -> dict:
    """Parameters and FLOPs per token, the facts `eval` prints, for a T5: `flops_per_token` is the mean over
    the tokens of one window of `context` split in halves (encoder reads T//2, decoder is teacher forced on
    the rest: what the perplexity runs)."""
    half = context // 2
    rest = context - half
    f = seq2seq_flops(model, half, (rest + 1) / 2)
    window = half * (f["encoder_token"] + f["cross_kv_per_encoder_token"]) + rest * f["decoder_token"]
    return {
        "params": sum(p.numel() for p in model.parameters()),
        "block_weights": block_weights(model),
        "flops_per_token": window / context,
        "flops_context": context,
        "flops_breakdown": {k: v for k, v in f.items() if k not in ("encoder_len", "decoder_context")},
    }


# ---- measured speed: encoder pass plus decode steps with the KV cache --------------------------------------------


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@torch.no_grad()
def _run_once(model: nn.Module, ids: torch.Tensor, new_tokens: int) -> dict:
    """One timed encoder pass over `ids: [B, T]` and `new_tokens` greedy decode steps (no EOS stop)."""
    device, mask = ids.device, torch.ones_like(ids)
    start_id = model.config.decoder_start_token_id
    with PeakMemory(device) as mem:
        _sync(device)
        t0, c0 = time.perf_counter(), time.process_time()
        encoded = model.get_encoder()(input_ids=ids, attention_mask=mask)
        _sync(device)
        t1, c1 = time.perf_counter(), time.process_time()
        # a cache without a config grows per layer: transformers sizes a config's cache by the encoder's depth
        cache = EncoderDecoderCache(DynamicCache(), DynamicCache())
        token = torch.full((ids.shape[0], 1), start_id, dtype=torch.long, device=device)
        for _ in range(new_tokens):
            out = model(
                encoder_outputs=encoded, attention_mask=mask, decoder_input_ids=token, cache=cache, use_cache=True
            )
            cache, token = out.cache, out.logits[:, -1].argmax(dim=-1, keepdim=True)  # (B, 1)
        _sync(device)
        t2, c2 = time.perf_counter(), time.process_time()
    return {"encoder": t1 - t0, "encoder_cpu": c1 - c0, "decode": t2 - t1, "decode_cpu": c2 - c1, "mem": mem}


def _point(runs: list[dict], batch_size: int, prompt_len: int, new_tokens: int, weights: int) -> dict:
    med = {k: statistics.median(r[k] for r in runs) for k in ("encoder", "encoder_cpu", "decode", "decode_cpu")}
    return {
        "batch_size": batch_size,
        "prompt_len": prompt_len,
        "new_tokens": new_tokens,
        "encoder_seconds": med["encoder"],
        "encoder_tokens_per_s": batch_size * prompt_len / med["encoder"],
        "decode_seconds": med["decode"],  # N steps, the first one computing the cross K/V
        "decode_tokens_per_s": batch_size * new_tokens / med["decode"],
        "latency_ms_per_token": med["decode"] / new_tokens * 1000,
        "total_seconds": med["encoder"] + med["decode"],
        "encoder_cpu_seconds": med["encoder_cpu"],
        "decode_cpu_seconds": med["decode_cpu"],
        "encoder_tokens_per_cpu_s": batch_size * prompt_len / max(med["encoder_cpu"], 1e-9),
        "decode_tokens_per_cpu_s": batch_size * new_tokens / max(med["decode_cpu"], 1e-9),
        "peak_memory_bytes": weights + int(max(r["mem"].extra for r in runs)),
        "peak_extra_bytes": int(max(r["mem"].extra for r in runs)),
        "weights_bytes": weights,
        "encoder_runs": [round(r["encoder"], 5) for r in runs],
        "decode_runs": [round(r["decode"], 5) for r in runs],
    }


def measure_seq2seq_speeds(
    models: dict,
    *,
    batch_sizes=DEFAULT_BATCH_SIZES,
    prompt_len: int = 128,
    new_tokens: int = 32,
    repeats: int = 3,
    warmup: int = 1,
    seed: int = 0,
    progress: Progress = None,
) -> dict[str, dict]:
    """Measured speed of several T5s (dense and pruned) on the same random prompts, repeats interleaved.

    Returns {name: {device facts, settings, "flops_per_token_phase": seq2seq_phase_flops, "results": [one
    point per batch size: encoder and decode seconds (medians), tokens/s, ms per step, peak memory]}}.
    """
    if not models:
        raise InvalidInput("no model to measure; pass {name: T5 model}.")
    batch_sizes = [int(b) for b in batch_sizes]
    if not batch_sizes or any(b < 1 for b in batch_sizes):
        raise InvalidInput(f"batch sizes must be positive integers, got {batch_sizes!r}.")
    checks = (
        ("prompt_len", prompt_len, 1),
        ("new_tokens", new_tokens, 1),
        ("repeats", repeats, 1),
        ("warmup", warmup, 0),
    )
    for label, value, lo in checks:
        if not isinstance(value, int) or isinstance(value, bool) or value < lo:
            raise InvalidInput(f"{label} must be an integer >= {lo}, got {value!r}.")
    for m in models.values():
        check_t5(m)
    vocab = min(m.get_input_embeddings().weight.shape[0] for m in models.values())
    states = {name: m.training for name, m in models.items()}
    out = {
        name: {
            **device_info(input_device(m)),
            "dtype": str(next(m.parameters()).dtype).replace("torch.", ""),
            "prompt_len": prompt_len,
            "new_tokens": new_tokens,
            "repeats": repeats,
            "warmup": warmup,
            "statistic": "median",
            "phases": "encoder: one pass over the prompts; decode: new_tokens greedy steps with the KV cache",
            "memory_method": memory_method(input_device(m)),
            "flops_per_token_phase": seq2seq_phase_flops(m, prompt_len, new_tokens),
            "results": [],
        }
        for name, m in models.items()
    }
    total, done = len(batch_sizes) * (warmup + repeats) * len(models), 0
    try:
        for m in models.values():
            m.eval()
        for b in batch_sizes:
            runs: dict[str, list] = {name: [] for name in models}
            ids = random_prompts(vocab, b, prompt_len, seed)
            for i in range(warmup + repeats):
                for name, m in models.items():
                    try:
                        run = _run_once(m, ids.to(input_device(m)), new_tokens)
                    except torch.OutOfMemoryError as exc:
                        raise OutOfMemory(
                            f"batch size {b} with {prompt_len} + {new_tokens} tokens did not fit for {name}; "
                            "use smaller batch sizes."
                        ) from exc
                    if i >= warmup:
                        runs[name].append(run)
                    done += 1
                    if progress:
                        progress(done / total, f"speed: {name}, batch {b}, run {i + 1}/{warmup + repeats}")
            for name in models:
                out[name]["results"].append(_point(runs[name], b, prompt_len, new_tokens, weights_bytes(models[name])))
    finally:
        for name, m in models.items():
            m.train(states[name])
    return out


def measure_seq2seq_speed(model: nn.Module, **kwargs) -> dict:
    """`measure_seq2seq_speeds` of one T5. Example:
    >>> s = measure_seq2seq_speed(lm.model, batch_sizes=(1, 8))
    >>> s["results"][0]["encoder_tokens_per_s"], s["results"][0]["decode_tokens_per_s"]
    """
    return measure_seq2seq_speeds({"model": model}, **kwargs)["model"]


def seq2seq_speedup_rows(dense: dict, pruned: dict) -> list[dict]:
    """Per batch size: the pruned T5's measured speed-up over the dense one, per phase, beside the FLOPs ideal
    (dense FLOPs / pruned FLOPs per token of the phase, from each result's `flops_per_token_phase`)."""
    rows = []
    for d, p in zip(dense["results"], pruned["results"]):
        row = {"batch_size": d["batch_size"]}
        for phase in ("encoder", "decode"):
            speedup = p[f"{phase}_tokens_per_s"] / d[f"{phase}_tokens_per_s"]
            ideal = dense["flops_per_token_phase"][phase] / pruned["flops_per_token_phase"][phase]
            row |= {
                f"{phase}_tokens_per_s_dense": d[f"{phase}_tokens_per_s"],
                f"{phase}_tokens_per_s": p[f"{phase}_tokens_per_s"],
                f"{phase}_speedup": speedup,
                f"{phase}_ideal": ideal,
                f"{phase}_fraction_of_ideal": speedup / ideal,
                f"{phase}_speedup_cpu_time": p[f"{phase}_tokens_per_cpu_s"] / d[f"{phase}_tokens_per_cpu_s"],
            }
        ideal = dense["flops_per_token_phase"]["sequence"] / pruned["flops_per_token_phase"]["sequence"]
        row |= {"total_speedup": d["total_seconds"] / p["total_seconds"], "total_ideal": ideal}
        rows.append(row | {"peak_memory_ratio": p["peak_memory_bytes"] / d["peak_memory_bytes"]})
    return rows
