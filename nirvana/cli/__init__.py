"""Command line over the library: `python -m nirvana <command> ...`.

Each command lives in a small module with `register(subparsers)`; this file only builds the
parser and turns errors into one-paragraph messages (exit 2 for bad input, never a traceback
unless NIRVANA_DEBUG=1).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import textwrap

from nirvana.errors import NirvanaError

# The modules that each register one or more subcommands, in the order `--help` lists them, and the commands each
# registers. A command line imports only its command's module (a typo in `prune` then costs no import of the
# benchmarks, and each module imports its heavy parts inside its commands); `--help` imports them all.
COMMANDS = {
    "model_cmds": ("info", "generate"),
    "prune_cmds": ("score", "prune"),
    "recover_cmds": ("recover",),
    "calib_cmds": ("select-calib", "gamma-search"),
    "eval_cmds": ("eval", "compare"),
    "sweep_cmds": ("sweep",),
    "bench_cmds": ("bench",),
    "export_cmds": ("push", "card", "export-gguf"),
    "serve_cmds": ("serve",),
}


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The whole parser, or (with `command`, one of COMMANDS' names) one with that command's module alone."""
    parser = argparse.ArgumentParser(
        prog="python -m nirvana",
        description="NIRVANA Explorer: structured pruning of decoder-only LLMs (arXiv 2509.14230).",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, commands in COMMANDS.items():
        if command is None or command in commands:
            importlib.import_module(f"nirvana.cli.{name}").register(sub)
    return parser


def fail(message: str, code: int = 2) -> int:
    # Never break inside a word: "--trust-remote-code" or a path must survive wrapping intact.
    text = textwrap.fill(f"error: {message}", width=100, break_on_hyphens=False, break_long_words=False)
    print(text, file=sys.stderr)
    return code


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    known = {c for commands in COMMANDS.values() for c in commands}
    parser = build_parser(argv[0] if argv and argv[0] in known else None)
    args = parser.parse_args(argv)
    # here, not at the top: `--help` and argparse's own errors need none of the library
    from nirvana.guard.heap import pin_mmap_threshold
    from nirvana.guard.memory import oom_guard

    pin_mmap_threshold()  # CPU scoring's RSS stays near the memory plan (nirvana/guard/heap.py)

    try:
        with oom_guard(f"`{args.command}`"):  # an OOM anywhere becomes the same numbers-and-options message
            return int(args.func(args) or 0)
    except NirvanaError as exc:
        return fail(f"{type(exc).__name__}: {exc}")
    except KeyboardInterrupt:
        return fail("interrupted; nothing partial was kept.", 130)
    except Exception as exc:
        if os.environ.get("NIRVANA_DEBUG"):
            raise
        return fail(
            f"internal error ({type(exc).__name__}: {exc}). Re-run with NIRVANA_DEBUG=1 for a traceback and report it.",
            1,
        )
