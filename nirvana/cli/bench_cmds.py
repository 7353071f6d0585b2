"""`bench <benchmark>`: benchmarks that write committed tables and plots under `benchmarks/`.

Each benchmark is a typed library function in `nirvana.bench` over a config dataclass; its flags
are made from that dataclass's fields (`nirvana.cli.flags`), so every default is written once,
there. The tables below give each flag's help text, in `--help` order.
"""

from __future__ import annotations

import datetime as dt
import json
import sys
from pathlib import Path

from nirvana.accuracy.sandbox import code_execution_allowed
from nirvana.accuracy.tasks import check_limit
from nirvana.bench import gpu, speed
from nirvana.bench.accuracy import ACCURACY, AccuracyConfig, kl_best_gammas
from nirvana.bench.base import Benchmark, run
from nirvana.bench.baselines import (
    BASELINES,
    ONE_PER_GRID,
    BaselinesConfig,
    backfill_passes,
    best_gammas,
    grid_folder,
    record_grid,
)
from nirvana.bench.baselines import DEFAULT_OUT as DEFAULT_BASELINES_OUT
from nirvana.bench.baselines import METHODS as BASELINES_METHODS
from nirvana.bench.baselines import measures as baseline_measures
from nirvana.bench.distill import DISTILL, DistillConfig
from nirvana.bench.gamma import GammaBenchConfig, run_gamma_bench
from nirvana.bench.gamma import write_outputs as write_gamma_outputs
from nirvana.bench.gpu import GpuBenchConfig
from nirvana.bench.quality import QUALITY
from nirvana.bench.quality_config import QualityConfig
from nirvana.bench.recovery import RECOVERY, RecoveryBenchConfig
from nirvana.bench.scale import ScaleConfig, run_scale_bench
from nirvana.bench.scale import write_outputs as write_scale_outputs
from nirvana.bench.scale_up import ScaleUpConfig, run_scale_up, table
from nirvana.bench.serve import ServeConfig, run_serve
from nirvana.bench.speed import SpeedBenchConfig
from nirvana.checkpoints.options import resolve_device, resolve_dtype
from nirvana.cli.checks import check_device, check_model
from nirvana.cli.common import add_model_args, add_ray_flag, cluster_from_args, config_from_args
from nirvana.cli.flags import add_config_flags
from nirvana.cluster.ray_tasks import disconnect
from nirvana.data.text import check_text_name
from nirvana.errors import InvalidInput
from nirvana.methods import METHODS
from nirvana.search.calibration import AnchorSpec

