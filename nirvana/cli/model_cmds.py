"""`info` and `generate`."""

from __future__ import annotations

from nirvana.checkpoints.facts import describe
from nirvana.cli.common import add_model_args, load_from_args, print_json
from nirvana.errors import InvalidInput
from nirvana.measure.generation import generate


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


def cmd_info(args) -> int:
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
    lm = load_from_args(args)
    # The library tokenizes as the app and `eval --generate` do (a chat template's own BOS is not doubled).
    row = generate(lm.model, lm.tokenizer, [args.prompt], max_new_tokens=args.max_new_tokens, chat=args.chat)[0]
    print(f"{args.prompt} {row['output']}")
    return 0
