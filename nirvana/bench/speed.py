"""`bench speed`: prune one model at several sparsities and measure what each one gains.

The model is scored once with the nirvana criterion on a calibration batch (default 32 x 128
of WikiText-2 validation), a plan is allocated per sparsity and applied to a copy; then all
models are measured together with `nirvana.measure.speed.measure_speeds` (repeats interleaved, so load
on a shared machine hits every model alike). Output under `benchmarks/speed/`: speed.md (the
table with date, machine, torch version and threads), speed.csv, speed.png and speed.json (raw). Each
speed-up carries the verdict on its rounds (`nirvana.measure.speed_check`): one more than 1.1x its FLOPs
ideal is shown as "disturbed", not as a figure.

On the shared runner (`nirvana.bench.base`) it is one job: the models are timed together, so the
measurement cannot be split into rows that run (or resume) apart.
"""

from __future__ import annotations

import csv
import datetime as dt
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import torch

from nirvana.bench.base import Measured, WholeRun, progress_log
from nirvana.bench.methods import NIRVANA, MethodChoice, method_stem
from nirvana.checkpoints.loading import DEFAULT_MODEL, load_model
from nirvana.errors import InvalidInput
from nirvana.measure.flops import flops_per_token
from nirvana.measure.speed import measure_speeds, speedup_rows
from nirvana.measure.speed_check import OK, RULE, judge
from nirvana.models.shapes import model_shape
from nirvana.scoring.criteria import DEFAULT_CRITERION
from nirvana.store.paths import benchmarks_dir

DEFAULT_OUT = benchmarks_dir("speed")  # the checkout's benchmarks/speed; ./benchmarks/speed when installed
COLUMNS = (
    "method",
    "method_settings",
    "sparsity",
    "achieved_block_sparsity",
    "params",
    "flops_per_token",
    "batch_size",
    "prefill_tokens_per_s",
    "decode_tokens_per_s",
    "latency_ms_per_token",
    "time_to_first_token_s",
    "peak_memory_mib",
    "prefill_speedup",
    "prefill_ideal",
    "prefill_fraction_of_ideal",
    "decode_speedup",
    "decode_ideal",
    "decode_fraction_of_ideal",
    "prefill_speedup_cpu_time",
    "decode_speedup_cpu_time",
)


@dataclass(frozen=True)
class SpeedBenchConfig:
    """The model and how it loads, the sparsities, the timing settings and the calibration batch."""

    model: str = DEFAULT_MODEL
    dtype: str = "auto"
    device: str = "auto"
    device_map: str | None = None
    max_memory: dict | None = None  # accelerate's per-device caps for device_map="auto"
    quantization: str | None = None
    trust_remote_code: bool = False
    sparsities: tuple[float, ...] = (0.0, 0.2, 0.5)
    batch_sizes: tuple[int, ...] = (1, 8, 32)
    prompt_len: int = 128
    new_tokens: int = 32
    repeats: int = 3
    warmup: int = 1
    threads: int | None = None  # torch CPU threads (None: torch's choice)
    calib: str = "wikitext2-valid"
    samples: int = 32
    seq_len: int = 128
    seed: int = 0
    out: Path = DEFAULT_OUT
    method: str = "nirvana"  # the pruned models' method (nirvana.bench.methods); a baseline writes speed-<method>.*
    method_settings: dict | None = None

    def __post_init__(self) -> None:
        MethodChoice.of(self.method, self.method_settings)  # an unknown method or setting: before any loading


@dataclass(frozen=True)
class SpeedJob:
    """Time `model` pruned at each of `sparsities` (0 included: the dense reference), all together."""

    model: str
    sparsities: tuple[float, ...]


class SpeedBench(WholeRun):
    name = "speed"

    def jobs(self, config: SpeedBenchConfig) -> list[SpeedJob]:
        return [SpeedJob(config.model, tuple(float(s) for s in config.sparsities))]

    def worker(self, config: SpeedBenchConfig, log) -> SpeedWorker:
        return SpeedWorker(config, log)


SPEED = SpeedBench()


class SpeedWorker:
    """Loads the model as the config says; `run` prunes and times it."""

    def __init__(self, config: SpeedBenchConfig, log):
        if config.threads is not None:
            if config.threads < 1:
                raise InvalidInput(f"--threads must be a positive integer, got {config.threads}.")
            torch.set_num_threads(config.threads)
        self.config = config
        self.progress = progress_log(log)
        load = ("dtype", "device", "device_map", "max_memory", "quantization", "trust_remote_code")
        self.lm = load_model(config.model, progress=self.progress, **{k: getattr(config, k) for k in load})

    def run(self, job: SpeedJob) -> Measured:
        result = run_speed_bench(self.lm, job.sparsities, self.config, self.progress)
        return Measured(result, f"{job.model}: {len(result['rows'])} rows timed")


