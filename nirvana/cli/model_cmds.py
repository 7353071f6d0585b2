"""`info` and `generate`.

`generate` looks up how the loaded model's family generates (`GENERATORS`): a decoder-only model
continues the prompt (in its chat template with `--chat`); a T5 reads the prompt as its encoder's
input and writes an answer, with no chat template.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from nirvana.checkpoints.facts import describe
from nirvana.cli.checks import check_model_args
from nirvana.cli.common import add_model_args, load_from_args, print_json
from nirvana.errors import InvalidInput
from nirvana.measure.family import family
from nirvana.measure.generation import generate
from nirvana.t5.measure import generate_seq2seq


def register(sub) -> None:
    p = sub.add_parser("info", help="load a model and print its prunable architecture")
    add_model_args(p)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=cmd_info)

    p = sub.add_parser("generate", help="greedy continuation of a prompt")
    add_model_args(p)
    p.add_argument("--prompt", default="The capital of France is")
    p.add_argument("--max-new-tokens", type=int, default=32)
    p.add_argument("--chat", action="store_true", help="wrap the prompt in the model's chat template")
    p.set_defaults(func=cmd_generate)


@dataclass(frozen=True)
class Generator:
    """How `generate` runs and prints one family: the row of one prompt, its output line, the flags it refuses."""

    row: Callable  # (loaded model, args) -> one row of the library's generate
    line: str  # the printed line, formatted with prompt= and output=
    refuses: tuple[tuple[str, str], ...] = ()  # (argument, why it makes no sense for this family)


GENERATORS = {
    # The library tokenizes as the app and `eval --generate` do (a chat template's own BOS is not doubled).
    "decoder-only": Generator(
        lambda lm, args: generate(
            lm.model, lm.tokenizer, [args.prompt], max_new_tokens=args.max_new_tokens, chat=args.chat
        )[0],
        "{prompt} {output}",
    ),
    "t5": Generator(
        lambda lm, args: generate_seq2seq(lm.model, lm.tokenizer, [args.prompt], max_new_tokens=args.max_new_tokens)[0],
        "{prompt}\n-> {output}",
        refuses=(
            (
                "chat",
                "a T5 has no chat template: its encoder reads the prompt as written (FLAN-T5: an instruction; "
                'T5: a task prefix such as "summarize: ..." or "translate English to German: ..."); drop --chat',
            ),
        ),
    ),
}


def cmd_info(args) -> int:
    check_model_args(args)  # a mistyped name is refused before any load or hub access
    lm = load_from_args(args)
    facts = describe(lm)
    if args.json:
        print_json(facts)
        return 0
    width = max(len(k) for k in facts)
    for key, value in facts.items():
        print(f"{key:<{width}}  {value}")
    return 0


def cmd_generate(args) -> int:
    if args.max_new_tokens < 1 or args.max_new_tokens > 4096:
        raise InvalidInput(f"--max-new-tokens must be an integer in [1, 4096], got {args.max_new_tokens}.")
    if not args.prompt.strip():
        raise InvalidInput("--prompt is empty; give some text to continue.")
    check_model_args(args)
    lm = load_from_args(args)
    kind = family(lm.model)
    gen = GENERATORS[kind]
    for flag, why in gen.refuses:
        if getattr(args, flag, None):
            raise InvalidInput(f"--{flag} on a {kind} model: {why}.")
    row = gen.row(lm, args)
    output = row["output"] or f"(no text: the {row['new_tokens']} new tokens decode to special tokens only)"
    print(gen.line.format(prompt=args.prompt, output=output))
    return 0
