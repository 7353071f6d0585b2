"""Continuations of a prompt set, for reading dense and pruned outputs side by side.

Prompts come from `nirvana/assets/prompts.json` (package data; pass a file of your own to change
them) or any list of strings / {id, prompt}.
Each prompt is wrapped in the model's chat template when the tokenizer has one (pass
`chat=False` for raw continuation). Greedy by default; `do_sample=True` samples with a seed that
is reset before every prompt, so dense and pruned draw from the same random stream.
Rows are plain dicts: `pandas.DataFrame(rows)` shows them as a table.
"""

from __future__ import annotations

import difflib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path

import torch

from nirvana.errors import InvalidInput
from nirvana.measure.compare import generation_rows
from nirvana.models.weights import input_device
from nirvana.progress import Progress, sub_progress
from nirvana.pruning.slicing import apply_plan, measure_plan

DEFAULT_PROMPTS = files("nirvana") / "assets" / "prompts.json"  # package data: found when installed too


def load_prompts(path: str | Path | None = None) -> list[dict]:
    """Prompts as [{id, prompt}] from a JSON file ({"prompts": [...]} or a bare list; items str or dict)."""
    path = Path(path) if path else DEFAULT_PROMPTS
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError as exc:
        raise InvalidInput(f"prompt file {str(path)!r} does not exist; pass a JSON list of prompts.") from exc
    except (OSError, json.JSONDecodeError) as exc:
        raise InvalidInput(f"prompt file {str(path)!r} is not readable JSON ({exc}).") from exc
    return normalize_prompts(data.get("prompts") if isinstance(data, dict) else data)


def normalize_prompts(items) -> list[dict]:
    """Accept strings or {id, prompt} dicts; give every prompt an id."""
    if not isinstance(items, list) or not items:
        raise InvalidInput("prompts must be a non-empty list of strings or {id, prompt} objects.")
    out = []
    for i, item in enumerate(items):
        if isinstance(item, str):
            item = {"id": f"p{i}", "prompt": item}
        if not isinstance(item, dict) or not isinstance(item.get("prompt"), str) or not item["prompt"].strip():
            raise InvalidInput(f"prompt {i} must be a non-empty string or an object with a 'prompt' string.")
        out.append({"id": str(item.get("id", f"p{i}")), "prompt": item["prompt"]})
    return out


def prompt_text(tokenizer, prompt: str, chat: bool = True) -> str:
    """The prompt as the model sees it: in the chat template when there is one and `chat` is on."""
    if chat and getattr(tokenizer, "chat_template", None):
        return tokenizer.apply_chat_template(
            [{"role": "user", "content": prompt}], tokenize=False, add_generation_prompt=True
        )
    return prompt


def pad_id(tokenizer) -> int:
    """The id `generate` pads with: the tokenizer's pad token, else its end-of-sequence token."""
    return tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id


def encode(tokenizer, prompt: str, chat: bool = True):
    """The prompt tokenized as the model sees it (`prompt_text`); the chat template already holds the special
    tokens it needs, so they are added only without it."""
    use_chat = bool(chat and getattr(tokenizer, "chat_template", None))
    return tokenizer(prompt_text(tokenizer, prompt, chat), return_tensors="pt", add_special_tokens=not use_chat)


@dataclass(frozen=True)
class Sampling:
    """Greedy (`do_sample=False`) or seeded sampling; the seed is reset before every prompt, so two models
    draw from the same random stream."""

    do_sample: bool = False
    seed: int = 0
    temperature: float = 0.7
    top_p: float = 0.9

    def kwargs(self) -> dict:
        """`model.generate`'s sampling keywords."""
        if not self.do_sample:
            return {"do_sample": False}
        return {"do_sample": True, "temperature": self.temperature, "top_p": self.top_p}

    @property
    def mode(self) -> str:
        """What a row says it was: "greedy" or "sampled(seed=..., T=..., top_p=...)"."""
        return f"sampled(seed={self.seed}, T={self.temperature}, top_p={self.top_p})" if self.do_sample else "greedy"


@torch.no_grad()
def generate_one(
    model, tokenizer, item: dict, enc, first_new: int, max_new_tokens: int, pad: int | None, sampling: Sampling
) -> dict:
    """One timed `model.generate` of the tokenized prompt `enc`; the output is `out[0, first_new:]` (the prompt's
    length for a decoder-only model, 1 for an encoder-decoder's start token). Row {id, prompt, output, new_tokens,
    seconds, mode}."""
    enc = enc.to(input_device(model))
    if sampling.do_sample:
        torch.manual_seed(sampling.seed)
    start = time.perf_counter()
    out = model.generate(**enc, max_new_tokens=max_new_tokens, pad_token_id=pad, **sampling.kwargs())
    seconds = time.perf_counter() - start
    new = out[0, first_new:]
    return {
        "id": item["id"],
        "prompt": item["prompt"],
        "output": tokenizer.decode(new, skip_special_tokens=True).strip(),
        "new_tokens": int(new.numel()),
        "seconds": round(seconds, 3),
        "mode": sampling.mode,
    }


