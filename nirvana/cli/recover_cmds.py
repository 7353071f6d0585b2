"""`recover`: LoRA fine-tuning of a pruned (or dense) model, merged back and saved as a pruned folder.

    python -m nirvana recover --model p20 --steps 16 --out p20r                 # next-token loss, LoRA
    python -m nirvana recover --model p20 --loss kd --steps 16 --out p20kd      # distilled from the dense model
    python -m nirvana recover --model p20 --loss kd --train full --out p20full  # the weights themselves
    python -m nirvana recover --model p20 --loss kd --teacher-cache logits/ --out p20kd  # teacher logits kept

The teacher of `--loss kd|mix` is the dense model the folder was pruned from (its report names it;
its plan's fingerprint must match, so load it with the prune's --dtype), or `--teacher`.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import torch

from nirvana.checkpoints.options import resolve_dtype
from nirvana.cli.checks import check_model, check_model_args
from nirvana.cli.common import add_model_args, hold_device, load_from_args, print_json, record_command, stderr_progress
from nirvana.errors import InvalidInput
from nirvana.recovery.config import DEFAULT_STEPS, LOSSES, PROJECTIONS, TRAIN, RecoveryConfig
from nirvana.recovery.data import load_documents
from nirvana.recovery.save import base_report
from nirvana.recovery.teacher_cache import DTYPES, TeacherCache


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
    d = RecoveryConfig()
    g = p.add_argument_group("objective (distillation from the dense model)")
    g.add_argument("--loss", default=d.loss, help=f"{', '.join(LOSSES)}: next-token, KL to the teacher, or both")
    g.add_argument("--temperature", type=float, default=d.temperature, help="distillation temperature (default 1)")
    g.add_argument("--kd-weight", type=float, default=d.kd_weight, help="--loss mix: w * kd + (1 - w) * lm (0.5)")
    g.add_argument("--train", default=d.train, help=f"{', '.join(TRAIN)}: LoRA adapters merged back, or the weights")
    g.add_argument("--teacher", default=None, help="the dense model to distill from (default: the one pruned)")
    g.add_argument(
        "--teacher-dtype",
        default=None,
        help="the teacher's dtype (default: --dtype; in another dtype it is not checked against the plan)",
    )
    g.add_argument(
        "--teacher-cache",
        default=None,
        metavar="DIR",
        help="keep the teacher's logits in DIR, keyed by teacher and windows: a later run on the same data reads "
        "them (full vocabulary: SmolLM2 192 KiB/token in fp32; the size is said before training)",
    )
    g.add_argument(
        "--teacher-cache-dtype",
        default="float32",
        help=f"{', '.join(DTYPES)}: float32 is exact, the others halve the cache (default float32)",
    )
    p.add_argument("--save-adapter", action="store_true", help="also write the adapter alone (peft format)")
    p.add_argument("--out", required=True, help="output folder: model/, plan.json, recovery.json, report.json")
    p.set_defaults(func=cmd_recover)


def cmd_recover(args) -> int:
    check_model_args(args)  # the student, --device, --dtype and --teacher-dtype, before any load
    config = config_from_args(args, args.steps, args.tokens)
    config = dataclasses.replace(
        config, loss=args.loss, temperature=args.temperature, kd_weight=args.kd_weight, train=args.train
    )
    if args.save_adapter and config.train != "lora":
        raise InvalidInput("--save-adapter writes LoRA adapters; with --train full there are none: drop it.")
    check_teacher_cache_args(args, config)
    teacher_name = teacher_reference(args, config)  # before any model loads: a student with no known teacher
    if teacher_name is not None:
        check_model(teacher_name)
    out = check_out(args.out)
    if args.threads is not None:
        set_threads(args.threads)
    docs, info = load_documents(args.data)  # a bad data file fails here, before the model loads
    # here, not at the top: the model work (transformers' modeling, peft), once the arguments have passed
    from nirvana.checkpoints.loading import load_model
    from nirvana.guard.memory import check_fits
    from nirvana.recovery.distill import check_teacher
    from nirvana.recovery.memory import recovery_memory
    from nirvana.recovery.run import recover_and_save

    with hold_device(args, "recover"):
        start = time.perf_counter()
        lm = load_from_args(args)
        teacher = None
        if teacher_name is not None:  # would the student's training and the teacher fit? before loading it
            student_dtype = next(lm.model.parameters()).dtype
            teacher_dtype = resolve_dtype(args.teacher_dtype, args.device) if args.teacher_dtype else student_dtype
            check_fits(recovery_memory(lm.model, config, teacher_config=lm.model.config, teacher_dtype=teacher_dtype))
            teacher = load_model(
                teacher_name, dtype=args.teacher_dtype or args.dtype, device=args.device, progress=stderr_progress
            ).model
            check_teacher(teacher, lm.model, lm.plan, verify=args.teacher_dtype in (None, args.dtype))
        cache = None
        if args.teacher_cache and teacher is not None:
            cache = TeacherCache(args.teacher_cache, teacher, args.teacher_cache_dtype)
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
            teacher=teacher,
            teacher_name=teacher_name,
            teacher_cache=cache,
            **cli_progress(),
        )
    summary["load_seconds"] = round(load_seconds, 2)
    summary["wall_seconds"] = round(time.perf_counter() - start, 2)
    record_command("recover", args, metrics=summary, summary={k: summary[k] for k in ("status", "steps_done", "out")})
    print_json(summary)
    return 0


def teacher_reference(args, config: RecoveryConfig) -> str | None:
    """The teacher to load: --teacher, else the dense model the pruned folder's report names; None for lm loss."""
    if config.loss == "lm":
        return args.teacher
    if args.teacher:
        return args.teacher
    report = base_report(args.model) or {}
    if not report.get("model"):
        raise InvalidInput(
            f"--loss {config.loss} distills from the dense model, and {args.model!r} does not say which it came from "
            "(no report.json naming it): pass --teacher <model id or folder>."
        )
    return str(report["model"])


def check_teacher_cache_args(args, config: RecoveryConfig) -> None:
    """--teacher-cache needs a teacher, and a folder (not a file) with a known dtype: checked before any load."""
    if args.teacher_cache_dtype not in DTYPES:
        raise InvalidInput(
            f"--teacher-cache-dtype {args.teacher_cache_dtype!r} is not one of {', '.join(DTYPES)} (float32 is "
            "exact, the others halve the cache)."
        )
    if not args.teacher_cache:
        return
    if config.loss == "lm" and not args.teacher:
        raise InvalidInput(
            "--teacher-cache keeps the teacher's logits, and --loss lm has no teacher: use --loss kd or mix, or drop "
            "--teacher-cache."
        )
    if Path(args.teacher_cache).expanduser().is_file():
        raise InvalidInput(f"--teacher-cache {args.teacher_cache!r} is a file; pass a folder for the teacher's logits.")


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
