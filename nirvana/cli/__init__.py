"""Command line over the library: `python -m nirvana <command> ...`.

Each command lives in a small module with `register(subparsers)`; this file only builds the
parser and turns errors into one-paragraph messages (exit 2 for bad input, never a traceback
unless NIRVANA_DEBUG=1).
"""

from __future__ import annotations

import argparse
import os
import sys
import textwrap

from nirvana.cli import (
    bench_cmds,
    calib_cmds,
    eval_cmds,
    export_cmds,
    model_cmds,
    prune_cmds,
    recover_cmds,
    sweep_cmds,
)
from nirvana.errors import NirvanaError
from nirvana.guard.memory import oom_guard

# Modules that each register one or more subcommands, in the order `--help` lists them.
COMMAND_MODULES = (model_cmds, prune_cmds, recover_cmds, calib_cmds, eval_cmds, sweep_cmds, bench_cmds, export_cmds)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m nirvana",
        description="NIRVANA Explorer: structured pruning of decoder-only LLMs (arXiv 2509.14230).",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module in COMMAND_MODULES:
        module.register(sub)
    return parser


def fail(message: str, code: int = 2) -> int:
    # Never break inside a word: "--trust-remote-code" or a path must survive wrapping intact.
    text = textwrap.fill(f"error: {message}", width=100, break_on_hyphens=False, break_long_words=False)
    print(text, file=sys.stderr)
    return code


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
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
