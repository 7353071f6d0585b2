"""`recover`: LoRA fine-tuning of a pruned (or dense) model, merged back and saved as a pruned folder."""

from __future__ import annotations

import time
from pathlib import Path

import torch

from nirvana.cli.common import add_model_args, hold_device, load_from_args, print_json, record_command, stderr_progress
from nirvana.errors import InvalidInput
from nirvana.recovery.config import DEFAULT_STEPS, PROJECTIONS, RecoveryConfig
from nirvana.recovery.data import load_documents
from nirvana.recovery.run import recover_and_save
from nirvana.recovery.save import base_report


def add_recovery_args(p, prefix: str = "") -> None:
    """LoRA settings; `prefix` ("recover-") namespaces them when `prune` chains a recovery."""
    d = RecoveryConfig()
    g = p.add_argument_group("LoRA recovery (defaults: the reference recipe)")
    g.add_argument(f"--{prefix}data", default="auto", help="auto, alpaca, calibration, a dataset name, or a file")
    g.add_argument(f"--{prefix}lr", type=float, default=d.lr, help=f"learning rate (default {d.lr})")
    g.add_argument(f"--{prefix}r", type=int, default=d.r, help=f"LoRA rank (default {d.r})")
    g.add_argument(f"--{prefix}alpha", type=float, default=d.alpha, help=f"LoRA alpha (default {d.alpha:g})")
    g.add_argument(f"--{prefix}dropout", type=float, default=d.dropout, help=f"LoRA dropout (default {d.dropout})")
    g.add_argument(
        f"--{prefix}targets", default=",".join(PROJECTIONS), help="comma-separated projections (default: all seven)"
    )
    g.add_argument(f"--{prefix}batch-size", type=int, default=d.batch_size, help=f"sequences per step ({d.batch_size})")
    g.add_argument(
        f"--{prefix}micro-batch", type=int, default=d.micro_batch_size, help="sequences per forward/backward"
    )
    g.add_argument(f"--{prefix}seq-len", type=int, default=d.seq_len, help=f"tokens per sequence ({d.seq_len})")
    g.add_argument(f"--{prefix}seed", type=int, default=d.seed)
    g.add_argument(f"--{prefix}eval-every", type=int, default=d.eval_every, help="held-out loss every k steps")
    g.add_argument(f"--{prefix}gradient-checkpointing", action="store_true", help="recompute activations (less memory)")


def config_from_args(args, steps: int | None, tokens: int | None, prefix: str = "") -> RecoveryConfig:
    """Validate the budget and settings before any model is loaded."""
    a = lambda name: getattr(args, prefix + name)
    flag = "--recover-steps" if prefix else "--steps"
    if tokens is None and (steps is None or isinstance(steps, bool) or steps < 1):
        raise InvalidInput(
            f"{flag} must be a positive integer (optimizer steps of {a('batch_size')} x {a('seq_len')} tokens), "
            f"got {steps!r}; e.g. {flag} {DEFAULT_STEPS} (about 5 minutes for SmolLM2 at 50% on a 2-core CPU)."
        )
    if tokens is not None and tokens < 1:
        raise InvalidInput(f"--tokens must be a positive integer (the training budget in tokens), got {tokens!r}.")
    return RecoveryConfig(
        r=a("r"),
        alpha=a("alpha"),
        dropout=a("dropout"),
        target_modules=tuple(t.strip() for t in a("targets").split(",") if t.strip()),
        lr=a("lr"),
        batch_size=a("batch_size"),
        micro_batch_size=min(a("micro_batch"), a("batch_size")),
        seq_len=a("seq_len"),
        steps=steps or 0,
        tokens=tokens,
        seed=a("seed"),
        eval_every=a("eval_every"),
        gradient_checkpointing=a("gradient_checkpointing"),
    )


def register(sub) -> None:
    p = sub.add_parser("recover", help="LoRA fine-tune a pruned model (peft), merge, save as a pruned folder")
    add_model_args(p, default=None)
    p.add_argument("--steps", type=int, default=None, help="optimizer steps (the budget)")
    p.add_argument("--tokens", type=int, default=None, help="the budget in training tokens instead of steps")
    add_recovery_args(p)
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    p.add_argument("--save-adapter", action="store_true", help="also write the adapter alone (peft format)")
    p.add_argument("--out", required=True, help="output folder: model/, plan.json, recovery.json, report.json")
    p.set_defaults(func=cmd_recover)


def cmd_recover(args) -> int:

    config = config_from_args(args, args.steps, args.tokens)
    out = check_out(args.out)
    if args.threads is not None:
        set_threads(args.threads)
    docs, info = load_documents(args.data)  # a bad data file fails here, before the model loads
    with hold_device(args, "recover"):
        start = time.perf_counter()
        lm = load_from_args(args)
        load_seconds = time.perf_counter() - start
        summary = recover_and_save(
            lm.model,
            lm.tokenizer,
            lm.plan,
            config,
            (docs, info),
            out,
            base_report=base_report(args.model),
            base_model=args.model,
            adapter=args.save_adapter,
            **cli_progress(),
        )
    summary["load_seconds"] = round(load_seconds, 2)
    summary["wall_seconds"] = round(time.perf_counter() - start, 2)
    record_command("recover", args, metrics=summary, summary={k: summary[k] for k in ("status", "steps_done", "out")})
    print_json(summary)
    return 0


def cli_progress() -> dict:
    """`recover_and_save`'s callbacks for the terminal: steps and data lines on stderr."""
    return {"progress": lambda s: stderr_progress(s.fraction, s.message), "log": lambda m: stderr_progress(0.0, m)}


def check_out(path: str) -> Path:
    out = Path(path).expanduser()
    if out.exists() and not out.is_dir():
        raise InvalidInput(f"--out {path!r} is a file; pass a folder (it will hold model/, recovery.json, ...).")
    parent = out.resolve().parent
    if not parent.exists():
        try:
            parent.mkdir(parents=True)
        except OSError as exc:
            raise InvalidInput(f"cannot create {str(parent)!r} ({exc.strerror}); pass a writable --out.") from exc
    return out


def set_threads(threads: int) -> None:

    if threads < 1:
        raise InvalidInput(f"--threads must be a positive integer, got {threads}.")
    torch.set_num_threads(threads)
