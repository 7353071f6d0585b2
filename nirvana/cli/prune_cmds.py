"""`score` and `prune`."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import TYPE_CHECKING

from nirvana.cli.checks import check_model_args, check_out_folder, check_parent, check_settings, family
from nirvana.cli.common import add_model_args, hold_device, load_from_args, print_json, stderr_progress
from nirvana.cli.flags import json_object
from nirvana.cli.recover_cmds import add_recovery_args, cli_progress, config_from_args
from nirvana.errors import InvalidInput, NirvanaError
from nirvana.methods import METHODS
from nirvana.pipeline import PruneSettings, load_plan, load_scores
from nirvana.scoring.criteria import CRITERIA

if TYPE_CHECKING:
    from nirvana.pipeline import PruneResult
    from nirvana.scoring.scores import Scores

# The commands' model work (saving, recovery, the runs folder, torch.distributed) is imported inside them: a
# refused argument is answered before those imports (seconds of transformers and scipy), the lock and the load.


def add_calibration_args(p) -> None:
    p.add_argument(
        "--method",
        default="nirvana",
        help=f"pruning method: {', '.join(METHODS)} (docs/BASELINES.md); --criterion, --gamma, --allocation "
        "and --select-calib are NIRVANA's",
    )
    p.add_argument(
        "--method-settings",
        type=json_object,
        default=None,
        metavar="JSON",
        help='the method\'s own settings, e.g. \'{"taylor": "param_mix", "attn_layers": [4, 19]}\' (llm-pruner) or '
        '\'{"metric": "WIFV"}\' (flap)',
    )
    p.add_argument("--criterion", default="nirvana", help=", ".join(CRITERIA))
    p.add_argument(
        "--calib",
        default="wikitext2-valid",
        help="dataset name (wikitext2-valid, ptb, pydoc, python-code: code for code models), .txt/.jsonl file, or .npy "
        "of ids [N, T]",
    )
    p.add_argument("--samples", type=int, default=32, help="calibration sequences N")
    p.add_argument("--seq-len", type=int, default=128, help="tokens per calibration sequence T")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--micro-batch", type=int, default=0, help="sequences per forward/backward (0 = chosen from the memory plan)"
    )
    p.add_argument("--no-cache", action="store_true", help="recompute scores even if cached")
    p.add_argument(
        "--distributed",
        action="store_true",
        help="under torchrun: shard the model over the ranks with FSDP2 to score it (gradient criteria; docs/SCALE.md)",
    )
    p.add_argument(
        "--activation-checkpointing",
        action="store_true",
        help="recompute each layer's activations in the backward pass: less memory, one more forward "
        "(default: when the memory plan needs it; with --distributed: only when given)",
    )


def register(sub) -> None:
    p = sub.add_parser("score", help="compute unit scores and write them (safetensors + JSON)")
    add_model_args(p)
    add_calibration_args(p)
    p.add_argument("--out", required=True, help="output path (FILE.safetensors and FILE.json are written)")
    p.set_defaults(func=cmd_score)

    p = sub.add_parser("prune", help="score, allocate, slice and save a pruned model")
    add_model_args(p)
    add_calibration_args(p)
    p.add_argument("--sparsity", type=float, required=True, help="fraction of decoder-block weights to remove")
    p.add_argument("--gamma", type=float, default=None, help="MLP/attention pruning ratio (default: analytic gamma*)")
    p.add_argument("--align", type=int, default=8, help="round kept MLP neurons up to a multiple of this")
    p.add_argument(
        "--allocation",
        choices=["global", "uniform", "per-stack"],
        default="global",
        help="global ranking, the same ratio per layer (uniform), or one ranking per stack (per-stack: T5 only)",
    )
    p.add_argument(
        "--reconstruct",
        action="store_true",
        help="after slicing, re-solve the kept o_proj / down_proj columns by least squares on the calibration "
        "activations, block by block (Tyr-the-Pruner's reconstruction; any decoder-only method but slicegpt)",
    )
    p.add_argument("--scores", default=None, help="use a score file from `score --out` instead of computing")
    p.add_argument("--plan", default=None, help="apply an existing plan.json instead of allocating")
    p.add_argument(
        "--select-calib",
        type=int,
        default=0,
        metavar="K",
        help="choose among K calibration batches (seeds 0..K-1, drawn from --calib) by KL to dense; cached",
    )
    p.add_argument(
        "--recover-steps",
        type=int,
        default=None,
        metavar="N",
        help="then LoRA-recover N steps (see `recover`); --out then holds the recovered model",
    )
    add_recovery_args(p, prefix="recover-")
    p.add_argument("--out", required=True, help="output folder: plan.json, model/, report.json")
    p.set_defaults(func=cmd_prune)


def settings_from_args(args, sparsity: float = 0.0) -> PruneSettings:
    """The pipeline's typed settings from `score` / `prune` flags."""
    return PruneSettings(
        sparsity=getattr(args, "sparsity", sparsity),
        criterion=args.criterion,
        gamma=getattr(args, "gamma", None),
        align=getattr(args, "align", 8),
        allocation=getattr(args, "allocation", "global"),
        calib=args.calib,
        samples=args.samples,
        seq_len=args.seq_len,
        seed=args.seed,
        micro_batch=args.micro_batch,
        checkpoint=True if getattr(args, "activation_checkpointing", False) else None,
        select_calib=getattr(args, "select_calib", 0),
        use_cache=not args.no_cache,
        method=args.method,
        method_settings=args.method_settings,
        reconstruct=getattr(args, "reconstruct", False),
    )


