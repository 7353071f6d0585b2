"""`info` and `generate`."""

from __future__ import annotations

from nirvana.cli.common import add_model_args, load_from_args, print_json


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


def describe(lm) -> dict:
    """The facts `info` prints and the app's Model page shows."""
    from nirvana.models.architectures import get_architecture
    from nirvana.models.shapes import count_block_parameters, model_shape
    from nirvana.pruning.allocation import default_gamma

    shape = model_shape(lm.model)
    return {
        "model": lm.name,
        "source": lm.source,
        "model_type": shape.model_type,
        "layers": shape.num_layers,
        "hidden_size": shape.hidden_size,
        "query_heads": list(sorted(set(shape.num_heads))) if not shape.is_uniform else shape.num_heads[0],
        "kv_heads": list(sorted(set(shape.num_kv_heads))) if not shape.is_uniform else shape.num_kv_heads[0],
        "group_size": shape.group_size,
        "head_dim": shape.head_dim,
        "intermediate_size": shape.intermediate[0] if shape.is_uniform else list(shape.intermediate),
        "vocab_size": shape.vocab_size,
        "tied_embeddings": shape.tied_embeddings,
        "parameters": shape.total_params,
        "block_parameters": count_block_parameters(lm.model),
        "prunable_units": {"kv_groups": sum(shape.num_kv_heads), "mlp_neurons": sum(shape.intermediate)},
        "default_gamma": round(default_gamma(shape), 4) if shape.is_uniform else None,
        "pruned": not shape.is_uniform or lm.plan is not None,
        "dtype": str(next(lm.model.parameters()).dtype).replace("torch.", ""),
        "device": str(next(lm.model.parameters()).device),
        "adapter_tested_on": get_architecture(lm.model).tested,
        "model_load_seconds": round(lm.load_seconds, 3),
        "import_seconds": round(lm.import_seconds, 3),  # one-time Python imports, not part of the load
    }


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