# Help text per config field that has a flag ("" for none); the type and default are the field's.
SPEED_FLAGS = {
    "sparsities": "comma-separated target sparsities (0 = dense)",
    "batch_sizes": "comma-separated batch sizes",
    "prompt_len": "",
    "new_tokens": "",
    "repeats": "",
    "warmup": "",
    "threads": "torch CPU threads (default: torch's choice)",
    "calib": "calibration dataset for the nirvana scores",
    "samples": "calibration sequences N",
    "seq_len": "calibration tokens per sequence T",
    "seed": "",
    "out": "output folder (default benchmarks/speed)",
}
GPU_FLAGS = {
    "tiny": "tiny config on CPU in seconds (same JSON fields)",
    "device": "auto (CUDA when present), cpu, cuda, cuda:N",
    "batch_size": "",
    "prompt_len": "default 128 (tiny: 16)",
    "new_tokens": "decode steps timed (default 32; tiny: 4)",
    "repeats": "timed repeats, median reported (default 5; tiny: 2)",
    "out": f"output folder (default {gpu.DEFAULT_OUT})",
}
QUALITY_FLAGS = {
    "model": "",
    "criteria": "comma-separated criteria",
    "sparsities": "",
    "uniform_criteria": "criteria also run with uniform allocation",
    "select_criteria": "criteria given KL-guided calibration (data-driven)",
    "candidates": "K calibration candidates for KL selection",
    "tokens": "tokens per perplexity dataset",
    "samples": "",
    "seq_len": "",
}
ANCHOR_FLAGS = {"samples": "", "seq_len": ""}  # --anchor-samples, --anchor-seq-len (quality's AnchorSpec)
QUALITY_MORE_FLAGS = {
    "kl_sequences": "measure KL on the first M anchor sequences only",
    "gamma": "",
    "out_dir": "",
}
GAMMA_FLAGS = {
    "model": "",
    "criteria": "comma-separated criteria",
    "sparsities": "",
    "gammas": "grid (the analytic gamma* is always added)",
    "samples": "",
    "seq_len": "",
    "anchor_samples": "",
    "anchor_seq_len": "",
    "out_dir": "",
}
RECOVERY_FLAGS = {
    "model": "",
    "steps": "optimizer steps per row (16 x 128 tokens each)",
    "data": "training data (see `recover --data`)",
    "seed": "",
    "tokens": "perplexity tokens per dataset",
    "acc_limit": "examples per zero-shot task for the 7-task average (0: skip it)",
    "bpb_limit": "MBPP gold bits-per-byte problems before and after (0: skip)",
    "threads": "",
    "out_dir": "",
}
DISTILL_FLAGS = {
    "model": "",
    "recipes": "comma-separated recipes: lm-lora, kd-lora, kd-full",
    "budgets": "comma-separated training-token budgets",
    "data": "training data (see `recover --data`)",
    "lr": "LoRA learning rate",
    "full_lr": "learning rate of full fine-tuning",
    "temperature": "distillation temperature",
    "tokens": "perplexity tokens per dataset",
    "acc_limit": "examples per zero-shot task for the 7-task average (0: skip it)",
    "threads": "",
    "out_dir": "",
    "teacher_cache": "a folder for the dense teacher's logits (fp32, exact; 12.2 GiB at 64k tokens): rows read them",
}
TASK_FLAGS = {  # the task rows of `bench accuracy` and `bench baselines`
    "limit": "examples per zero-shot task (the first N)",
    "lambada_limit": "LAMBADA examples (0: skip)",
    "mbpp_limit": "MBPP problems (0: skip; needs --allow-code-execution)",
    "bpb_limit": "MBPP gold bits-per-byte problems (0: skip)",
    "gsm8k_bpb_limit": "GSM8K gold bits-per-byte problems (0: skip)",
    "batch_size": "requests per log-likelihood forward (and rows generating at once, unless --generation-batch-size)",
    "bpb_batch_size": "harness batch size of the bits-per-byte rows",
    "generation_batch_size": "rows generating at once in the code rows (default: --batch-size; same completions)",
    "allow_code_execution": "run MBPP's generated code in the sandbox",
}
TASK_LIMITS = ("limit", "lambada_limit", "mbpp_limit", "bpb_limit", "gsm8k_bpb_limit")
ACCURACY_FLAGS = {"model": "", "sparsities": "", **TASK_FLAGS, "out_dir": ""}
BASELINES_FLAGS = {
    "model": "",
    "sparsities": "",
    "methods": "comma-separated methods of the pruned models (dense is always measured)",
    "nirvana_gamma": "NIRVANA once more at this gamma at every sparsity (where gamma* misses the target)",
    "tokens": "perplexity tokens per dataset (WikiText-2, PTB)",
    **TASK_FLAGS,
    "humaneval_limit": "HumanEval problems (0: skip; needs --allow-code-execution)",
    "code_first": "the code tasks (MBPP, HumanEval) right after each sparsity's perplexity rows, not last",
    "only_measures": "run only the planned rows of these measures now (e.g. ppl,mbpp_bpb); the report still "
    "counts the whole grid",
    "only_methods": "and only the rows of these models now (dense, a method of --methods), e.g. nirvana,llm-pruner",
    "only_sparsities": "and only the rows of the models at these sparsities now (0: dense; one of --sparsities), "
    "e.g. 0.5",
    "calib": "calibration text of every method's scores and reconstruction (default wikitext2-valid; python-code: "
    "code, for code models; a dataset name or a .txt/.jsonl file); another text goes to <out-dir>/calib-<name>/",
    "samples": "calibration sequences N (the same batch for every method)",
    "seq_len": "calibration tokens per sequence T",
    "use_score_cache": "reuse cached scores (the pruning time then leaves out scoring)",
    "micro_batch": "calibration sequences per scoring forward/backward (0: chosen from the memory plan)",
    "lora_sparsities": "sparsities whose methods are measured again after the default LoRA budget",
    "lora_data": "LoRA training documents (see `recover --data`)",
    "reconstruct_sparsities": "sparsities whose methods (not SliceGPT) are measured again with `prune --reconstruct`",
    "speed_repeats": "timed speed repeats per model (median reported)",
    "threads": "torch CPU threads (default: torch's choice)",
    "device": "where the models run: cpu (default, as the committed grids), cuda, cuda:N, auto",
    "dtype": "the models' weights: float32 (default), bfloat16, float16; rows of another dtype than float32 go "
    "to <out-dir>/<dtype>/",
    "out_dir": "",
}
SCALE_FLAGS = {
    "model": "",
    "criteria": "comma-separated criteria",
    "sparsities": "",
    "tokens": "perplexity tokens (WikiText-2)",
    "window": "",
    "workers": "the local Ray clusters' sizes (one-CPU workers each)",
    "repeats": "interleaved rounds of every run (the median is reported)",
    "out": "output folder (default benchmarks/scale)",
}
SCALE_UP_FLAGS = {
    "models": "comma-separated models (one not installed is skipped, with how to install it)",
    "methods": "comma-separated methods",
    "samples": "calibration sequences N",
    "seq_len": "calibration tokens per sequence T",
    "out": "output folder (default benchmarks/scale-up)",
    "rerun": "measure the rows already in the output again (appended; the table shows the latest of each)",
}
SERVE_FLAGS = {
    "model": "",
    "methods": "comma-separated methods of the pruned rows (the dense row is always measured)",
    "sparsities": "",
    "new_tokens": "greedy tokens per prompt compared with transformers",
    "batch_sizes": "requests per speed run",
    "prompt_len": "prompt tokens per request of the speed runs",
    "gen_tokens": "new tokens per request of the speed runs",
    "repeats": "timed runs per batch size (the median is reported)",
    "out": "output folder (default benchmarks/serve)",
}
NOTE_FLAG = {"note": "a line of context for the report header"}
METHOD_FLAGS = {
    "method": f"pruning method of the pruned models: {', '.join(METHODS)} (docs/BASELINES.md)",
    "method_settings": 'the method\'s own settings as JSON, e.g. \'{"taylor": "param_mix"}\' (llm-pruner)',
}


