"""How the cost of scoring grows with the model: time and peak memory per method, beside the memory plan.

    python -m nirvana bench scale-up [--models smollm2-135m,gemma3-270m,qwen2.5-coder-0.5b,qwen2.5-coder-1.5b]
        [--methods nirvana,llm-pruner,flap] [--samples 32] [--seq-len 128]

Each (model, method) row is one fresh process (`python -m nirvana.bench.scale_up --child ...`), so its
peak is its own. The child loads the model (fp32, CPU), draws the calibration batch, and scores with
`pipeline.score` (no score cache; the default micro-batch and checkpointing, chosen from the memory
plan), recording:
- `scoring_s`: the scoring call's wall time;
- `added_gib`: the process's peak RSS during scoring minus its RSS just before: what scoring added above
  the loaded weights, the quantity the memory plan estimates; `peak_rss_gib`: the whole peak. The weights
  are read once first (`fault_in`: a safetensors load maps the file, so untouched weights are not yet
  resident), the C heap's free pages are returned (`trim_heap`) and the peak is reset just before
  scoring (`/proc/self/clear_refs`, VmHWM), so the loading's own transient peak is not counted either.
  (Rows before 2026-12-05 had none of these: their `added` included paging the weights in, which made the
  plan look 35-77% low; they are kept in `scale-up-before-fault-in.jsonl`.)
- `planned_gib`: the plan the memory guard checked (the method's estimate at the micro-batch and
  checkpointing it used), and `plan_error`: planned / added - 1.
Rows are appended to `benchmarks/scale-up/scale-up.jsonl` as they finish; a run skips rows already
there (resumable), and rewrites `scale-up.md`. A model whose packages are not installed is skipped
with the command that installs it.
"""

from __future__ import annotations

import argparse
import datetime as dt
import gc
import json
import os
import resource
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import psutil
import torch

import nirvana.guard.memory as memory
from nirvana.bench.environment import machine_label
from nirvana.checkpoints.loading import load_model
from nirvana.guard.heap import pin_mmap_threshold, trim_heap
from nirvana.guard.heap import setting as heap_setting
from nirvana.guard.memory import estimate_load
from nirvana.models.registry import REGISTRY, installed
from nirvana.pipeline import PruneSettings, calibration_for, score
from nirvana.store.atomic import atomic_write_text
from nirvana.store.paths import benchmarks_dir

DEFAULT_OUT = benchmarks_dir("scale-up")
MODELS = ("smollm2-135m", "gemma3-270m", "qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b")
METHODS = ("nirvana", "llm-pruner", "flap")  # SliceGPT has no scoring step: it rotates while it prunes
GIB = 1024**3


@dataclass
class ScaleUpConfig:
    models: tuple[str, ...] = MODELS
    methods: tuple[str, ...] = METHODS
    samples: int = 32
    seq_len: int = 128
    out: Path = DEFAULT_OUT
    rerun: bool = False  # measure rows already in the output again (appended; the table shows the latest)


def _rss() -> int:
    return psutil.Process().memory_info().rss


def fault_in(model) -> None:
    """Read every weight once. A safetensors load maps the file and copies nothing: a weight's pages become
    resident only when a forward first reads them, so without this the first scoring pass's peak would count
    the weights themselves (for FLAP on Qwen2.5-Coder-0.5B, 1.3 of the 1.95 GiB once recorded as 'added')."""
    with torch.no_grad():
        for p in model.parameters():
            p.sum()


