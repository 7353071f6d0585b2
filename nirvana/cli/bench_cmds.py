"""`bench <benchmark>`: benchmarks that write committed tables and plots under `benchmarks/`.

The flags live here; each benchmark is a typed library function in `nirvana.bench`.
"""

from __future__ import annotations

import datetime as dt
import json
import sys
from pathlib import Path

import torch

from nirvana.accuracy.sandbox import code_execution_allowed
from nirvana.accuracy.tasks import check_limit
from nirvana.bench import gpu, speed
from nirvana.bench.accuracy import DEFAULT_OUT as ACCURACY_OUT
from nirvana.bench.accuracy import SPARSITIES as ACCURACY_SPARSITIES
from nirvana.bench.accuracy import AccuracyConfig, kl_best_gammas, run_accuracy_bench
from nirvana.bench.accuracy import read_rows as accuracy_rows
from nirvana.bench.accuracy import write_report as write_accuracy_report
from nirvana.bench.gamma import DEFAULT_OUT as GAMMA_OUT
from nirvana.bench.gamma import GAMMAS, GammaBenchConfig, run_gamma_bench
from nirvana.bench.gamma import write_outputs as write_gamma_outputs
from nirvana.bench.quality import committed_rows, run_quality
from nirvana.bench.quality_config import CRITERIA, DATA_DRIVEN, SPARSITIES, QualityConfig
from nirvana.bench.quality_config import DEFAULT_OUT as QUALITY_OUT
from nirvana.bench.quality_report import write_report
from nirvana.bench.recovery import DEFAULT_OUT as RECOVERY_OUT
from nirvana.bench.recovery import RecoveryBenchConfig, run_recovery_bench
from nirvana.bench.recovery import read_rows as recovery_rows
from nirvana.bench.recovery import write_report as write_recovery_report
from nirvana.cli.common import (
    add_model_args,
    config_from_args,
    load_from_args,
    parse_float_list,
    parse_int_list,
    parse_name_list,
    stderr_progress,
)
from nirvana.errors import InvalidInput
from nirvana.models.loading import resolve_device
from nirvana.search.calibration import AnchorSpec


def register(sub) -> None:
    p = sub.add_parser("bench", help="run a benchmark and write its table and plot under benchmarks/")
    bench_sub = p.add_subparsers(dest="benchmark", metavar="BENCHMARK", required=True)
    for add in (_add_speed, _add_gpu, _add_quality, _add_gamma, _add_accuracy, _add_recovery):
        add(bench_sub)


def log(message: str) -> None:
    print(f"{dt.datetime.now(dt.UTC):%H:%M:%S} {message}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------- speed


def _add_speed(bench_sub) -> None:
    p = bench_sub.add_parser("speed", help="prune at several sparsities; measure prefill/decode speed and memory")
    add_model_args(p)
    p.add_argument("--sparsities", default="0,0.2,0.5", help="comma-separated target sparsities (0 = dense)")
    p.add_argument("--batch-sizes", default="1,8,32", help="comma-separated batch sizes")
    p.add_argument("--prompt-len", type=int, default=128)
    p.add_argument("--new-tokens", type=int, default=32)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    p.add_argument("--calib", default="wikitext2-valid", help="calibration dataset for the nirvana scores")
    p.add_argument("--samples", type=int, default=32, help="calibration sequences N")
    p.add_argument("--seq-len", type=int, default=128, help="calibration tokens per sequence T")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=str(speed.DEFAULT_OUT), help="output folder (default benchmarks/speed)")
    p.add_argument("--json", action="store_true", help="print the raw result as JSON")
    p.set_defaults(func=cmd_speed)