def register(sub) -> None:
    p = sub.add_parser("bench", help="run a benchmark and write its table and plot under benchmarks/")
    bench_sub = p.add_subparsers(dest="benchmark", metavar="BENCHMARK", required=True)
    for add in (
        _add_speed,
        _add_gpu,
        _add_quality,
        _add_gamma,
        _add_accuracy,
        _add_recovery,
        _add_distill,
        _add_baselines,
        _add_scale,
        _add_scale_up,
        _add_serve,
    ):
        add(bench_sub)


def log(message: str) -> None:
    print(f"{dt.datetime.now(dt.UTC):%H:%M:%S} {message}", file=sys.stderr, flush=True)


def check_models(args) -> None:
    """The benchmark's model(s) (--model, or scale-up's --models), --device and --dtype, refused before any row
    loads them: a mistyped name costs a second, not the first row's load."""
    for name in getattr(args, "models", None) or [getattr(args, "model", None)]:
        if name is not None:
            check_model(str(name))
    check_device(args)


def run_grid(bench: Benchmark, config, args):
    """`run` in this process, or on the cluster `--ray` names (left again at the end)."""
    check_models(args)
    cluster = cluster_from_args(args)
    try:
        return run(bench, config, log, cluster=cluster)
    finally:
        if cluster is not None:
            disconnect()


def run_or_report(bench: Benchmark, config, report_only: bool, args=None):
    """Run (or resume) a CSV benchmark (`--ray`: on a cluster), or with `--report-only` take the rows
    already there; then rebuild its report from them and return what `report` returns."""
    rows = bench.committed(config) if report_only else run_grid(bench, config, args)
    return bench.report(rows, config)


# ---------------------------------------------------------------- speed


def _add_speed(bench_sub) -> None:
    p = bench_sub.add_parser("speed", help="prune at several sparsities; measure prefill/decode speed and memory")
    add_model_args(p)
    add_config_flags(p, SpeedBenchConfig, SPEED_FLAGS)
    add_config_flags(p, SpeedBenchConfig, METHOD_FLAGS)
    p.add_argument("--json", action="store_true", help="print the raw result as JSON")
    add_ray_flag(p)
    p.set_defaults(func=cmd_speed)


def speed_config(args) -> SpeedBenchConfig:
    return config_from_args(SpeedBenchConfig, args)


def cmd_speed(args) -> int:
    result = run_grid(speed.SPEED, speed_config(args), args)
    paths = speed.write_outputs(result, Path(args.out))
    if args.json:
        print(json.dumps(result, indent=2, default=str))
    else:
        print(speed.markdown_table(result))
        print("wrote " + ", ".join(str(p) for p in paths))
    return 0


# ---------------------------------------------------------------- gpu


