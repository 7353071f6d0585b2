"""Fit `nirvana.guard.duration.STEPS`' efficiencies: each step's measured time beside the matmul rate measured
just before and after it, in one process with one thread (so background load hits both alike).

    .venv/bin/python benchmarks/duration/calibrate.py smollm2-135m [qwen2.5-coder-0.5b ...]

Appends one JSON line per (model, step) to benchmarks/duration/calibration.jsonl: the step's FLOPs (the
cost model's), its seconds, the matmul rate around it, and the efficiency that would have predicted it."""

from __future__ import annotations

import datetime as dt
import json
import os
import sys
import time
from pathlib import Path

import torch

from nirvana.bench.environment import machine_label
from nirvana.checkpoints.loading import load_model
from nirvana.measure.duration import STEPS, matmul_rate, step_flops
from nirvana.measure.perplexity import window_nll
from nirvana.models.shapes import model_shape
from nirvana.pipeline import PruneSettings, calibration_for, score

OUT = Path(__file__).with_name("calibration.jsonl")
N, T = 32, 128


def timed_steps(lm):
    """{step: seconds} of one run of each step on N x T tokens."""
    batch, _ = calibration_for(lm, PruneSettings(sparsity=0.0, samples=N, seq_len=T, use_cache=False))
    out = {}
    for step, method in (("gradient scoring", "nirvana"), ("forward scoring", "flap")):
        settings = PruneSettings(sparsity=0.0, method=method, samples=N, seq_len=T, use_cache=False)
        start = time.perf_counter()
        score(lm, settings, batch=batch)
        out[step] = time.perf_counter() - start
    start = time.perf_counter()
    with torch.no_grad():
        window_nll(lm.model, batch.input_ids)
    out["evaluation"] = time.perf_counter() - start
    return out


def main(models: list[str]) -> None:
    torch.set_num_threads(1)
    for name in models:
        lm = load_model(name, dtype="float32", device="cpu")
        shape = model_shape(lm.model)
        before = matmul_rate(refresh=True)
        seconds = timed_steps(lm)
        after = matmul_rate(refresh=True)
        rate = (before + after) / 2
        for step, s in seconds.items():
            flops = step_flops(shape, step, N * T, T)
            row = {"model": name, "step": step, "tokens": N * T, "seconds": round(s, 2), "flops": flops}
            row |= {"matmul_gflops": round(rate / 1e9, 1), "efficiency": round(flops / s / rate, 3)}
            row |= {"table_efficiency": STEPS[step].efficiency, "load_avg_1min": round(os.getloadavg()[0], 2)}
            row |= {"machine": machine_label(), "finished_utc": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M")}
            print(json.dumps(row))
            with OUT.open("a") as f:
                f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:] or ["smollm2-135m"])