def cmd_score(args) -> int:
    settings = settings_from_args(args)
    check_settings(settings, family(check_model_args(args)))  # before the lock and the load
    check_parent(Path(args.out).expanduser().parent, args.out)
    # here, not at the top: the scoring itself (transformers' modeling), once the arguments have passed
    from nirvana.pipeline import score

    if args.distributed:
        scores = distributed_scores_from_args(args, settings)
        if scores is not None:  # rank 0
            print_json({"scores": str(scores.save(args.out)), **scores.metadata()})
        return 0
    with hold_device(args, "score"):
        lm = load_from_args(args)
        scores, _ = score(lm, settings, stderr_progress)
    path = scores.save(args.out)
    print_json({"scores": str(path), **scores.metadata()})
    return 0


def distributed_scores_from_args(args, settings: PruneSettings) -> Scores | None:
    """`--distributed`: rank 0 loads the model, the others build it on the meta device, and every rank
    scores its share with the model sharded (FSDP2, shards filled from rank 0);
    the scores on rank 0, None on the others. Refused outside torchrun, for a method without a backward pass, for
    `--scores`/`--plan`/`--select-calib` (nothing to score, or a selection that needs the whole model)."""
    # here, not at the top: torch.distributed and FSDP scoring, for --distributed alone
    import torch.distributed as dist

    from nirvana.methods import get_method
    from nirvana.models.shapes import model_shape
    from nirvana.pipeline import calibration_for, sharded_scoring
    from nirvana.scoring.distributed import check_world, distributed_scores, init_distributed, under_torchrun

    if not under_torchrun():
        init_distributed()  # raises: the message says how to start it under torchrun
    if settings is None or getattr(args, "scores", None) or getattr(args, "select_calib", 0):
        raise InvalidInput("--distributed computes the scores: drop --scores, --plan and --select-calib with it.")
    scorer, memory = sharded_scoring(settings)  # refused before joining the process group
    rank, _world = init_distributed()
    try:
        if args.device_map is None:
            args.device = "cpu"  # rank 0 loads on the CPU; fully_shard moves each rank's shards to its own GPU
        # Rank 0 alone reads the weights (one copy per job, not one per process); the others build the
        # architecture on the meta device and receive their shards from it. No device lock: the ranks run together.
        lm = load_from_args(args, weights=rank == 0)
        get_method(settings.method).check(lm.model, model_shape(lm.model), settings)  # layer range, target
        batch, _ = calibration_for(lm, settings)
        check_world(lm.model, scorer, batch.input_ids.shape[0], _world)
        scores = distributed_scores(
            lm.model,
            scorer,
            batch,
            micro_batch=settings.micro_batch,
            checkpoint=args.activation_checkpointing,
            memory=memory,
        )
    finally:
        dist.destroy_process_group()
    return scores if rank == 0 else None


def cmd_prune(args) -> int:
    """Prune under the device lock, recording the run in the runs folder (committed only when complete).

    `--distributed`: the scores come from every rank (`distributed_scores_from_args`); rank 0 writes
    them to --out/scores.safetensors, then allocates, slices and writes the plan and model alone,
    from a fresh copy of the dense model.

    Everything that needs no model is refused first, before the lock and the load: the model name,
    the settings, --out, and the --plan / --scores files (read here: a few KB to MB)."""
    ref = check_model_args(args)
    settings = None if args.plan else settings_from_args(args)
    if settings is not None:
        check_settings(settings, family(ref))
    check_out_folder(args.out, OUT_HOLDS)
    plan = load_plan(args.plan) if args.plan else None
    scores = load_scores(args.scores) if args.scores else None
    if args.distributed:
        scores = distributed_scores_from_args(args, settings)
        if scores is None:
            return 0
        args.scores = str(scores.save(_output_folder(args.out) / "scores"))  # the score file, beside the plan
    # here, not at the top: recovery data and the runs folder, once the arguments have passed
    from nirvana.recovery.data import load_documents
    from nirvana.runs import new_run

    recorded = {k: getattr(args, k, None) for k in _SETTINGS}
    recovery = None
    if args.recover_steps is not None:  # bad recovery settings fail before minutes of scoring
        recovery = (
            config_from_args(args, args.recover_steps, None, prefix="recover_"),
            load_documents(args.recover_data),
        )
    with hold_device(args, "prune"), new_run("prune", settings=recorded) as run:
        return _prune(args, settings, run, recovery, plan=plan, scores=scores)