def pruned_models(lm, sparsities, settings: SpeedBenchConfig = SpeedBenchConfig(), progress=None):
    """{sparsity: (model, plan or None)}; sparsity 0 is the dense model itself. NIRVANA scores on the
    calibration batch of `settings`, scored once."""
    models = {0.0: (lm.model, None)} if 0 in sparsities else {}
    choice = MethodChoice.of(settings.method, settings.method_settings)
    for s in (s for s in sparsities if s > 0):  # a baseline's refusals come before any scoring
        choice.check(lm.model, s)
    if any(s > 0 for s in sparsities):
        # Scores do not depend on the sparsity: one scoring serves every model.
        c = settings
        calibration = choice.scoring(calib=c.calib, samples=c.samples, seq_len=c.seq_len, seed=c.seed)
        source = choice.source(lm, calibration, progress=progress)  # scores, or SliceGPT's batch
        shape = model_shape(lm.model)
        for s in (s for s in sparsities if s > 0):
            models[s] = tuple(reversed(choice.slice(lm.model, source, s, shape)))  # (model, plan)
    return {s: models[s] for s in sparsities}


def run_speed_bench(lm, sparsities, settings: SpeedBenchConfig = SpeedBenchConfig(), progress=None) -> dict:
    """Measure every sparsity's model; rows are (sparsity, batch size) with speed-ups against sparsity 0."""
    sparsities = sorted({float(s) for s in sparsities})
    if any(not 0 <= s < 1 for s in sparsities):
        raise InvalidInput(f"sparsities must lie in [0, 1), got {sparsities}.")
    if 0.0 not in sparsities:
        sparsities = [0.0, *sparsities]  # speed-ups need the dense reference
    c = settings
    choice = MethodChoice.of(c.method, c.method_settings)
    models = pruned_models(lm, sparsities, settings, progress)
    speeds = measure_speeds(
        {s: m for s, (m, _) in models.items()},
        batch_sizes=c.batch_sizes,
        prompt_len=c.prompt_len,
        new_tokens=c.new_tokens,
        repeats=c.repeats,
        warmup=c.warmup,
        progress=progress,
    )
    rows = []
    for s, (model, plan) in models.items():
        shape = model_shape(model)
        for row in speedup_rows(speeds[0.0], speeds[s], lm.model, model):
            rows.append(
                {
                    **choice.cells(),
                    "sparsity": s,
                    "achieved_block_sparsity": plan.stats["achieved_block_sparsity"] if plan else 0.0,
                    "params": shape.total_params,
                    "flops_per_token": flops_per_token(shape),
                    **row,
                }
            )
    machine = {k: v for k, v in speeds[0.0].items() if k != "results"}
    machine["load_average_1min_after"] = round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None
    return {
        "date_utc": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "model": lm.name,
        "command": "python -m nirvana " + " ".join(sys.argv[1:]) if sys.argv[1:2] == ["bench"] else None,
        "machine": machine,
        "calibration": {
            "source": c.calib,
            "samples": c.samples,
            "seq_len": c.seq_len,
            "seed": c.seed,
            "criterion": DEFAULT_CRITERION if choice.has_allocation_settings else choice.method,
        },
        **choice.cells(),
        "rows": rows,
        "raw": {str(s): v["results"] for s, v in speeds.items()},
    }


