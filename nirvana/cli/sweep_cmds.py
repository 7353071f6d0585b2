"""`sweep`: quality and measured decode speed against sparsity (and, for NIRVANA, gamma), as on the app's Sweep page.

    python -m nirvana sweep --model smollm2-135m --sparsities 0.1,0.2,0.5 --gammas 1,4 --out sweep.json
    python -m nirvana sweep --model smollm2-135m --method flap --sparsities 0.2,0.5 --metric kl --out flap.json

The model is scored once (`score`'s flags and cache); every point re-allocates those scores
(`nirvana.search.sweep.run_sweep`). A baseline method sweeps sparsity only: `--gammas` is NIRVANA's.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import asdict

from nirvana.cli.checks import check_model_args, check_out_file, check_settings, family
from nirvana.cli.common import (
    add_model_args,
    add_ray_flag,
    cluster_from_args,
    hold_device,
    load_from_args,
    stderr_progress,
)
from nirvana.cli.flags import LISTS, add_config_flags
from nirvana.cli.prune_cmds import add_calibration_args, settings_from_args
from nirvana.cluster.ray_tasks import disconnect
from nirvana.data.text import check_text_name
from nirvana.errors import InvalidInput
from nirvana.methods import get_method
from nirvana.methods.run import data_plan
from nirvana.models.shapes import model_shape
from nirvana.pipeline import calibration_for, score
from nirvana.pruning.allocation import Allocation
from nirvana.search.sweep import QUALITY, SweepSettings, run_sweep, sweep_points
from nirvana.store.atomic import atomic_write_text

SWEEP_FLAGS = {
    "dataset": "perplexity dataset",
    "tokens": "perplexity token budget",
    "window": "perplexity window (tokens)",
    "acc_limit": "examples per task of the lm-eval metrics",
}


def register(sub) -> None:
    p = sub.add_parser("sweep", help="quality and decode speed against sparsity and gamma, from one scoring")
    add_model_args(p)
    add_calibration_args(p)
    p.add_argument("--sparsity", type=float, default=None, help="the gamma sweep's sparsity (NIRVANA; default 0.5)")
    p.add_argument("--gamma", type=float, default=None, help="the sparsity sweep's gamma (default: gamma*)")
    p.add_argument("--align", type=int, default=8)
    p.add_argument("--allocation", choices=["global", "uniform"], default="global")
    p.add_argument(
        "--sparsities", type=LISTS[float], default=[0.1, 0.2, 0.3, 0.5], help="target sparsities (swept at --gamma)"
    )
    p.add_argument("--gammas", type=LISTS[float], default=[], help="gamma values (swept at --sparsity; NIRVANA only)")
    p.add_argument("--metric", default="perplexity", help=", ".join(QUALITY))
    add_config_flags(p, SweepSettings, SWEEP_FLAGS)
    p.add_argument("--no-speed", action="store_true", help="skip the decode-speed measurement")
    p.add_argument("--out", required=True, help="output JSON file: the settings and one row per point")
    add_ray_flag(p)
    p.set_defaults(func=cmd_sweep)


def centre_sparsity(args) -> float:
    """The gamma sweep's sparsity: NIRVANA's --sparsity (0.5); a baseline has no gamma sweep, and its
    scores do not depend on the sparsity, so it scores at 0 (each swept point is checked on its own)."""
    if get_method(args.method).has_allocation_settings:
        return 0.5 if args.sparsity is None else args.sparsity
    if args.sparsity is not None:
        raise InvalidInput(
            f"--sparsity is the centre of NIRVANA's gamma sweep; method {args.method!r} sweeps --sparsities only."
        )
    return 0.0


def sweep_settings(args) -> SweepSettings:
    if args.metric not in QUALITY:
        raise InvalidInput(f"unknown --metric {args.metric!r}; accepted: {', '.join(QUALITY)}.")
    if args.gammas and not get_method(args.method).has_allocation_settings:
        raise InvalidInput(
            f"gamma is NIRVANA's attention / MLP split; method {args.method!r} allocates its own way, so it "
            "sweeps --sparsities only: drop --gammas."
        )
    return SweepSettings(
        sparsities=tuple(args.sparsities),
        gammas=tuple(args.gammas),
        allocation=Allocation(centre_sparsity(args), args.gamma, args.align, args.allocation),
        metric=args.metric,
        dataset=args.dataset,
        tokens=args.tokens,
        window=args.window,
        speed=not args.no_speed,
        acc_limit=args.acc_limit,
        method=args.method,
        method_settings=args.method_settings,
    )


def check_sweep(settings: SweepSettings, scoring, kind: str | None) -> None:
    """Every point of the sweep, refused before the lock and the load: NIRVANA's allocations (the library's
    own list of points), a baseline's sparsities, the scoring settings, the perplexity dataset's name."""
    sweep_points(settings)
    for sparsity in (scoring.sparsity, *settings.sparsities):
        check_settings(dataclasses.replace(scoring, sparsity=sparsity), kind)
    if settings.metric == "perplexity":
        check_text_name(settings.dataset)


def cmd_sweep(args) -> int:
    ref = check_model_args(args)
    settings = sweep_settings(args)  # bad sweep settings fail before loading or scoring
    scoring = settings_from_args(args)
    scoring = dataclasses.replace(scoring, sparsity=centre_sparsity(args))
    check_sweep(settings, scoring, family(ref))
    check_out_file(args.out, "the settings and one row per point, as JSON")
    cluster = cluster_from_args(args)  # --ray: each point a task there (the model loaded there by name); first
    try:
        lm, scores, rows = _measure(args, settings, scoring, cluster)  # scores: their metadata
    finally:
        if cluster is not None:
            disconnect()
    document = {"model": lm.name, "settings": asdict(settings), "scores": scores, "rows": rows}
    atomic_write_text(args.out, json.dumps(document, indent=2, default=str) + "\n")
    for r in rows:
        gamma = "-" if r["gamma"] is None else f"{r['gamma']:.2f}"
        speed = "-" if r["decode_tokens_per_s"] is None else f"{r['decode_tokens_per_s']:.1f}"
        print(
            f"{r['axis']:8s} {r['method']:10s} s={r['sparsity']:.2f} gamma={gamma} "
            f"achieved={r['achieved_block_sparsity']:.3f} {args.metric}={r['quality']:.4g} decode={speed} tok/s"
        )
    print(f"wrote {args.out}")
    return 0


def _measure(args, settings: SweepSettings, scoring, cluster):
    with hold_device(args, "sweep"):
        lm = load_from_args(args)
        method, shape = get_method(scoring.method), model_shape(lm.model)
        for sparsity in settings.sparsities:  # each point's refusals first (a sparsity a layer range cannot reach)
            method.check(lm.model, shape, dataclasses.replace(scoring, sparsity=sparsity))
        if not method.has_unit_scores:  # SliceGPT, Tyr: no scores, a plan on the batch per point
            batch, _ = calibration_for(lm, scoring, stderr_progress)
            for sparsity in settings.sparsities:  # a width it cannot reach, a batch too small: before any point
                data_plan(lm.model, scoring.method, scoring.config, sparsity, batch)
            facts = {"method": scoring.method, "calibration": batch.describe()}
            return lm, facts, run_sweep(lm, None, settings, stderr_progress, cluster=cluster, batch=batch)
        scores, _ = score(lm, scoring, stderr_progress)
        return lm, scores.metadata(), run_sweep(lm, scores, settings, stderr_progress, cluster=cluster)