@torch.no_grad()
def generate(
    model,
    tokenizer,
    prompts=None,
    *,
    max_new_tokens: int = 48,
    do_sample: bool = False,
    seed: int = 0,
    temperature: float = 0.7,
    top_p: float = 0.9,
    chat: bool = True,
    progress: Progress = None,
) -> list[dict]:
    """One continuation per prompt: rows {id, prompt, output, new_tokens, seconds, mode, chat}.

    Example:
        >>> rows = generate(lm.model, lm.tokenizer, ["The capital of France is"], max_new_tokens=8)
        >>> rows[0]["output"]
    """
    prompts = load_prompts() if prompts is None else normalize_prompts(list(prompts))
    if not isinstance(max_new_tokens, int) or max_new_tokens < 1:
        raise InvalidInput(f"max_new_tokens must be a positive integer, got {max_new_tokens!r}.")
    pad = pad_id(tokenizer)
    sampling = Sampling(do_sample, seed, temperature, top_p)
    use_chat = bool(chat and getattr(tokenizer, "chat_template", None))
    rows = []
    for i, item in enumerate(prompts):
        enc = encode(tokenizer, item["prompt"], chat)
        row = generate_one(model, tokenizer, item, enc, enc["input_ids"].shape[1], max_new_tokens, pad, sampling)
        rows.append(row | {"chat": use_chat})
        if progress:
            progress((i + 1) / len(prompts), f"generated {i + 1}/{len(prompts)}")
    return rows


def side_by_side(dense_model, pruned_model, tokenizer, prompts=None, *, pruned_tokenizer=None, **kwargs) -> list[dict]:
    """Dense and pruned continuations of the same prompts, one row per prompt.

    Rows: {id, prompt, dense, pruned, dense_tokens, pruned_tokens, identical}. `kwargs` go to `generate`.
    """
    progress = kwargs.pop("progress", None)
    dense = generate(dense_model, tokenizer, prompts, progress=sub_progress(progress, 0.0, 0.5), **kwargs)
    pruned = generate(
        pruned_model, pruned_tokenizer or tokenizer, prompts, progress=sub_progress(progress, 0.5, 1.0), **kwargs
    )
    return generation_rows(dense, pruned)


# The live text's presets (raw continuations, no chat template): what 20% and 50% do to a model's answer
PRESETS = {
    "a fact": "The capital of France is",
    "a code stub": 'def is_even(n):\n    """Return True if n is even."""\n',
    "a sum": "Question: What is 12 + 30?\nAnswer:",
}


@dataclass(frozen=True)
class Continuation:
    """A greedy continuation: its token ids, each token's text, the whole text, and the seconds it took."""

    tokens: tuple[int, ...]
    pieces: tuple[str, ...]
    text: str
    seconds: float


class _EachToken:
    """A `generate` streamer that hands every new token id to `on_token` (the first `put` is the prompt)."""

    def __init__(self, on_token: Callable[[int], None]):
        self.on_token, self.prompt_seen = on_token, False

    def put(self, value) -> None:
        if not self.prompt_seen:
            self.prompt_seen = True
            return
        for token in value.reshape(-1).tolist():
            self.on_token(int(token))

    def end(self) -> None:
        pass


@torch.no_grad()
def continue_greedy(
    model, tokenizer, prompt: str, new_tokens: int = 16, chat: bool = False, on_token: Callable | None = None
) -> Continuation:
    """The greedy continuation of `prompt` (raw, or in the chat template with `chat`), `new_tokens` at most.
    `on_token(token_id)` is called as each token is made (the app shows the text growing, and a slider move
    can interrupt a generation there instead of waiting for it)."""
    if not isinstance(prompt, str) or not prompt.strip():
        raise InvalidInput("the prompt is empty; type some text to continue, or pick a preset.")
    if not isinstance(new_tokens, int) or isinstance(new_tokens, bool) or not 1 <= new_tokens <= 512:
        raise InvalidInput(f"new tokens must be an integer from 1 to 512, got {new_tokens!r}.")
    enc, pad = encode(tokenizer, prompt, chat), pad_id(tokenizer)
    enc = enc.to(input_device(model))
    start = time.perf_counter()
    streamer = _EachToken(on_token) if on_token is not None else None
    out = model.generate(**enc, max_new_tokens=new_tokens, pad_token_id=pad, do_sample=False, streamer=streamer)
    seconds = time.perf_counter() - start
    ids = tuple(int(t) for t in out[0, enc["input_ids"].shape[1] :])
    pieces = tuple(tokenizer.decode([t], skip_special_tokens=True) for t in ids)
    return Continuation(ids, pieces, "".join(pieces), seconds)


def marked_pieces(dense: Continuation, pruned: Continuation) -> list[tuple[str, bool]]:
    """The pruned continuation's token texts, each marked True where it is not the dense one's (an alignment of
    the two token sequences, `difflib`: a token the pruned model shares with dense, even shifted, is unmarked)."""
    matcher = difflib.SequenceMatcher(a=dense.tokens, b=pruned.tokens, autojunk=False)
    same = [False] * len(pruned.tokens)
    for block in matcher.get_matching_blocks():
        for j in range(block.b, block.b + block.size):
            same[j] = True
    return [(piece, not kept) for piece, kept in zip(pruned.pieces, same, strict=True)]


def continue_pruned(
    model, tokenizer, plan, prompt: str, new_tokens: int = 16, chat: bool = False, on_token: Callable | None = None
) -> Continuation:
    """`continue_greedy` of `model` sliced to `plan` (a fresh copy sharing nothing with `model`, freed after): what
    the text becomes at the plan's sparsity, from already-computed scores, without gradients."""
    return measure_plan(
        plan,
        lambda: apply_plan(model, plan),
        lambda m: continue_greedy(m, tokenizer, prompt, new_tokens, chat, on_token),
    )