def markdown_table(result: dict) -> str:
    m = result["machine"]
    lines = [
        f"# Speed of {result['model']} at several sparsities (measured)",
        "",
        f"- date: {result['date_utc']}",
        f"- command: `{result.get('command') or 'nirvana.bench.speed.run_speed_bench'}`",
        f"- machine: {m['device_name']}, {m['platform']}",
        f"- torch {m['torch_version']}, torch threads = {m['threads']}, {m['dtype']}, Python {m['python']}",
        f"- load average (1 min) before / after: {m.get('load_average_1min')} / {m.get('load_average_1min_after')}",
        f"- prompt {m['prompt_len']} tokens, {m['new_tokens']} new tokens, {m['warmup']} warm-up, "
        f"median of {m['repeats']} repeats, all models interleaved",
        f"- peak memory: {m['memory_method']}",
        f"- pruning: {result.get('method', 'nirvana')} {result.get('method_settings', '')} scores on "
        f"{result['calibration']['source']} "
        f"{result['calibration']['samples']}x{result['calibration']['seq_len']}, seed {result['calibration']['seed']}",
        "- ideal = dense FLOPs / pruned FLOPs of the phase (nirvana.measure.flops.phase_flops); "
        "speed-up = pruned / dense tok/s (wall clock); CPU-time speed-up = the same from process CPU seconds "
        "(robust to other processes on a shared CPU when threads = 1)",
        f"- verdict per phase (`nirvana.measure.speed_check`): {RULE}; a speed-up that is not a result is shown as "
        "its verdict, not as a figure",
        "",
        "| sparsity | params (M) | batch | prefill tok/s | decode tok/s | ms/step | peak MiB "
        "| prefill x (ideal) | decode x (ideal) | prefill x CPU-time | decode x CPU-time |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in result["rows"]:
        lines.append(
            f"| {r['sparsity']:.0%} | {r['params'] / 1e6:.1f} | {r['batch_size']} | {r['prefill_tokens_per_s']:.0f} "
            f"| {r['decode_tokens_per_s']:.1f} | {r['latency_ms_per_token']:.1f} | {r['peak_memory_mib']:.0f} "
            f"| {_speedup_cell(r, 'prefill')} | {_speedup_cell(r, 'decode')} "
            f"| {r['prefill_speedup_cpu_time']:.2f} | {r['decode_speedup_cpu_time']:.2f} |"
        )
    return "\n".join(lines) + "\n"


def _speedup_cell(row: dict, phase: str) -> str:
    """`1.15 (1.18)`: the measured speed-up (ratio of the medians) and the ideal; `**disturbed** (1.18)` or
    `**noisy** (1.18)` when the verdict on the rounds says it is not a result. A row written before the verdicts
    existed is judged on its one figure."""
    ideal = row[f"{phase}_ideal"]
    verdict = row.get(f"{phase}_verdict") or judge([row[f"{phase}_speedup"]], ideal).verdict
    shown = f"{row[f'{phase}_speedup']:.2f}" if verdict == OK else f"**{verdict}**"
    return f"{shown} ({ideal:.2f})"


def plot(result: dict, path: Path) -> Path:
    # here, not at the top: matplotlib only draws benchmark plots (Agg is chosen before pyplot)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = result["rows"]
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, phase in zip(axes, ("prefill", "decode")):
        for b in sorted({r["batch_size"] for r in rows}):
            pts = sorted((r for r in rows if r["batch_size"] == b), key=lambda r: r["sparsity"])
            xs = [r["sparsity"] * 100 for r in pts]
            (line,) = ax.plot(xs, [r[f"{phase}_tokens_per_s"] for r in pts], "o-", label=f"batch {b} measured")
            dense = pts[0][f"{phase}_tokens_per_s"]
            ideal = [dense * r[f"{phase}_ideal"] for r in pts]
            ax.plot(xs, ideal, "--", color=line.get_color(), alpha=0.6, label=f"batch {b} ideal (FLOPs)")
        ax.set_title(f"{phase} (torch threads = {result['machine']['threads']})")
        ax.set_xlabel("target sparsity (%)")
        ax.set_ylabel("tokens / s")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(f"{result['model']} on {result['machine']['device_name']}, {result['date_utc']}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def committed_speed(directory: Path | None = None) -> dict | None:
    """The committed speed benchmark (`speed.json`: metadata and one row per sparsity x batch), or None."""
    path = Path(directory or DEFAULT_OUT) / "speed.json"
    return json.loads(path.read_text()) if path.exists() else None


def write_outputs(result: dict, out_dir: Path) -> list[Path]:
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = method_stem("speed", result.get("method", NIRVANA.method))
    md = out_dir / f"{stem}.md"
    md.write_text(markdown_table(result))
    csv_path = out_dir / f"{stem}.csv"
    with open(csv_path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS, extrasaction="ignore")
        writer.writeheader()
        for r in result["rows"]:
            writer.writerow({k: (round(v, 4) if isinstance(v, float) else v) for k, v in r.items()})
    raw = out_dir / f"{stem}.json"
    raw.write_text(json.dumps(result, indent=2, default=str))
    return [md, csv_path, raw, plot(result, out_dir / f"{stem}.png")]
