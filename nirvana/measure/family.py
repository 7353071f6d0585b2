"""Which library functions measure a loaded model, by family: one table (`MEASURES`) for decoder-only models
and T5 encoder-decoders, looked up once per model by `family(model)`. The CLI's `eval` and `compare` and the
app's Prune & compare page measure through it, so neither branches on the architecture itself.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from nirvana.measure.compare import model_facts, speed_rows
from nirvana.measure.flops import phase_flops
from nirvana.measure.generation import generate
from nirvana.measure.perplexity import perplexity
from nirvana.measure.speed import measure_speeds
from nirvana.models.family import family_name
from nirvana.t5.measure import generate_seq2seq, seq2seq_perplexity
from nirvana.t5.speed import measure_seq2seq_speeds, seq2seq_summary, t5_speed_line, t5_speedup_rows


def _decoder_speeds(models: dict, prompt_len: int, new_tokens: int, **kwargs) -> dict:
    """`measure_speeds` with each model's FLOPs per token of the two phases beside its measurement."""
    out = measure_speeds(models, prompt_len=prompt_len, new_tokens=new_tokens, **kwargs)
    for name, model in models.items():
        out[name]["flops_per_token_phase"] = phase_flops(model, prompt_len, new_tokens)
    return out


def _decoder_speed_line(x: dict) -> str:
    return (
        f"prefill {x['prefill_tokens_per_s']:8.1f} tok/s  decode {x['decode_tokens_per_s']:7.1f} tok/s  "
        f"{x['latency_ms_per_token']:7.1f} ms/step  peak {x['peak_memory_bytes'] / 2**20:7.1f} MiB"
    )


@dataclass(frozen=True)
class Measures:
    """The library functions one family of models is measured with."""

    facts: Callable  # model -> {params, flops_per_token, flops_context, ...}
    perplexity: Callable  # (model, tokenizer, dataset, **settings) -> a result with .to_dict()
    speeds: Callable  # ({name: model}, **settings) -> {name: result with flops_per_token_phase}
    speed_line: Callable  # one point of a speed result -> the line `eval` prints
    speedup_rows: Callable  # (dense result, pruned result, dense model, pruned model) -> rows per batch size
    generate: Callable  # (model, tokenizer, prompts (None: the family's defaults), **settings) -> rows
    first_phase: str = "prefill"  # the phase before decoding: reading the prompt (a T5's: the encoder pass)
    ppl_note: str = ""  # what the perplexity is of, where it is not next-token


MEASURES = {
    "decoder-only": Measures(model_facts, perplexity, _decoder_speeds, _decoder_speed_line, speed_rows, generate),
    "t5": Measures(
        seq2seq_summary,
        seq2seq_perplexity,
        measure_seq2seq_speeds,
        t5_speed_line,
        t5_speedup_rows,
        generate_seq2seq,
        first_phase="encoder",
        ppl_note="  [continuation | prefix: each window's second half given its first]",
    ),
}


def measures(model) -> Measures:
    """The `Measures` of a loaded model's family."""
    return MEASURES[family(model)]


def family(model) -> str:
    """The key of `MEASURES` for a loaded model (`nirvana.models.family.FAMILIES`)."""
    return family_name(model)