def _add_gpu(bench_sub) -> None:
    p = bench_sub.add_parser("gpu", help="Llama-3.1-8B throughput/memory, dense vs pruned 20%%/50%% (--tiny on CPU)")
    add_config_flags(p, GpuBenchConfig, GPU_FLAGS)
    add_config_flags(p, GpuBenchConfig, METHOD_FLAGS)
    p.set_defaults(func=cmd_gpu)


def cmd_gpu(args) -> int:
    config = config_from_args(GpuBenchConfig, args, device=resolve_device(args.device))
    if not config.tiny and not config.device.startswith("cuda"):
        raise InvalidInput(
            "the full benchmark builds an 8-billion-parameter model and needs a CUDA GPU (about 40 GB for the dense "
            "and both pruned copies); on this machine run `python -m nirvana bench gpu --tiny`."
        )
    result = run(gpu.GPU, config, log)
    path = gpu.write_result(result, config.out)
    print(json.dumps(result, indent=2))
    print(f"wrote {path}", file=sys.stderr)
    return 0


# ---------------------------------------------------------------- quality


def _add_quality(bench_sub) -> None:
    p = bench_sub.add_parser("quality", help="perplexity and KL of every criterion/allocation/sparsity (CSV, md, PNG)")
    add_config_flags(p, QualityConfig, QUALITY_FLAGS)
    add_config_flags(p, AnchorSpec, ANCHOR_FLAGS, prefix="anchor_")
    add_config_flags(p, QualityConfig, QUALITY_MORE_FLAGS)
    add_config_flags(p, QualityConfig, METHOD_FLAGS)
    p.add_argument("--report-only", action="store_true", help="rebuild markdown and plots from the CSV")
    add_config_flags(p, QualityConfig, NOTE_FLAG)
    add_ray_flag(p)
    p.set_defaults(func=cmd_quality)


def quality_config(args) -> QualityConfig:
    anchor = AnchorSpec(samples=args.anchor_samples, seq_len=args.anchor_seq_len)
    return config_from_args(QualityConfig, args, anchor=anchor)


def cmd_quality(args) -> int:
    config = quality_config(args)
    md, text = run_or_report(QUALITY, config, args.report_only, args)
    print(text)
    log(f"wrote {config.csv_path}, {md} and plots")
    return 0


# ---------------------------------------------------------------- gamma


def _add_gamma(bench_sub) -> None:
    p = bench_sub.add_parser("gamma", help="KL to dense over a gamma grid per criterion and sparsity (JSON, md, PNG)")
    add_config_flags(p, GammaBenchConfig, GAMMA_FLAGS)
    add_config_flags(p, GammaBenchConfig, METHOD_FLAGS)
    add_ray_flag(p)
    p.set_defaults(func=cmd_gamma)


def gamma_config(args) -> GammaBenchConfig:
    return config_from_args(GammaBenchConfig, args)


def cmd_gamma(args) -> int:
    config = gamma_config(args)
    check_models(args)
    cluster = cluster_from_args(args)
    try:
        data = run_gamma_bench(config, log, cluster)
    finally:
        if cluster is not None:
            disconnect()
    paths = write_gamma_outputs(data, config.out_dir)
    print(paths[1].read_text())
    log("wrote " + ", ".join(str(p) for p in paths))
    return 0


# ---------------------------------------------------------------- recovery


def _add_recovery(bench_sub) -> None:
    p = bench_sub.add_parser("recovery", help="LoRA recovery of pruned models per criterion: perplexity before/after")
    add_config_flags(p, RecoveryBenchConfig, RECOVERY_FLAGS)
    add_config_flags(p, RecoveryBenchConfig, METHOD_FLAGS)
    p.add_argument("--report-only", action="store_true", help="rebuild markdown and plot from the CSV")
    add_config_flags(p, RecoveryBenchConfig, {"note": ""})
    add_ray_flag(p)
    p.set_defaults(func=cmd_recovery)


def cmd_recovery(args) -> int:
    if args.steps < 1:
        raise InvalidInput(f"--steps must be a positive integer, got {args.steps}.")
    if args.acc_limit < 0:
        raise InvalidInput(
            f"--acc-limit must be 0 (no accuracy) or a positive number of examples per task, got {args.acc_limit}."
        )
    check_limits(args, ("bpb_limit",))
    md = run_or_report(RECOVERY, config_from_args(RecoveryBenchConfig, args), args.report_only, args)
    print(md.read_text())
    return 0


# ---------------------------------------------------------------- distill


