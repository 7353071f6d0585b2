"""FLOPs and measured speed of a T5 encoder-decoder: an encoder pass, then decode steps with the KV cache.

    FLOPs: matmuls of the real linear shapes (multiply-add = 2), encoder and decoder apart
    speed: one timed encoder pass, then N greedy decode steps with the KV cache, per batch size

The decoder-only modules (`flops`, `speed`) keep their shapes of results; this module returns the same
fields where they mean the same thing, under the names of the two phases T5 has (`encoder`, `decode`)
where they do not (there is no causal prefill). The quality side (perplexity of a continuation, KL,
generations) is `nirvana.t5.measure`.
"""

from __future__ import annotations

import statistics
import time

import torch
import torch.nn as nn
from transformers.cache_utils import DynamicCache, EncoderDecoderCache

from nirvana.measure.perplexity import DEFAULT_SEQ_LEN
from nirvana.measure.speed import PeakMemory, check_speed_settings, interleaved_runs, speed_header, weights_bytes
from nirvana.measure.speed_check import phase_check, row_verdict
from nirvana.progress import Progress
from nirvana.t5.anatomy import block_weights, check_t5, kind_modules

DEFAULT_BATCH_SIZES = (1, 8)


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
    batch_sizes = check_speed_settings(models, batch_sizes, prompt_len, new_tokens, repeats, warmup)
    for m in models.values():
        check_t5(m)
    out = {
        name: speed_header(m, prompt_len, new_tokens, repeats, warmup) | {
            "phases": "encoder: one pass over the prompts; decode: new_tokens greedy steps with the KV cache",
            "flops_per_token_phase": seq2seq_phase_flops(m, prompt_len, new_tokens),
        }
        for name, m in models.items()
    }  # fmt: skip
    run = lambda m, ids: _run_once(m, ids, new_tokens)
    for b, runs in interleaved_runs(models, batch_sizes, prompt_len, new_tokens, repeats, warmup, seed, run, progress):
        for name in models:
            out[name]["results"].append(_point(runs[name], b, prompt_len, new_tokens, weights_bytes(models[name])))
    return out


def measure_seq2seq_speed(model: nn.Module, **kwargs) -> dict:
    """`measure_seq2seq_speeds` of one T5. Example:
    >>> s = measure_seq2seq_speed(lm.model, batch_sizes=(1, 8))
    >>> s["results"][0]["encoder_tokens_per_s"], s["results"][0]["decode_tokens_per_s"]
    """
    return measure_seq2seq_speeds({"model": model}, **kwargs)["model"]


def seq2seq_speedup_rows(dense: dict, pruned: dict) -> list[dict]:
    """Per batch size: the pruned T5's measured speed-up over the dense one, per phase, beside the FLOPs ideal
    (dense FLOPs / pruned FLOPs per token of the phase, from each result's `flops_per_token_phase`), and the
    per-round ratios' median, quartiles and verdict (`nirvana.measure.speed_check.phase_check`)."""
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
                **phase_check(d, p, phase, ideal),
            }
        row |= row_verdict(row, ("encoder", "decode"))
        ideal = dense["flops_per_token_phase"]["sequence"] / pruned["flops_per_token_phase"]["sequence"]
        row |= {"total_speedup": d["total_seconds"] / p["total_seconds"], "total_ideal": ideal}
        rows.append(row | {"peak_memory_ratio": p["peak_memory_bytes"] / d["peak_memory_bytes"]})
    return rows


def t5_speed_line(x: dict) -> str:
    """One point of a T5 speed result, as `eval` prints it."""
    return (
        f"encoder {x['encoder_tokens_per_s']:8.1f} tok/s  decode {x['decode_tokens_per_s']:7.1f} tok/s  "
        f"{x['latency_ms_per_token']:7.1f} ms/step  peak {x['peak_memory_bytes'] / 2**20:7.1f} MiB"
    )


def t5_speedup_rows(dense: dict, pruned: dict, dense_model, pruned_model) -> list[dict]:
    return seq2seq_speedup_rows(dense, pruned)  # the FLOPs ideal is in each result (flops_per_token_phase)
