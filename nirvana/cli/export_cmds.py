"""`push` (publish a pruned folder to the Hugging Face Hub), `card` (rewrite its model card), `export-gguf`."""

from __future__ import annotations

import json
from pathlib import Path

from nirvana.cli.checks import check_out_file
from nirvana.cli.common import print_json
from nirvana.errors import InvalidInput
from nirvana.export.card import measured_results, read_report, write_model_card
from nirvana.export.gguf import write_gguf
from nirvana.export.hub import pruned_model_folder, push


def register(sub) -> None:
    p = sub.add_parser("push", help="upload a pruned model folder to the Hugging Face Hub (private by default)")
    p.add_argument("--model", required=True, help="folder written by `prune --out` (or its model/ subfolder)")
    p.add_argument("--repo-id", required=True, help="NAMESPACE/NAME on the Hub, e.g. alice/smollm2-135m-nirvana-50")
    visibility = p.add_mutually_exclusive_group()
    visibility.add_argument("--private", dest="private", action="store_true", default=True, help="(default)")
    visibility.add_argument("--public", dest="private", action="store_false", help="make the repository public")
    p.add_argument("--dry-run", action="store_true", help="list what would be uploaded; needs no token or network")
    p.add_argument("--message", default=None, help="commit message")
    p.set_defaults(func=cmd_push)

    p = sub.add_parser("card", help="rewrite a pruned folder's model card (README.md), adding measured results")
    p.add_argument("--model", required=True, help="folder written by `prune --out` (or its model/ subfolder)")
    p.add_argument("--eval", default=None, help="output of `eval --model DIR ... --json` on this folder")
    p.add_argument("--base-model", default=None, help="what was pruned, if report.json does not say")
    p.set_defaults(func=cmd_card)

    p = sub.add_parser("export-gguf", help="write a pruned Llama as a GGUF that llama.cpp runs with per-layer widths")
    p.add_argument("--model", required=True, help="folder written by `prune --out` (or its model/ subfolder)")
    p.add_argument("--out", required=True, help="the .gguf file to write")
    p.add_argument("--tokenizer-gguf", default=None, help="a GGUF of the base model (default: the embedded one)")
    p.add_argument("--dtype", default="f32", choices=["f32", "f16"], help="weight type (quantize with llama.cpp)")
    p.set_defaults(func=cmd_export_gguf)


def cmd_push(args) -> int:

    result = push(args.model, args.repo_id, private=args.private, dry_run=args.dry_run, commit_message=args.message)
    print_json(result)
    return 0


def cmd_card(args) -> int:

    folder = pruned_model_folder(args.model)
    results = None
    if args.eval:
        try:
            evaluation = json.loads(Path(args.eval).read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise InvalidInput(
                f"--eval {args.eval!r} is not readable JSON ({exc}); pass the output of `eval --json`."
            ) from exc
        results = measured_results(evaluation, folder)
    path = write_model_card(folder, read_report(folder), base_model=args.base_model, results=results)
    print_json({"card": str(path), "results": results or {}})
    return 0


def cmd_export_gguf(args) -> int:
    check_out_file(args.out, "the GGUF model")  # before the folder's weights are read
    path = write_gguf(args.model, args.out, tokenizer_gguf=args.tokenizer_gguf, dtype=args.dtype)
    print_json({"gguf": str(path), "bytes": path.stat().st_size, "architecture": "deci"})
    return 0