def _add_distill(bench_sub) -> None:
    p = bench_sub.add_parser(
        "distill", help="recovery recipes (next-token LoRA, distillation LoRA / full) against training tokens"
    )
    add_config_flags(p, DistillConfig, DISTILL_FLAGS)
    p.add_argument("--report-only", action="store_true", help="rebuild markdown and plot from the CSV")
    add_config_flags(p, DistillConfig, {"note": ""})
    add_ray_flag(p)
    p.set_defaults(func=cmd_distill)


def cmd_distill(args) -> int:
    if args.acc_limit < 0:
        raise InvalidInput(
            f"--acc-limit must be 0 (no accuracy) or a positive number of examples per task, got {args.acc_limit}."
        )
    md = run_or_report(DISTILL, config_from_args(DistillConfig, args), args.report_only, args)
    print(md.read_text())
    return 0


# ---------------------------------------------------------------- accuracy


def _add_accuracy(bench_sub) -> None:
    p = bench_sub.add_parser(
        "accuracy", help="zero-shot accuracy, LAMBADA and MBPP of dense and pruned models (CSV, md, PNG)"
    )
    add_config_flags(p, AccuracyConfig, ACCURACY_FLAGS)
    add_config_flags(p, AccuracyConfig, METHOD_FLAGS)
    p.add_argument("--report-only", action="store_true", help="rebuild markdown and plot from the CSV")
    add_config_flags(p, AccuracyConfig, NOTE_FLAG)
    add_ray_flag(p)
    p.set_defaults(func=cmd_accuracy)


def check_limits(args, flags: tuple[str, ...]) -> None:
    """Each example-count flag is a valid limit; all but `limit` may also be 0 (skip)."""
    for flag in flags:
        value = getattr(args, flag)
        if value != 0 or flag == "limit":
            check_limit(value)


def accuracy_config(args) -> AccuracyConfig:
    check_limits(args, TASK_LIMITS)
    best = {s: g for s, g in kl_best_gammas(args.model).items() if s in args.sparsities}
    allowed = code_execution_allowed(args.allow_code_execution)
    return config_from_args(AccuracyConfig, args, allow_code_execution=allowed, best_gamma=best)


def cmd_accuracy(args) -> int:
    config = accuracy_config(args)
    md, text = run_or_report(ACCURACY, config, args.report_only, args)
    print(text)
    log(f"wrote {config.csv_path} and {md}")
    return 0


# ---------------------------------------------------------------- baselines


def _add_baselines(bench_sub) -> None:
    p = bench_sub.add_parser(
        "baselines", help="NIRVANA beside LLM-Pruner and FLAP at 20%% and 50%%: the paper's table (CSV, md, PNG)"
    )
    add_config_flags(p, BaselinesConfig, BASELINES_FLAGS)
    p.add_argument("--report-only", action="store_true", help="rebuild markdown and plot from the CSV")
    p.add_argument(
        "--backfill-passes",
        action="store_true",
        help="give the CSV's code rows measured before per-problem outcomes were kept their outcomes (for paired "
        "differences): each row's model is built again and its completions, from this machine's eval cache, "
        "replayed in the sandbox; nothing generates; then the report is rebuilt",
    )
    add_config_flags(p, BaselinesConfig, NOTE_FLAG)
    add_ray_flag(p)
    p.set_defaults(func=cmd_baselines)