def cmd_speed(args) -> int:
    if args.threads is not None:
        if args.threads < 1:
            raise InvalidInput(f"--threads must be a positive integer, got {args.threads}.")
        torch.set_num_threads(args.threads)
    try:
        sparsities, batch_sizes = parse_float_list(args.sparsities), parse_int_list(args.batch_sizes)
    except ValueError as exc:
        raise InvalidInput("--sparsities and --batch-sizes must be comma-separated numbers, e.g. 0,0.2,0.5.") from exc
    lm = load_from_args(args)
    result = speed.run_speed_bench(
        lm,
        sparsities,
        batch_sizes=batch_sizes,
        prompt_len=args.prompt_len,
        new_tokens=args.new_tokens,
        repeats=args.repeats,
        warmup=args.warmup,
        calib=args.calib,
        samples=args.samples,
        seq_len=args.seq_len,
        seed=args.seed,
        progress=stderr_progress,
    )
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
    p.add_argument("--tiny", action="store_true", help="tiny config on CPU in seconds (same JSON fields)")
    p.add_argument("--device", default="auto", help="auto (CUDA when present), cpu, cuda, cuda:N")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--prompt-len", type=int, default=None, help="default 128 (tiny: 16)")
    p.add_argument("--new-tokens", type=int, default=None, help="decode steps timed (default 32; tiny: 4)")
    p.add_argument("--repeats", type=int, default=None, help="timed repeats, median reported (default 5; tiny: 2)")
    p.add_argument("--out", type=Path, default=None, help=f"output folder (default {gpu.DEFAULT_OUT})")
    p.set_defaults(func=cmd_gpu)


def cmd_gpu(args) -> int:
    device = resolve_device(args.device)
    if not args.tiny and not device.startswith("cuda"):
        raise InvalidInput(
            "the full benchmark builds an 8-billion-parameter model and needs a CUDA GPU (about 40 GB for the dense "
            "and both pruned copies); on this machine run `python -m nirvana bench gpu --tiny`."
        )
    result = gpu.run_gpu_bench(
        tiny=args.tiny,
        device=device,
        batch_size=args.batch_size,
        prompt_len=args.prompt_len,
        new_tokens=args.new_tokens,
        repeats=args.repeats,
        progress=stderr_progress,
    )
    path = gpu.write_result(result, args.out)
    print(json.dumps(result, indent=2))
    print(f"wrote {path}", file=sys.stderr)
    return 0


# ---------------------------------------------------------------- quality


def _add_quality(bench_sub) -> None:
    p = bench_sub.add_parser("quality", help="perplexity and KL of every criterion/allocation/sparsity (CSV, md, PNG)")
    names, floats = parse_name_list, parse_float_list
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--criteria", type=names, default=CRITERIA, help="comma-separated criteria")
    p.add_argument("--sparsities", type=floats, default=SPARSITIES)
    p.add_argument("--uniform-criteria", type=names, default=CRITERIA, help="criteria also run with uniform allocation")
    p.add_argument(
        "--select-criteria", type=names, default=DATA_DRIVEN, help="criteria given KL-guided calibration (data-driven)"
    )
    p.add_argument("--candidates", type=int, default=4, help="K calibration candidates for KL selection")
    p.add_argument("--tokens", type=int, default=16384, help="tokens per perplexity dataset")
    p.add_argument("--samples", type=int, default=32)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--anchor-samples", type=int, default=128)
    p.add_argument("--anchor-seq-len", type=int, default=64)
    p.add_argument("--kl-sequences", type=int, default=None, help="measure KL on the first M anchor sequences only")
    p.add_argument("--gamma", type=float, default=None)
    p.add_argument("--out-dir", type=Path, default=QUALITY_OUT)
    p.add_argument("--report-only", action="store_true", help="rebuild markdown and plots from the CSV")
    p.add_argument("--note", default="", help="a line of context for the report header")
    p.set_defaults(func=cmd_quality)


def quality_config(args) -> QualityConfig:
    anchor = AnchorSpec(samples=args.anchor_samples, seq_len=args.anchor_seq_len)
    return config_from_args(QualityConfig, args, anchor=anchor)


def cmd_quality(args) -> int:
    config = quality_config(args)
    rows = committed_rows(config) if args.report_only else run_quality(config, log)
    md, text = write_report(rows, config)
    print(text)
    log(f"wrote {config.csv_path}, {md} and plots")
    return 0


# ---------------------------------------------------------------- gamma


def _add_gamma(bench_sub) -> None:
    p = bench_sub.add_parser("gamma", help="KL to dense over a gamma grid per criterion and sparsity (JSON, md, PNG)")
    names, floats = parse_name_list, parse_float_list
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--criteria", type=names, default=("nirvana", "taylor"), help="comma-separated criteria")
    p.add_argument("--sparsities", type=floats, default=(0.1, 0.2, 0.3, 0.5))
    p.add_argument("--gammas", type=floats, default=GAMMAS, help="grid (the analytic gamma* is always added)")
    p.add_argument("--samples", type=int, default=32)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--anchor-samples", type=int, default=128)
    p.add_argument("--anchor-seq-len", type=int, default=64)
    p.add_argument("--out-dir", type=Path, default=GAMMA_OUT)
    p.set_defaults(func=cmd_gamma)


