"""`score` and `prune`."""

from __future__ import annotations

import json
import time
from pathlib import Path

from nirvana.cli.common import add_model_args, heavy, load_from_args, print_json, stderr_progress
from nirvana.cli.recover_cmds import add_recovery_args, config_from_args, run_recovery, save_result


def add_calibration_args(p) -> None:
    p.add_argument("--criterion", default="nirvana", help="nirvana, taylor, magnitude, wanda, random")
    p.add_argument("--calib", default="wikitext2-valid", help="dataset name, .txt/.jsonl file, or .npy of ids [N, T]")
    p.add_argument("--samples", type=int, default=32, help="calibration sequences N")
    p.add_argument("--seq-len", type=int, default=128, help="tokens per calibration sequence T")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--micro-batch", type=int, default=0, help="sequences per forward/backward (0 = all at once)")
    p.add_argument("--no-cache", action="store_true", help="recompute scores even if cached")


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
    p.add_argument("--allocation", choices=["global", "uniform"], default="global")
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


def _scores_for(args, lm):
    from nirvana.data.calibration import calibration_batch
    from nirvana.scoring.criteria import SCORERS, compute_scores
    from nirvana.scoring.scores import Scores

    if getattr(args, "scores", None):
        from nirvana.errors import PlanMismatch
        from nirvana.store.fingerprint import model_fingerprint

        scores = Scores.load(args.scores)
        if scores.fingerprint != model_fingerprint(lm.model):
            raise PlanMismatch(
                f"{args.scores!r} holds scores of model fingerprint {scores.fingerprint}, not of "
                f"{args.model!r} ({model_fingerprint(lm.model)}); score this model, or pass the model they came from."
            )
        return scores
    needs_data = SCORERS.get(args.criterion, (None, True))[1]
    batch = None
    if needs_data and getattr(args, "select_calib", 0):
        batch = _selected_batch(args, lm)
    elif needs_data:
        batch = calibration_batch(
            lm.tokenizer,
            args.calib,
            samples=args.samples,
            seq_len=args.seq_len,
            seed=args.seed,
            fallback=args.calib == "wikitext2-valid",
        )
        if batch.fallback_reason:
            stderr_progress(0.0, f"NOTE: calibrating on the embedded Python docs: {batch.fallback_reason}")
    return compute_scores(
        lm.model,
        args.criterion,
        batch,
        seed=args.seed,
        micro_batch=args.micro_batch,
        use_cache=not args.no_cache,
        progress=stderr_progress,
    )


def _selected_batch(args, lm):
    """KL-guided calibration (`--select-calib K`): the winning candidate batch, selection cached on disk."""
    from nirvana.cli.calib_cmds import run_selection
    from nirvana.search.calibration import AnchorSpec, chosen_batch

    selection = run_selection(
        args, lm, candidates=args.select_calib, pool=args.calib, anchor=AnchorSpec(source=args.calib)
    )
    args.selection = {
        "chosen_seed": selection.chosen_seed,
        "candidates": {c.seed: round(c.kl, 6) for c in selection.candidates},
        "from_cache": selection.from_cache,
    }
    return chosen_batch(lm.tokenizer, selection)


def _heavy(args, what: str):
    return heavy(args, what)


def cmd_score(args) -> int:
    with _heavy(args, "score"):
        lm = load_from_args(args)
        scores = _scores_for(args, lm)
    path = scores.save(args.out)
    print_json({"scores": str(path), **scores.metadata()})
    return 0


def cmd_prune(args) -> int:
    """Prune under the device lock, recording the run in the runs folder (committed only when complete)."""
    from nirvana.store.runs import new_run

    settings = {k: getattr(args, k, None) for k in _SETTINGS}
    if args.recover_steps is not None:  # bad recovery settings fail before minutes of scoring
        from nirvana.recovery.data import load_documents

        args.recovery_config = config_from_args(args, args.recover_steps, None, prefix="recover_")
        args.recovery_docs = load_documents(args.recover_data)
    with _heavy(args, "prune"), new_run("prune", settings=settings) as run:
        return _prune(args, run)


