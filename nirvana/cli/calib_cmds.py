"""`select-calib` (KL-guided calibration choice) and `gamma-search` (KL over a gamma grid)."""

from __future__ import annotations

import time

from nirvana.cli.checks import check_model_args
from nirvana.cli.common import (
    add_model_args,
    hold_device,
    load_from_args,
    print_json,
    record_command,
    stderr_progress,
)
from nirvana.cli.flags import LISTS
from nirvana.data.calibration import check_calibration_source
from nirvana.measure.compare import kl_rows
from nirvana.measure.kl import DenseReference
from nirvana.measure.paired import paired_text
from nirvana.models.shapes import model_shape
from nirvana.pipeline import PruneSettings, score
from nirvana.pruning.allocation import Allocation
from nirvana.scoring.criteria import DATA_CRITERIA, get_criterion
from nirvana.search.calibration import AnchorSpec, anchor_batch, candidate_batch, check_selection, select_calibration
from nirvana.search.gamma import gamma_grid, gamma_search


def add_anchor_args(p) -> None:
    p.add_argument("--anchor-samples", type=int, default=128, help="anchor sequences for the KL (default 128)")
    p.add_argument("--anchor-seq-len", type=int, default=64, help="tokens per anchor sequence (default 64)")
    p.add_argument("--anchor-seed", type=int, default=42)


def _common(p) -> None:
    add_model_args(p)
    p.add_argument("--criterion", default="nirvana", help=f"data-driven criterion: {', '.join(DATA_CRITERIA)}")
    p.add_argument("--gamma", type=float, default=None, help="MLP/attention pruning ratio (default: analytic gamma*)")
    p.add_argument("--align", type=int, default=8)
    p.add_argument("--allocation", choices=["global", "uniform"], default="global")
    p.add_argument("--pool", default="wikitext2-valid", help="calibration pool (dataset name or .txt/.jsonl)")
    p.add_argument("--samples", type=int, default=32, help="calibration sequences N per candidate")
    p.add_argument("--seq-len", type=int, default=128, help="tokens per calibration sequence T")
    p.add_argument(
        "--micro-batch", type=int, default=0, help="sequences per forward/backward (0 = chosen from the memory plan)"
    )
    add_anchor_args(p)
    p.add_argument("--json", action="store_true", help="print JSON only")


def register(sub) -> None:
    p = sub.add_parser("select-calib", help="choose the calibration batch whose pruned model has the lowest KL")
    _common(p)
    p.add_argument("--sparsity", type=float, required=True, help="target fraction of decoder-block weights")
    p.add_argument("--candidates", type=int, default=8, help="K candidate batches (seeds 0..K-1)")
    p.add_argument(
        "--seeds",
        type=LISTS[int],
        default=None,
        help="explicit comma-separated candidate seeds (overrides --candidates)",
    )
    p.add_argument("--no-cache", action="store_true", help="recompute scores and the selection")
    p.set_defaults(func=cmd_select_calib)

    p = sub.add_parser("gamma-search", help="KL to dense over a grid of gamma values, from cached scores")
    _common(p)
    p.add_argument("--sparsity", type=LISTS[float], default="0.2", help="one sparsity or a comma-separated list")
    p.add_argument(
        "--gammas", type=LISTS[float], default=None, help="comma-separated gammas (default: 0.5..6 grid plus gamma*)"
    )
    p.add_argument("--seed", type=int, default=0, help="calibration seed (the batch avoids the anchor's documents)")
    p.set_defaults(func=cmd_gamma_search)


def run_selection(args, lm, *, candidates: int, pool: str, anchor, seeds=None):
    """KL-guided calibration from parsed flags; `select-calib` and `prune --select-calib K` share it."""

    return select_calibration(
        lm.model,
        lm.tokenizer,
        Allocation(args.sparsity, args.gamma, args.align, args.allocation),
        criterion=args.criterion,
        candidates=candidates,
        seeds=seeds,
        pool=pool,
        samples=args.samples,
        seq_len=args.seq_len,
        anchor=anchor,
        micro_batch=args.micro_batch,
        use_cache=not args.no_cache,
        progress=stderr_progress,
    )


def _anchor_spec(args):

    return AnchorSpec(args.pool, args.anchor_samples, args.anchor_seq_len, args.anchor_seed)


