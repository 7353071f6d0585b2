"""`serve`: a model folder (a pruned one included) behind vLLM's OpenAI-compatible server."""

from __future__ import annotations

from pathlib import Path

from nirvana.cli.common import print_json
from nirvana.errors import InvalidInput
from nirvana.export.serve import run_server, serve_python, server_command


def register(sub) -> None:
    p = sub.add_parser(
        "serve",
        help="serve a model folder with vLLM (OpenAI-compatible HTTP: /v1/completions); needs `make serve-env`",
    )
    p.add_argument("--model", required=True, help="folder written by `prune --out` (or its model/), or a model name")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default: this machine only)")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--dtype", default="float32", help="float32 (default on a CPU), bfloat16, float16 or auto")
    p.add_argument("--max-model-len", type=int, default=2048, help="longest prompt + completion, in tokens")
    p.add_argument("--served-model-name", default=None, help="the name clients ask for (default: the folder)")
    p.add_argument("--compile", action="store_true", help="let vLLM torch.compile the model (slower start)")
    p.add_argument("--print-command", action="store_true", help="print the command and its environment; run nothing")
    p.set_defaults(func=cmd_serve)


def _folder(name: str) -> str:
    """A folder as given, or the local folder of a registry model (the embedded SmolLM2, converted once)."""
    if Path(name).expanduser().exists():
        return name
    # here, not at the top: resolving a registry name imports the model loading code
    from nirvana.checkpoints.loading import embedded_model_dir

    return str(embedded_model_dir(name))


def cmd_serve(args) -> int:
    command = server_command(
        _folder(args.model), host=args.host, port=args.port, dtype=args.dtype, max_model_len=args.max_model_len,
        served_name=args.served_model_name, eager=not args.compile,
        python=None if not args.print_command else _python_or_placeholder(),
    )  # fmt: skip
    if args.print_command:
        print_json({"command": command.shell(), "architecture": command.architecture, "folder": command.folder})
        return 0
    print(f"serving {command.folder} with vLLM ({command.architecture or 'its stock class'}):\n  {command.shell()}")
    return run_server(command)


def _python_or_placeholder() -> str:
    try:
        return str(serve_python())
    except InvalidInput:
        return ".venv-serve/bin/python"  # the command as it will read once `make serve-env` has run