def reset_peak() -> bool:
    """Reset this process's peak RSS (VmHWM) to its current RSS (Linux >= 4.0, `clear_refs` value 5)."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def peak_rss(since_reset: bool) -> int:
    """The peak RSS since `reset_peak` (VmHWM), or since the process started (ru_maxrss) without one."""
    if since_reset:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def measure_one(model: str, method: str, samples: int, seq_len: int) -> dict:
    """In this process: load `model`, score it with `method`, and return the row (see the module doc)."""
    start = time.perf_counter()
    lm = load_model(model, dtype="float32", device="cpu")
    load_s = time.perf_counter() - start
    settings = PruneSettings(sparsity=0.0, method=method, samples=samples, seq_len=seq_len, use_cache=False)
    batch, _ = calibration_for(lm, settings)
    plans = []
    check = memory.check_fits

    def recorded(estimate, *args, **kwargs):  # the plan the guard checks, as it checks it
        plans.append(estimate)
        return check(estimate, *args, **kwargs)

    memory.check_fits = recorded
    fault_in(lm.model)  # the plan counts the weights as resident: make them so before measuring
    gc.collect()
    trim_heap()
    try:
        before = _rss()
        reset = reset_peak()
        start = time.perf_counter()
        scores, _ = score(lm, settings, batch=batch)
        scoring_s = time.perf_counter() - start
    finally:
        memory.check_fits = check
    peak = peak_rss(reset)
    planned = plans[-1].total if plans else None
    added = peak - before
    return {
        "model": model,
        "method": method,
        "samples": samples,
        "seq_len": seq_len,
        "parameters": sum(p.numel() for p in lm.model.parameters()),
        "weights_gib": round(estimate_load(lm.model.config, dtype=torch.float32).total / GIB, 3),
        "load_s": round(load_s, 1),
        "scoring_s": round(scoring_s, 1),
        "micro_batch": scores.meta.get("micro_batch"),
        "activation_checkpointing": scores.meta.get("activation_checkpointing", False),
        "rss_before_gib": round(before / GIB, 3),
        "peak_rss_gib": round(peak / GIB, 3),
        "added_gib": round(added / GIB, 3),
        "planned_gib": round(planned / GIB, 3) if planned is not None else None,
        "plan_error": round(planned / added - 1, 3) if planned and added > 0 else None,
        "plan": {k: round(v / GIB, 3) for k, v in plans[-1].components.items()} if plans else None,
        "threads": torch.get_num_threads(),
        "heap": heap_setting(),
        "peak_since": "reset (VmHWM)" if reset else "process start (ru_maxrss)",
    }


def _done(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()] if path.exists() else []


# Rows before 2026-12-06 ran on glibc's sliding mmap threshold (nirvana/guard/heap.py); they stay in the .jsonl, and
# the table shows the latest row of each (model, method, N x T) with its heap setting.
SLIDING = "glibc default (sliding mmap threshold)"


def _key(row: dict) -> tuple:
    return row["model"], row["method"], row["samples"], row["seq_len"], row.get("heap", SLIDING)


def _heap_cell(heap: str) -> str:
    return "sliding" if heap == SLIDING else heap.removeprefix("glibc mmap threshold ")


def latest(rows: list[dict]) -> list[dict]:
    """The last row of each (model, method, N, T), in the order the first of each came."""
    last = {_key(r)[:4]: r for r in rows}
    order = dict.fromkeys(_key(r)[:4] for r in rows)
    return [last[k] for k in order]


def table(rows: list[dict]) -> str:
    lines = [
        "# Scoring cost against model size (CPU, fp32)",
        "",
        "Written by `python -m nirvana bench scale-up`: one fresh process per row; `added` is the peak RSS during "
        "scoring above the RSS just before it (the weights read once first, so they are resident, and the peak "
        "reset just before scoring), `planned` what the memory guard planned for the same pass "
        "(`nirvana.guard.memory`), error = planned / added - 1. Each row's machine and load are in the .jsonl. "
        "`heap`: how the C heap served large tensors; pinned (the CLI's and the app's setting since 2026-12-06) "
        "keeps freed temporaries from staying resident (`nirvana/guard/heap.py`). The latest row of each model "
        "and method is shown; earlier ones stay in the .jsonl.",
        "",
        "| model | parameters | method | N x T | micro-batch | scoring (s) | added (GiB) | planned (GiB) | error "
        "| peak RSS (GiB) | threads | heap |",
        "|---|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in latest(rows):
        mb = f"{r['micro_batch']}{' + ckpt' if r['activation_checkpointing'] else ''}" if r["micro_batch"] else "-"
        err = f"{100 * r['plan_error']:+.0f}%" if r["plan_error"] is not None else "-"
        planned = f"{r['planned_gib']:.2f}" if r["planned_gib"] is not None else "-"
        lines.append(
            f"| {r['model']} | {r['parameters'] / 1e6:,.0f} M | {r['method']} | {r['samples']} x {r['seq_len']} | {mb} "
            f"| {r['scoring_s']:.1f} | {r['added_gib']:.2f} | {planned} | {err} | {r['peak_rss_gib']:.2f} "
            f"| {r.get('threads', '-')} | {_heap_cell(r.get('heap', SLIDING))} |"
        )
    return "\n".join(lines) + "\n"


def run_scale_up(config: ScaleUpConfig, log=print, runner=subprocess.run) -> list[dict]:
    """Every missing (model, method) row, each in its own process (`runner`, as `subprocess.run`); returns
    all rows of the output."""
    out = Path(config.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "scale-up.jsonl"
    for model in config.models:
        if model in REGISTRY and not installed(model):
            log(f"skipped {model}: not installed ({REGISTRY[model].install_hint})")
            continue
        for method in config.methods:
            key = (model, method, config.samples, config.seq_len, heap_setting())
            if not config.rerun and any(_key(r) == key for r in _done(path)):
                continue
            cmd = [sys.executable, "-m", "nirvana.bench.scale_up", "--child", model, method]
            cmd += [str(config.samples), str(config.seq_len)]
            log(f"{model} / {method} ...")
            done = runner(cmd, capture_output=True, text=True, env={**os.environ})
            if done.returncode != 0:
                log(f"{model} / {method} failed: {done.stderr.strip().splitlines()[-1:]}")
                continue
            row = json.loads(done.stdout.strip().splitlines()[-1])
            row["machine"] = machine_label()
            row["finished_utc"] = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M")
            with path.open("a") as f:
                f.write(json.dumps(row) + "\n")
            log(f"  scoring {row['scoring_s']} s, added {row['added_gib']} GiB, planned {row['planned_gib']} GiB")
    rows = _done(path)
    atomic_write_text(out / "scale-up.md", table(rows))
    return rows


def _child(argv: list[str]) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--child", nargs=4, metavar=("MODEL", "METHOD", "N", "T"), required=True)
    model, method, n, t = p.parse_args(argv).child
    pin_mmap_threshold()  # as the CLI does, so the row measures what a user's `score` adds
    print(json.dumps(measure_one(model, method, int(n), int(t))))
    return 0


if __name__ == "__main__":
    sys.exit(_child(sys.argv[1:]))