def _check_draws(args, needs_data: bool = True) -> None:
    """The calibration pool and the sizes drawn from it (the candidates' and the anchor's), by name and range."""
    if needs_data:
        check_calibration_source(args.pool, args.samples, args.seq_len)
    check_calibration_source(args.pool, args.anchor_samples, args.anchor_seq_len)


def cmd_select_calib(args) -> int:
    check_model_args(args)  # everything that needs no model, before the lock and the load
    Allocation(args.sparsity, args.gamma, args.align, args.allocation)
    check_selection(args.criterion, args.pool, args.candidates, args.seeds)
    _check_draws(args)
    t0 = time.perf_counter()
    with hold_device(args, "select-calib"):
        lm = load_from_args(args)
        selection = run_selection(
            args, lm, candidates=args.candidates, pool=args.pool, anchor=_anchor_spec(args), seeds=args.seeds
        )
    out = {**selection.to_dict(), "wall_seconds": round(time.perf_counter() - t0, 2)}
    out["run"] = record_command(
        "select_calib", args, out, {"chosen_seed": selection.chosen_seed, "sparsity": args.sparsity}
    )
    if args.json:
        print_json(out)
        return 0
    source = "cache" if selection.from_cache else f"{selection.seconds:.1f} s"
    print(f"KL(P_dense || P_pruned) on {selection.anchor['samples']} x {selection.anchor['seq_len']} anchor tokens")
    print(f"{args.criterion}, sparsity {args.sparsity:g}, gamma {selection.settings['gamma']:.3g} ({source})")
    for row in kl_rows(selection):
        mark = "  <- chosen" if row["chosen"] else ""
        print(f"  seed {row['seed']:4d}  KL {row['KL (nats/token)']:.6f}{mark}")
    for note in selection.notes:
        print(f"note: {note}")
    return 0


def cmd_gamma_search(args) -> int:
    check_model_args(args)  # everything that needs no model, before the lock and the load
    settings = PruneSettings(sparsity=0.0, criterion=args.criterion, seed=args.seed, micro_batch=args.micro_batch)
    if args.gammas is not None:
        gamma_grid(None, args.gammas)  # the shape is read only for the default grid
    for sparsity in args.sparsity:
        Allocation(sparsity, args.gamma, args.align, args.allocation)
    _check_draws(args, get_criterion(args.criterion).needs_data)
    t0 = time.perf_counter()
    with hold_device(args, "gamma-search"):
        lm = load_from_args(args)
        anchor = anchor_batch(lm.tokenizer, _anchor_spec(args))
        batch = None
        if get_criterion(args.criterion).needs_data:
            batch = candidate_batch(
                lm.tokenizer, anchor, source=args.pool, samples=args.samples, seq_len=args.seq_len, seed=args.seed
            )
        scores, _ = score(lm, settings, stderr_progress, batch=batch)
        reference = DenseReference(lm.model, anchor.input_ids, progress=stderr_progress)
        gammas = list(args.gammas) if args.gammas else None
        if args.gamma is not None:  # an explicit --gamma joins the grid
            gammas = (gammas or gamma_grid(model_shape(lm.model))) + [args.gamma]
        result = gamma_search(
            lm.model,
            scores,
            reference,
            gammas=gammas,
            sparsities=args.sparsity,
            align=args.align,
            allocation=args.allocation,
            progress=stderr_progress,
        )
    out = {
        **result.to_dict(),
        "scores_cached": bool(scores.meta.get("cache_hit")),
        "score_seconds": scores.meta.get("seconds"),
        "calibration": scores.calibration,
        "wall_seconds": round(time.perf_counter() - t0, 2),
    }
    out["run"] = record_command("gamma_search", args, out, {"sparsity": args.sparsity, "criterion": args.criterion})
    if args.json:
        print_json(out)
        return 0
    print(f"{result.criterion} scores ({'cached' if out['scores_cached'] else 'computed'}), {result.allocation}")
    for sparsity in result.sparsities:
        best = result.best(sparsity)
        print(f"sparsity {sparsity:g} (gamma* = {result.gamma_default:.3g}):")
        for p in (p for p in result.points if p.sparsity == sparsity):
            mark = "  <- best" if p is best else ""
            pair = f"  vs gamma* {paired_text(p.vs_default)}" if p.vs_default else ""
            print(f"  gamma {p.gamma:6.3g}  KL {p.kl:.6f}  achieved {p.achieved_block_sparsity:.3f}{pair}{mark}")
    return 0