def baselines_config(args) -> BaselinesConfig:
    check_limits(args, (*TASK_LIMITS, "humaneval_limit"))
    if args.tokens < 1:
        raise InvalidInput(f"--tokens must be a positive number of tokens, got {args.tokens}.")
    if args.threads is not None and args.threads < 1:
        raise InvalidInput(f"--threads must be a positive integer, got {args.threads}.")
    if not args.sparsities or any(not 0 < s < 1 for s in args.sparsities):
        raise InvalidInput(f"--sparsities must lie in (0, 1), got {args.sparsities}; e.g. 0.2,0.5.")
    if args.nirvana_gamma is not None and not args.nirvana_gamma > 0:
        raise InvalidInput(f"--nirvana-gamma must be a positive number, got {args.nirvana_gamma}.")
    for name in args.methods:
        if name not in BASELINES_METHODS:
            raise InvalidInput(f"unknown method {name!r} in --methods; accepted: {', '.join(BASELINES_METHODS)}.")
    check_text_name(args.calib)
    allowed = code_execution_allowed(args.allow_code_execution)
    best = best_gammas(args.model, args.sparsities, args.calib)
    device = resolve_device(args.device)
    dtype = str(resolve_dtype(args.dtype, device)).removeprefix("torch.")  # "bf16" and "auto" by their names
    out_dir = Path(args.out_dir)
    if out_dir == DEFAULT_BASELINES_OUT:  # never a table mixing precisions or calibrations (the record refuses it)
        for name, value in (("dtype", dtype), ("calib", args.calib)):
            if value != ONE_PER_GRID[name][0]:
                out_dir = out_dir / grid_folder(name, value)
    config = config_from_args(
        BaselinesConfig,
        args,
        allow_code_execution=allowed,
        best_gamma=best,
        device=device,
        dtype=dtype,
        out_dir=out_dir,
    )
    _check_subset(
        "--only-measures",
        config.only_measures,
        baseline_measures(config),
        "which this grid plans no rows of; it plans",
        " (a limit of 0 skips a task; code tasks need --allow-code-execution)",
    )
    models = ("dense", *config.methods)
    _check_subset("--only-methods", config.only_methods, models, "which this grid has no rows of; it has")
    _check_subset(
        "--only-sparsities",
        [f"{x:g}" for x in config.only_sparsities],
        [f"{x:g}" for x in (0.0, *config.sparsities)],
        "at which this grid has no models; it has",
        " (0 is dense)",
    )
    return config


def _check_subset(flag: str, names, allowed, why: str, hint: str = "") -> None:
    """A clear InvalidInput when `flag` names something outside `allowed`."""
    unknown = [n for n in names if n not in allowed]
    if unknown:
        raise InvalidInput(f"{flag} names {', '.join(unknown)}, {why}: {', '.join(allowed)}{hint}.")


def cmd_baselines(args) -> int:
    config = baselines_config(args)
    if args.backfill_passes:
        if not config.allow_code_execution:
            raise InvalidInput(
                "--backfill-passes runs the cached completions in the sandbox: add --allow-code-execution."
            )
        for line in backfill_passes(config, log):
            log(line)
        args.report_only = True
    if not args.report_only:
        record_grid(config)  # what this grid plans, beside its CSV (the Evidence page reads it)
    md, text = run_or_report(BASELINES, config, args.report_only, args)
    print(text)
    log(f"wrote {config.csv_path} and {md}")
    return 0


# ---------------------------------------------------------------- scale


def _add_scale(bench_sub) -> None:
    p = bench_sub.add_parser(
        "scale", help="a small quality grid in-process and on local Ray clusters of 1 and 2 workers: wall times"
    )
    add_config_flags(p, ScaleConfig, SCALE_FLAGS)
    p.set_defaults(func=cmd_scale)


def cmd_scale(args) -> int:
    config = config_from_args(ScaleConfig, args)
    if not config.workers or any(w < 1 for w in config.workers):
        raise InvalidInput(f"--workers must be positive cluster sizes, e.g. 1,2; got {config.workers}.")
    check_models(args)
    result = run_scale_bench(config, log)
    paths = write_scale_outputs(result, config.out)
    print(paths[1].read_text())
    log("wrote " + ", ".join(str(p) for p in paths))
    return 0


def _add_scale_up(bench_sub) -> None:
    p = bench_sub.add_parser(
        "scale-up", help="scoring time and peak memory per method and model size, beside the memory plan"
    )
    add_config_flags(p, ScaleUpConfig, SCALE_UP_FLAGS)
    p.set_defaults(func=cmd_scale_up)


def cmd_scale_up(args) -> int:
    config = config_from_args(ScaleUpConfig, args)
    unknown = [m for m in config.methods if m not in METHODS]
    if unknown:
        raise InvalidInput(f"unknown method(s) {', '.join(unknown)}; accepted: {', '.join(METHODS)}.")
    check_models(args)
    rows = run_scale_up(config, log)
    print(table(rows))
    return 0


def _add_serve(bench_sub) -> None:
    p = bench_sub.add_parser(
        "serve", help="pruned models through vLLM: greedy text against transformers, tokens/s (make serve-env)"
    )
    add_config_flags(p, ServeConfig, SERVE_FLAGS)
    p.set_defaults(func=cmd_serve)


def cmd_serve(args) -> int:
    config = config_from_args(ServeConfig, args)
    unknown = [m for m in config.methods if m not in METHODS]
    if unknown:
        raise InvalidInput(f"unknown method(s) {', '.join(unknown)}; accepted: {', '.join(METHODS)}.")
    check_models(args)
    rows = run_serve(config, log)
    print((config.out / "serve.md").read_text() if rows else "no rows")
    return 0