def gamma_config(args) -> GammaBenchConfig:
    return config_from_args(GammaBenchConfig, args)


def cmd_gamma(args) -> int:
    config = gamma_config(args)
    data = run_gamma_bench(config, log)
    paths = write_gamma_outputs(data, config.out_dir)
    print(paths[1].read_text())
    log("wrote " + ", ".join(str(p) for p in paths))
    return 0


# ---------------------------------------------------------------- recovery


def _add_recovery(bench_sub) -> None:
    p = bench_sub.add_parser("recovery", help="LoRA recovery of pruned models per criterion: perplexity before/after")
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--steps", type=int, default=16, help="optimizer steps per row (16 x 128 tokens each)")
    p.add_argument("--data", default="calibration", help="training data (see `recover --data`)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--tokens", type=int, default=16384, help="perplexity tokens per dataset")
    p.add_argument(
        "--acc-limit", type=int, default=200, help="examples per zero-shot task for the 7-task average (0: skip it)"
    )
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--out-dir", type=Path, default=RECOVERY_OUT)
    p.add_argument("--report-only", action="store_true", help="rebuild markdown and plot from the CSV")
    p.add_argument("--note", default="")
    p.set_defaults(func=cmd_recovery)


def cmd_recovery(args) -> int:
    if args.steps < 1:
        raise InvalidInput(f"--steps must be a positive integer, got {args.steps}.")
    if args.acc_limit < 0:
        raise InvalidInput(
            f"--acc-limit must be 0 (no accuracy) or a positive number of examples per task, got {args.acc_limit}."
        )
    config = config_from_args(RecoveryBenchConfig, args)
    rows = recovery_rows(config.csv_path) if args.report_only else run_recovery_bench(config, log)
    md = write_recovery_report(rows, config)
    print(md.read_text())
    return 0


# ---------------------------------------------------------------- accuracy


def _add_accuracy(bench_sub) -> None:
    p = bench_sub.add_parser(
        "accuracy", help="zero-shot accuracy, LAMBADA and MBPP of dense and pruned models (CSV, md, PNG)"
    )
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--sparsities", type=parse_float_list, default=ACCURACY_SPARSITIES)
    p.add_argument("--limit", type=int, default=200, help="examples per zero-shot task (the first N)")
    p.add_argument("--lambada-limit", type=int, default=200, help="LAMBADA examples (0: skip)")
    p.add_argument("--mbpp-limit", type=int, default=10, help="MBPP problems (0: skip; needs --allow-code-execution)")
    p.add_argument("--bpb-limit", type=int, default=500, help="MBPP gold bits-per-byte problems (0: skip)")
    p.add_argument("--gsm8k-bpb-limit", type=int, default=500, help="GSM8K gold bits-per-byte problems (0: skip)")
    p.add_argument("--batch-size", type=int, default=8, help="harness batch size")
    p.add_argument("--bpb-batch-size", type=int, default=1, help="harness batch size of the bits-per-byte rows")
    p.add_argument("--allow-code-execution", action="store_true", help="run MBPP's generated code in the sandbox")
    p.add_argument("--out-dir", type=Path, default=ACCURACY_OUT)
    p.add_argument("--report-only", action="store_true", help="rebuild markdown and plot from the CSV")
    p.add_argument("--note", default="", help="a line of context for the report header")
    p.set_defaults(func=cmd_accuracy)


def accuracy_config(args) -> AccuracyConfig:
    for flag in ("limit", "lambada_limit", "mbpp_limit", "bpb_limit", "gsm8k_bpb_limit"):
        value = getattr(args, flag)
        if value != 0 or flag == "limit":
            check_limit(value)
    best = {s: g for s, g in kl_best_gammas(args.model).items() if s in args.sparsities}
    allowed = code_execution_allowed(args.allow_code_execution)
    return config_from_args(AccuracyConfig, args, allow_code_execution=allowed, best_gamma=best)


def cmd_accuracy(args) -> int:
    config = accuracy_config(args)
    rows = accuracy_rows(config.csv_path) if args.report_only else run_accuracy_bench(config, log)
    md, text = write_accuracy_report(rows, config)
    print(text)
    log(f"wrote {config.csv_path} and {md}")
    return 0