def _prune(args, settings: PruneSettings | None, run, recovery=None, *, plan=None, scores=None) -> int:
    """`recovery`: (RecoveryConfig, (documents, data info)) for `--recover-steps`, checked before any model work;
    `plan` / `scores`: read from --plan / --scores before the lock."""
    # here, not at the top: slicing and saving (transformers' modeling), under the lock
    from nirvana.checkpoints.pruned import save_prune_output
    from nirvana.methods import get_method
    from nirvana.pipeline import check_scores_match, prune

    existed = Path(args.out).expanduser().exists()
    out = _output_folder(args.out)
    t = time.perf_counter()
    try:
        lm = load_from_args(args)
        load_seconds = time.perf_counter() - t
        if plan is not None and get_method(plan.settings.method).applies_on_data:
            # A SliceGPT plan holds widths, not rotations; a Tyr plan units, not the re-solved weights: both are
            # computed again on the same calibration batch.
            settings = dataclasses.replace(
                settings_from_args(args),
                sparsity=plan.settings.sparsity,
                method=plan.settings.method,
                method_settings=plan.settings.method_settings,
            )
        # A FLAP plan's biases come from its score file's statistics, so --scores goes with --plan too.
        if scores is not None:
            check_scores_match(scores, lm.model, repr(args.scores))
        result = prune(lm, settings, scores=scores, plan=plan, inplace=True, progress=stderr_progress)
    except NirvanaError:
        if not existed and not any(out.iterdir()):  # refused before anything was written: leave no folder
            out.rmdir()
        raise
    if result.scores is not None:
        run.save_scores_ref(result.scores.metadata())
    run.save_plan(result.plan)
    report = {
        **result.report,
        "model": args.model,
        "timings": {"load": round(load_seconds, 3), **result.report["timings"]},
    }
    report = save_prune_output(out, result.model, lm.tokenizer, result.plan, report, base_model=args.model)
    run.write_json("report.json", {**report, "out": str(out.resolve())})
    run.write_json("metrics.json", {k: report[k] for k in _METRICS})
    if recovery is not None:
        report["recovery"] = _recover_after_prune(args, recovery, result, lm.tokenizer, report, out)
    run.summary = {k: report[k] for k in _SUMMARY} | {"out": str(out.resolve())}
    print_json({k: v for k, v in report.items() if k not in ("kept_neurons",)} | {"run": run.id})
    return 0


# What the runs folder keeps of a prune: the command's settings, the measured figures, and the
# one-line summary `list_runs` shows.
_SETTINGS = (
    "model", "method", "method_settings", "criterion", "calib", "samples", "seq_len", "seed", "sparsity",
    "gamma", "align", "allocation", "scores", "plan", "out", "select_calib", "dtype", "device",
)  # fmt: skip
_METRICS = (
    "params_before", "params_after", "block_params_before", "block_params_after",
    "achieved_block_sparsity", "total_param_reduction", "kept_kv_groups", "kept_neurons", "timings",
)  # fmt: skip
_SUMMARY = (
    "model", "method", "criterion", "target_sparsity", "achieved_block_sparsity", "gamma", "params_before",
    "params_after",
)  # fmt: skip


def _recover_after_prune(args, recovery, pruned: PruneResult, tokenizer, report: dict, out: Path) -> dict:
    """`prune --recover-steps N`: train the in-memory pruned model, then replace --out with the recovered one."""
    # here, not at the top: LoRA training (peft), for --recover-steps alone
    from nirvana.recovery.run import recover_and_save

    config, documents = recovery
    return recover_and_save(
        pruned.model,
        tokenizer,
        pruned.plan,
        config,
        documents,
        out,
        base_report=report,
        base_model=args.model,
        inplace=True,
        **cli_progress(),
    )


OUT_HOLDS = "plan.json, model/, report.json"


def _output_folder(path: str) -> Path:
    """The --out folder, created before any model work (`check_out_folder` has refused it before the lock)."""
    check_out_folder(path, OUT_HOLDS)
    out = Path(path).expanduser()
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InvalidInput(f"cannot create the --out folder {path!r} ({exc.strerror}); pass a writable one.") from exc
    return out
