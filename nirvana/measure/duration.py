"""Time planning: about how long a step will take on this machine, said before it starts.

    seconds = tokens x FLOPs per token of the step / (this machine's matmul rate x the step's efficiency)

- FLOPs per token come from the model's shape (`nirvana.measure.flops.flops_breakdown`: the
  projections, attention and lm_head of one forward), weighted per step in `STEPS`: a gradient
  pass is a forward and a backward (about twice the forward) through the decoder, and the
  vocabulary-chunked objective runs the lm_head three times (forward, recomputed in backward,
  and the gradient to the hidden state); a forward-only scorer (FLAP, Wanda) never runs the head.
- The machine's rate is measured once (`matmul_rate`: a fp32 [512 x 1024] @ [1024 x 4096] product,
  best of a few, ~0.2 s) per device, dtype and thread count, and kept in the cache folder.
- The efficiency is the fraction of that rate a real step reaches (memory traffic, small shapes,
  autograd bookkeeping), fitted by `benchmarks/duration/calibrate.py` (each step timed between two
  rate measurements in one single-threaded process, so background load hits both alike) on
  SmolLM2-135M and checked on the other models in `benchmarks/duration/calibration.jsonl`. It is an
  estimate, not a promise: shown as "about N s", never as a measurement.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import dataclass

import torch

from nirvana.measure.flops import flops_breakdown
from nirvana.measure.speed import cpu_name
from nirvana.store.atomic import atomic_write_text
from nirvana.store.paths import cache_dir


@dataclass(frozen=True)
class StepCost:
    """FLOPs per token as multiples of one forward's parts, and the share of the matmul rate it reaches."""

    body: float  # x (projections + attention) of one forward
    head: float  # x the lm_head of one forward
    efficiency: float
    what: str


STEPS: dict[str, StepCost] = {
    # efficiencies: benchmarks/duration/calibration.jsonl (SmolLM2-135M, 32 x 128, one thread)
    "gradient scoring": StepCost(3.0, 3.0, 0.49, "forward + backward; the objective's head three times"),
    "forward scoring": StepCost(1.0, 0.0, 0.52, "one forward through the decoder layers, no head"),
    "evaluation": StepCost(1.0, 1.0, 0.53, "one forward with the head (perplexity, KL, log-likelihoods)"),
}
RATE_SHAPE = (512, 1024, 4096)  # m, k, n of the timed product


def machine_key(device: str, dtype: torch.dtype, threads: int) -> str:
    """What a measured rate is valid for: the CPU (and GPU), cores, torch, device, dtype and threads."""
    gpu = torch.cuda.get_device_name(device) if str(device).startswith("cuda") else ""
    return f"{cpu_name()}|{gpu}|{os.cpu_count()} cores|torch {torch.__version__}|{device}|{dtype}|{threads} threads"


def _rate_path(device: str, dtype: torch.dtype, threads: int):
    key = machine_key(device, dtype, threads)
    return cache_dir() / "machine" / f"matmul-{hashlib.sha256(key.encode()).hexdigest()[:16]}.json"


def matmul_rate(device: str = "cpu", dtype: torch.dtype = torch.float32, refresh: bool = False) -> float:
    """FLOP/s of one [512 x 1024] @ [1024 x 4096] product on `device` (best of 5 after a warm-up), measured
    once per machine, device, dtype and thread count and read from the cache after that."""
    threads = torch.get_num_threads()
    path = _rate_path(str(device), dtype, threads)
    if not refresh:
        try:
            return float(json.loads(path.read_text())["flops_per_s"])
        except (OSError, ValueError, KeyError):
            pass
    m, k, n = RATE_SHAPE
    a = torch.randn(m, k, dtype=dtype, device=device)
    b = torch.randn(k, n, dtype=dtype, device=device)
    best = float("inf")
    for i in range(6):
        if str(device).startswith("cuda"):
            torch.cuda.synchronize(device)
        start = time.perf_counter()
        a @ b
        if str(device).startswith("cuda"):
            torch.cuda.synchronize(device)
        if i:  # the first is a warm-up
            best = min(best, time.perf_counter() - start)
    rate = 2 * m * k * n / max(best, 1e-9)
    record = {"flops_per_s": rate, "device": str(device), "dtype": str(dtype), "threads": threads}
    record["machine"] = machine_key(str(device), dtype, threads)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps(record) + "\n")
    return rate


def step_flops(shape, step: str, tokens: int, seq_len: int) -> float:
    """FLOPs of `step` over `tokens` tokens of sequences of `seq_len` (attention over (T+1)/2 positions)."""
    cost = STEPS[step]
    parts = flops_breakdown(shape, (seq_len + 1) / 2)
    return tokens * (cost.body * (parts["projections"] + parts["attention"]) + cost.head * parts["lm_head"])


def block_share(shape) -> float:
    """The decoder blocks' share of one forward's FLOPs (what a sparsity removes a fraction of), at 512 tokens."""
    parts = flops_breakdown(shape, 256.5)
    return (parts["projections"] + parts["attention"]) / parts["total"]


def estimate_seconds(shape, step: str, tokens: int, seq_len: int, rate: float | None = None) -> float:
    """About how many seconds `step` takes over `tokens` tokens on this machine (`rate`: `matmul_rate()`)."""
    if step not in STEPS:
        raise KeyError(f"unknown step {step!r}; known: {', '.join(STEPS)}")
    rate = rate or matmul_rate()
    return step_flops(shape, step, tokens, seq_len) / (rate * STEPS[step].efficiency)


def about(seconds: float) -> str:
    """'about 40 s', 'about 3 min', 'about 1.5 h': the precision an estimate has."""
    if seconds < 90:
        return f"about {max(1, round(seconds / 5) * 5 if seconds > 10 else round(seconds))} s"
    if seconds < 90 * 60:
        return f"about {round(seconds / 60)} min"
    return f"about {seconds / 3600:.1f} h"


def scoring_step(uses_gradients: bool, needs_data: bool) -> str | None:
    """The `STEPS` row of a scorer (a criterion or a method): None for one that reads no data (magnitude, random)."""
    if uses_gradients:
        return "gradient scoring"
    return "forward scoring" if needs_data else None
