"""The model families the library prunes, as one table (`FAMILIES`), and `family_name`: the one place that
tells a model's family from its config.

A family is what truly differs between layouts: the units its plans cut, the transformers class that loads
it, lm-eval's backend for it, and whether it has a decoder-only `ModelShape` (the allocation's views and cost
models read one). The functions that differ per family live with their layer, in a table keyed by these
names: `nirvana.measure.family.MEASURES` (measuring), `nirvana.pipeline.FAMILY_STEPS` (score, prune),
`nirvana.checkpoints.pruned.SAVED` (a pruned folder's loading code and reader), `nirvana.checkpoints.facts`
(what `info` prints), `nirvana.pruning.allocation.RULES` (the allocation), `nirvana.guard.memory` (the weights'
memory). Nothing else asks which family a model is. A family's own code is one folder (T5: `nirvana/t5/`).

    >>> family(AutoConfig.from_pretrained("google/t5-v1_1-small")).units
    ('enc_self', 'dec_self', 'cross', 'enc_ffn', 'dec_ffn')
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from nirvana.errors import InvalidInput
from nirvana.models.architectures import get_architecture
from nirvana.t5.anatomy import LABELS as T5_UNITS
from nirvana.t5.anatomy import is_t5


@dataclass(frozen=True)
class Family:
    """One family of models: its name (the tables' key) and the facts that differ."""

    name: str
    label: str  # for people
    units: tuple[str, ...]  # the unit kinds its scores and plans hold
    auto_class: str  # the transformers Auto class that loads a checkpoint of it
    harness: str  # lm-eval's backend: "causal" (next-token) or "seq2seq" (the encoder reads the context)
    decoder_shape: bool  # has a decoder-only `ModelShape` (gamma*, the architecture view, the time estimates)
    allocations: tuple[str, ...]  # how its budget may be spread (`Allocation.kind`); the first is the default
    check_layout: Callable = lambda config: None  # (config) -> refuses a layout it cannot read, before any weight


FAMILIES: dict[str, Family] = {
    f.name: f
    for f in (
        Family(
            "decoder-only", "decoder-only (Llama, Qwen2, Mistral, Gemma-3, ...)", ("attn", "mlp"),
            "AutoModelForCausalLM", "causal", decoder_shape=True, allocations=("global", "uniform"),
            check_layout=get_architecture,
        ),
        Family(
            "t5", "T5 encoder-decoder", tuple(T5_UNITS), "AutoModelForSeq2SeqLM", "seq2seq", decoder_shape=False,
            allocations=("global", "per-stack"),
        ),
    )
}  # fmt: skip


def expect_family(value, name: str, message: str) -> None:
    """Refuse scores or a plan (their `family`) of another family than `name`, with `message`."""
    if getattr(value, "family", None) != name:
        raise InvalidInput(message)


def family_name(model_or_config) -> str:
    """The family of a model, its config, or anything with a `model_type` (a registry reference)."""
    return "t5" if is_t5(model_or_config) else "decoder-only"


def family(model_or_config) -> Family:
    """The `FAMILIES` row of a model or config."""
    return FAMILIES[family_name(model_or_config)]


__all__ = ["FAMILIES", "Family", "expect_family", "family", "family_name"]