def _prune(args, run) -> int:
    from nirvana.models.checkpoint import save_pruned
    from nirvana.models.shapes import count_block_parameters, count_parameters, model_shape
    from nirvana.pruning.allocation import allocate, default_gamma, validate_settings
    from nirvana.pruning.plan import PruningPlan
    from nirvana.pruning.slicing import apply_plan

    out = _output_folder(args.out)
    timings = {}
    t = time.perf_counter()
    lm = load_from_args(args)
    timings["load"] = time.perf_counter() - t
    shape = model_shape(lm.model)
    t = time.perf_counter()
    if args.plan:
        plan, scores_meta = PruningPlan.load(args.plan), None
        timings["score"] = 0.0
    else:
        # Bad settings fail here, before minutes of scoring, with allocate's own message.
        gamma = default_gamma(shape) if args.gamma is None and shape.is_uniform else args.gamma
        validate_settings(shape, args.sparsity, gamma, args.align, args.allocation)
        scores = _scores_for(args, lm)
        scores_meta = scores.metadata()
        run.save_scores_ref(scores_meta)
        timings["score"] = time.perf_counter() - t
        t = time.perf_counter()
        plan = allocate(scores, shape, args.sparsity, args.gamma, args.align, args.allocation)
    run.save_plan(plan)
    timings["plan"] = time.perf_counter() - t
    t = time.perf_counter()
    pruned = apply_plan(lm.model, plan, inplace=True)
    timings["slice"] = time.perf_counter() - t
    t = time.perf_counter()
    out.mkdir(parents=True, exist_ok=True)
    save_pruned(pruned, lm.tokenizer, plan, out / "model")
    plan.save(out / "plan.json")
    timings["save"] = time.perf_counter() - t
    report = {
        "model": args.model,
        "params_before": shape.total_params,
        "params_after": count_parameters(pruned),
        "block_params_before": plan.stats["block_weights_before"] + _block_biases(shape),
        "block_params_after": count_block_parameters(pruned),
        "target_sparsity": plan.settings["sparsity"],
        "achieved_block_sparsity": plan.stats["achieved_block_sparsity"],
        "total_param_reduction": 1 - count_parameters(pruned) / shape.total_params,
        "gamma": plan.settings["gamma"],
        "gamma_default": plan.settings["gamma_default"],
        "align": plan.settings["align"],
        "allocation": plan.settings["allocation"],
        "criterion": plan.settings["criterion"],
        "calibration": plan.settings["calibration"],
        "kept_kv_groups": plan.kept_kv_groups,
        "kept_neurons": plan.kept_neurons,
        "notes": plan.stats.get("notes", []),
        "scores": scores_meta and {k: scores_meta[k] for k in ("criterion", "fingerprint", "meta")},
        "timings": {k: round(v, 3) for k, v in timings.items()},
    }
    if getattr(args, "selection", None):
        report["calibration_selection"] = args.selection
    (out / "report.json").write_text(json.dumps(report, indent=2))
    run.write_json("report.json", {**report, "out": str(out.resolve())})
    run.write_json("metrics.json", {k: report[k] for k in _METRICS})
    if args.recover_steps is not None:
        report["recovery"] = _recover_after_prune(args, pruned, lm.tokenizer, plan, report, out)
    run.summary = {k: report[k] for k in _SUMMARY} | {"out": str(out.resolve())}
    print_json({k: v for k, v in report.items() if k not in ("kept_neurons",)} | {"run": run.id})
    return 0


# What the runs folder keeps of a prune: the command's settings, the measured figures, and the
# one-line summary `list_runs` shows.
_SETTINGS = (
    "model", "criterion", "calib", "samples", "seq_len", "seed", "sparsity", "gamma", "align",
    "allocation", "scores", "plan", "out", "select_calib", "dtype", "device",
)  # fmt: skip
_METRICS = (
    "params_before", "params_after", "block_params_before", "block_params_after",
    "achieved_block_sparsity", "total_param_reduction", "kept_kv_groups", "kept_neurons", "timings",
)  # fmt: skip
_SUMMARY = (
    "model", "criterion", "target_sparsity", "achieved_block_sparsity", "gamma", "params_before", "params_after",
)  # fmt: skip


def _recover_after_prune(args, pruned, tokenizer, plan, report: dict, out: Path) -> dict:
    """`prune --recover-steps N`: train the in-memory pruned model, then replace --out with the recovered one."""
    from nirvana.models.loaded import LoadedModel

    docs, info = args.recovery_docs
    result = run_recovery(pruned, tokenizer, args.recovery_config, docs, info, inplace=True)
    lm = LoadedModel(result.model, tokenizer, str(out), "pruned", 0.0, [], plan.to_dict())
    return save_result(result, lm, out, report, args.model)


def _output_folder(path: str) -> Path:
    """The --out folder, created up front so an unusable path fails before any model work."""
    from nirvana.errors import InvalidInput

    out = Path(path).expanduser()
    if out.exists() and not out.is_dir():
        raise InvalidInput(f"--out {path!r} is a file; pass a folder (it will hold plan.json, model/, report.json).")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InvalidInput(f"cannot create the --out folder {path!r} ({exc.strerror}); pass a writable one.") from exc
    return out


def _block_biases(shape) -> int:
    return shape.num_layers * (
        shape.num_kv_heads[0] * shape.attn_unit_bias + shape.intermediate[0] * shape.mlp_unit_bias
    )
