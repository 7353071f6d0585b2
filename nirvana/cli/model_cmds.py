"""`info` and `generate`."""

from __future__ import annotations

from nirvana.cli.common import add_model_args, load_from_args, print_json
from nirvana.models.facts import describe


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
    import torch

    from nirvana.errors import InvalidInput

    if args.max_new_tokens < 1 or args.max_new_tokens > 4096:
        raise InvalidInput(f"--max-new-tokens must be an integer in [1, 4096], got {args.max_new_tokens}.")
    if not args.prompt.strip():
        raise InvalidInput("--prompt is empty; give some text to continue.")
    lm = load_from_args(args)
    tok = lm.tokenizer
    if args.chat and tok.chat_template:
        text = tok.apply_chat_template(
            [{"role": "user", "content": args.prompt}], tokenize=False, add_generation_prompt=True
        )
    else:
        text = args.prompt
    enc = tok(text, return_tensors="pt").to(next(lm.model.parameters()).device)
    with torch.no_grad():
        out = lm.model.generate(
            **enc, max_new_tokens=args.max_new_tokens, do_sample=False, pad_token_id=tok.pad_token_id
        )
    print(args.prompt + tok.decode(out[0, enc["input_ids"].shape[1] :], skip_special_tokens=True))
    return 0
