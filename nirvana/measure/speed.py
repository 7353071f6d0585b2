"""Measured speed and memory of prefill and decode, never estimated.

For each batch size B, random prompts of T tokens (seeded) are run after `warmup` untimed runs,
`repeats` times, and the median is reported:

- prefill: one forward over the [B, T] prompt that builds the KV cache and returns the last
  position's logits (what `generate` does first). prefill_tokens_per_s = B * T / seconds.
- decode: `generate` with min_new_tokens = max_new_tokens = N (EOS cannot stop it early), greedy,
  KV cache on. A streamer timestamps every step; decode time runs from the first new token to the
  last, so it holds N - 1 steps and no prefill. decode_tokens_per_s = B * (N - 1) / seconds;
  latency_ms_per_token = seconds / (N - 1) * 1000 (one step gives every sequence one token).
- peak memory: `peak_memory_bytes` = the model's own weights (parameters + buffers) + the peak
  growth during prefill + generate (`peak_extra_bytes`: activations, KV cache, logits). The
  growth is measured, not estimated: on CUDA `torch.cuda.max_memory_allocated` after a reset
  minus what was allocated before; on CPU the process's peak resident set (VmHWM, reset through
  /proc/self/clear_refs after `malloc_trim` returns freed heap) minus the RSS before. Counting
  the weights per model (not the process total) keeps dense vs pruned comparable when one
  process holds both; the raw process figure is kept as `process_peak_bytes`.

Every result carries the device name, torch version, thread count and the load average, since
on a shared CPU the other processes change the figures.
"""

from __future__ import annotations

import contextlib
import os
import platform
import statistics
import threading
import time
from dataclasses import asdict, dataclass, field

import psutil
import torch

from nirvana.errors import InvalidInput, OutOfMemory
from nirvana.guard.heap import trim_heap
from nirvana.measure.flops import phase_flops
from nirvana.measure.speed_check import phase_check, row_verdict, worst
from nirvana.models.weights import input_device
from nirvana.progress import Progress

DEFAULT_BATCH_SIZES = (1, 8, 32)


@dataclass
class SpeedPoint:
    """Median speed and peak memory at one batch size."""

    batch_size: int
    prompt_len: int
    new_tokens: int
    prefill_seconds: float
    prefill_tokens_per_s: float
    decode_seconds: float  # N - 1 decode steps
    decode_tokens_per_s: float
    latency_ms_per_token: float  # one decode step
    time_to_first_token_s: float  # inside generate: prefill + first token
    # Process CPU time (all threads) of the same runs. On a shared CPU, wall time includes time the
    # process waited for a core; with one thread, CPU time is the work itself and its ratios are stable.
    prefill_cpu_seconds: float
    decode_cpu_seconds: float
    prefill_tokens_per_cpu_s: float
    decode_tokens_per_cpu_s: float
    peak_memory_bytes: int  # weights_bytes + peak_extra_bytes: what this model needs
    peak_extra_bytes: int  # peak growth during the run: activations, KV cache, logits
    weights_bytes: int  # parameters and buffers of this model
    process_peak_bytes: int  # raw process figure (CPU: peak RSS; CUDA: max_memory_allocated), all models held
    prefill_runs: list[float] = field(default_factory=list)
    decode_runs: list[float] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)


def cpu_name() -> str:
    """CPU model from /proc/cpuinfo, else what `platform` knows."""
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as f:
        for line in f:
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine() or "unknown CPU"


def device_info(device: torch.device | str) -> dict:
    """Where a figure was measured: device, its name, torch version, threads, load average."""
    device = torch.device(device)
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
    else:
        name = f"{cpu_name()} ({os.cpu_count()} logical cores)"
    info = {
        "device": str(device),
        "device_name": name,
        "torch_version": torch.__version__,
        "threads": torch.get_num_threads(),
        "python": platform.python_version(),
        "platform": platform.platform(),
    }
    if hasattr(os, "getloadavg"):
        info["load_average_1min"] = round(os.getloadavg()[0], 2)
    return info


def _proc_status(key: str) -> int | None:
    with contextlib.suppress(OSError), open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    return None


class PeakMemory:
    """Context manager: peak memory during the block, as `peak` (absolute) and `extra` (growth)."""

    def __init__(self, device: torch.device):
        self.device, self.peak, self.extra = device, 0, 0
        self._sampler: threading.Thread | None = None

    def __enter__(self):
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
            self._base = torch.cuda.memory_allocated(self.device)
            return self
        trim_heap()  # give freed heap back so growth shows in RSS
        self._clear_refs = False
        with contextlib.suppress(OSError), open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # resets VmHWM (the peak RSS) to the current RSS
            self._clear_refs = True
        self._base = self._rss()
        if not self._clear_refs:  # other systems: sample RSS in a thread every 2 ms
            self._stop = threading.Event()
            self._sampled = self._base
            self._sampler = threading.Thread(target=self._sample, daemon=True)
            self._sampler.start()
        return self

    def _rss(self) -> int:

        return psutil.Process().memory_info().rss

    def _sample(self) -> None:
        while not self._stop.wait(0.002):
            self._sampled = max(self._sampled, self._rss())

    def __exit__(self, *exc):
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            self.peak = torch.cuda.max_memory_allocated(self.device)
        elif self._sampler is not None:
            self._stop.set()
            self._sampler.join()
            self.peak = max(self._sampled, self._rss())
        else:
            self.peak = _proc_status("VmHWM") or self._rss()
        self.extra = max(0, self.peak - self._base)
        return False


def memory_method(device: torch.device) -> str:
    if device.type == "cuda":
        growth = "torch.cuda.max_memory_allocated after reset_peak_memory_stats, minus memory_allocated before"
    elif os.path.exists("/proc/self/clear_refs"):
        growth = "peak process RSS (VmHWM after malloc_trim and clear_refs), minus RSS before"
    else:
        growth = "peak process RSS sampled every 2 ms with psutil, minus RSS before"
    return f"peak_memory_bytes = weights of this model + peak growth during prefill+generate ({growth})"


class _StepClock:
    """A generate() streamer that records when each step's tokens arrive (the first put is the prompt)."""

    def __init__(self, device: torch.device):
        self.device, self.times, self.cpu_times = device, [], []

    def put(self, value) -> None:
        # generate moves tokens to CPU first: already synchronised.
        self.times.append(time.perf_counter())
        self.cpu_times.append(time.process_time())

    def end(self) -> None:
        pass


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def random_prompts(vocab_size: int, batch_size: int, prompt_len: int, seed: int = 0) -> torch.Tensor:
    """Seeded random token ids `[B, T]`, avoiding the lowest 16 ids where special tokens usually live."""
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(min(16, vocab_size - 1), vocab_size, (batch_size, prompt_len), generator=gen)


@torch.no_grad()
def _prefill(model, ids: torch.Tensor) -> None:
    model(input_ids=ids, use_cache=True, logits_to_keep=1)


@torch.no_grad()
def _generate(model, ids: torch.Tensor, new_tokens: int, pad_token_id: int) -> _StepClock:
    clock = _StepClock(ids.device)
    model.generate(
        input_ids=ids,
        attention_mask=torch.ones_like(ids),
        max_new_tokens=new_tokens,
        min_new_tokens=new_tokens,
        do_sample=False,
        use_cache=True,
        pad_token_id=pad_token_id,
        streamer=clock,
    )
    return clock


def _run_once(model, ids: torch.Tensor, new_tokens: int, pad: int) -> dict:
    """One timed prefill and one timed generate on `ids: [B, T]`, with the peak memory of both."""
    device = ids.device
    with PeakMemory(device) as mem:
        _sync(device)
        start, cpu_start = time.perf_counter(), time.process_time()
        _prefill(model, ids)
        _sync(device)
        prefill, prefill_cpu = time.perf_counter() - start, time.process_time() - cpu_start
        start = time.perf_counter()
        clock = _generate(model, ids, new_tokens, pad)
    steps, cpu = clock.times[1:], clock.cpu_times[1:]  # times[0] is the prompt
    if len(steps) != new_tokens:
        raise RuntimeError(f"generate produced {len(steps)} steps instead of {new_tokens}")
    return {
        "prefill": prefill,
        "prefill_cpu": prefill_cpu,
        "ttft": steps[0] - start,
        "decode": steps[-1] - steps[0],
        "decode_cpu": cpu[-1] - cpu[0],
        "mem": mem,
    }


def weights_bytes(model) -> int:
    """Bytes of the model's parameters and buffers (tied weights counted once)."""
    seen, total = set(), 0
    for t in [*model.parameters(), *model.buffers()]:
        if id(t) not in seen:
            seen.add(id(t))
            total += t.numel() * t.element_size()
    return total


def _point(runs: list[dict], batch_size: int, prompt_len: int, new_tokens: int, weights: int) -> SpeedPoint:
    prefill = statistics.median(r["prefill"] for r in runs)
    decode = statistics.median(r["decode"] for r in runs)
    prefill_cpu = statistics.median(r["prefill_cpu"] for r in runs)
    decode_cpu = statistics.median(r["decode_cpu"] for r in runs)
    steps = new_tokens - 1
    return SpeedPoint(
        batch_size=batch_size,
        prompt_len=prompt_len,
        new_tokens=new_tokens,
        prefill_seconds=prefill,
        prefill_tokens_per_s=batch_size * prompt_len / prefill,
        decode_seconds=decode,
        decode_tokens_per_s=batch_size * steps / decode,
        latency_ms_per_token=decode / steps * 1000,
        time_to_first_token_s=statistics.median(r["ttft"] for r in runs),
        prefill_cpu_seconds=prefill_cpu,
        decode_cpu_seconds=decode_cpu,
        prefill_tokens_per_cpu_s=batch_size * prompt_len / max(prefill_cpu, 1e-9),
        decode_tokens_per_cpu_s=batch_size * steps / max(decode_cpu, 1e-9),
        peak_memory_bytes=weights + int(max(r["mem"].extra for r in runs)),
        peak_extra_bytes=int(max(r["mem"].extra for r in runs)),
        weights_bytes=weights,
        process_peak_bytes=int(max(r["mem"].peak for r in runs)),
        prefill_runs=[round(r["prefill"], 5) for r in runs],
        decode_runs=[round(r["decode"], 5) for r in runs],
    )


def _pad_id(model) -> int:
    pad = getattr(model.generation_config, "pad_token_id", None)
    return pad if isinstance(pad, int) else 0


def measure_speeds(
    models: dict,
    *,
    batch_sizes=DEFAULT_BATCH_SIZES,
    prompt_len: int = 128,
    new_tokens: int = 32,
    repeats: int = 3,
    warmup: int = 1,
    seed: int = 0,
    progress: Progress = None,
) -> dict[str, dict]:
    """Speed of several models (e.g. dense and pruned) with their repeats interleaved.

    Each repeat runs every model once in turn, so a change in the machine's load (a shared CPU)
    hits all of them alike and their ratio stays meaningful. All get the same prompts.
    Returns {name: result} where result is what `measure_speed` returns for one model.
    """
    batch_sizes = check_speed_settings(models, batch_sizes, prompt_len, new_tokens, repeats, warmup, min_new_tokens=2)
    out = {name: speed_header(m, prompt_len, new_tokens, repeats, warmup) for name, m in models.items()}
    run = lambda m, ids: _run_once(m, ids, new_tokens, _pad_id(m))
    for b, runs in interleaved_runs(models, batch_sizes, prompt_len, new_tokens, repeats, warmup, seed, run, progress):
        for name in models:
            point = _point(runs[name], b, prompt_len, new_tokens, weights_bytes(models[name]))
            out[name]["results"].append(point.to_dict())
    return out


def check_speed_settings(models: dict, batch_sizes, prompt_len, new_tokens, repeats, warmup,
                         min_new_tokens: int = 1) -> list[int]:  # fmt: skip
    """The batch sizes as a list, after checking every setting of a speed measurement (InvalidInput says which)."""
    if not models:
        raise InvalidInput("no model to measure; pass {name: model}.")
    batch_sizes = [int(b) for b in batch_sizes]
    if not batch_sizes or any(b < 1 for b in batch_sizes):
        raise InvalidInput(f"batch sizes must be positive integers, got {batch_sizes!r}.")
    checks = (("prompt_len", prompt_len, 1), ("new_tokens", new_tokens, min_new_tokens), ("repeats", repeats, 1),
              ("warmup", warmup, 0))  # fmt: skip
    for label, value, lo in checks:
        if not isinstance(value, int) or isinstance(value, bool) or value < lo:
            raise InvalidInput(f"{label} must be an integer >= {lo}, got {value!r}.")
    return batch_sizes


def speed_header(model, prompt_len: int, new_tokens: int, repeats: int, warmup: int) -> dict:
    """Where and how one model's speed is measured (device and load average before the run, settings)."""
    device = input_device(model)
    return {
        **device_info(device),
        "dtype": str(next(model.parameters()).dtype).replace("torch.", ""),
        "prompt_len": prompt_len,
        "new_tokens": new_tokens,
        "repeats": repeats,
        "warmup": warmup,
        "statistic": "median",
        "memory_method": memory_method(device),
        "results": [],
    }


def interleaved_runs(models: dict, batch_sizes, prompt_len: int, new_tokens: int, repeats: int, warmup: int,
                     seed: int, run_once, progress: Progress = None):  # fmt: skip
    """Yield (batch size, {name: [timed runs]}): every repeat runs each model once in turn on the same random
    prompts (`run_once(model, ids)`), the first `warmup` untimed. Models are in eval mode while it runs and
    back in their own mode after, also when a run fails; an out-of-memory says which batch did not fit."""
    vocab = min(m.get_input_embeddings().weight.shape[0] for m in models.values())
    states = {name: m.training for name, m in models.items()}
    total, done = len(batch_sizes) * (warmup + repeats) * len(models), 0
    try:
        for m in models.values():
            m.eval()
        for b in batch_sizes:
            runs: dict[str, list] = {name: [] for name in models}
            ids_cpu = random_prompts(vocab, b, prompt_len, seed)
            for i in range(warmup + repeats):
                for name, m in models.items():
                    try:
                        run = run_once(m, ids_cpu.to(input_device(m)))
                    except torch.OutOfMemoryError as exc:
                        raise OutOfMemory(
                            f"batch size {b} with {prompt_len} + {new_tokens} tokens did not fit for {name}; "
                            "use smaller batch sizes."
                        ) from exc
                    if i >= warmup:
                        runs[name].append(run)
                    done += 1
                    if progress:
                        progress(done / total, f"speed: {name}, batch {b}, run {i + 1}/{warmup + repeats}")
            yield b, runs
    finally:
        for name, m in models.items():
            m.train(states[name])


def measure_speed(model, **kwargs) -> dict:
    """Prefill and decode speed and peak memory at each batch size, with where it was measured.

    Takes the keyword arguments of `measure_speeds`. Example:
        >>> s = measure_speed(lm.model, batch_sizes=(1, 8))
        >>> s["device_name"], s["results"][0]["prefill_tokens_per_s"]
    """
    return measure_speeds({"model": model}, **kwargs)["model"]


def compare_speeds(dense, pruned, *, dense_shape=None, pruned_shape=None, **kwargs) -> dict:
    """Dense and pruned timed interleaved, with each phase's speed-up judged against its FLOPs ideal.

    Round i times dense, then pruned, on the same prompts (`measure_speeds`, its keyword arguments;
    `repeats` = the rounds, 5 or more give a useful spread), so a change in the machine's load hits
    both of a round alike. Returns {"dense": result, "pruned": result, "rows": `speedup_rows`,
    "verdict": the worst row's}: per batch size and phase the median speeds of each, the median and
    interquartile range of the per-round ratios, the ideal and the verdict ("ok", "noisy" or
    "disturbed": `nirvana.measure.speed_check`). The shapes default to the models' own module widths.

        >>> c = compare_speeds(lm.model, pruned_model, batch_sizes=(1,), repeats=5)
        >>> c["rows"][0]["decode_ratio"], c["rows"][0]["decode_ideal"], c["rows"][0]["decode_verdict"]
    """
    speeds = measure_speeds({"dense": dense, "pruned": pruned}, **kwargs)
    rows = speedup_rows(speeds["dense"], speeds["pruned"], dense_shape or dense, pruned_shape or pruned)
    return {
        "dense": speeds["dense"],
        "pruned": speeds["pruned"],
        "rows": rows,
        "verdict": worst(r["verdict"] for r in rows),
    }


def speedup_rows(dense: dict, pruned: dict, dense_shape, pruned_shape) -> list[dict]:
    """One row per batch size: the pruned model's measured speed over the dense one's, beside the FLOPs ideal.

    `dense` and `pruned` are `measure_speed(s)` results taken with the same settings (ideally
    interleaved); the shapes are the two models themselves or their `ModelShape`s. Ideal = dense
    FLOPs / pruned FLOPs of the phase (`phase_flops`); the CPU-time
    speed-ups divide process CPU seconds instead of wall time (robust to other processes on a
    shared CPU when threads = 1). `{phase}_speedup` is the ratio of the two medians; `{phase}_ratio`
    the median of the per-round ratios, with its quartiles and the verdict on it
    (`nirvana.measure.speed_check.phase_check`); `verdict` and `message` are the worst phase's.
    """
    rows = []
    for d, p in zip(dense["results"], pruned["results"]):
        flops_d = phase_flops(dense_shape, d["prompt_len"], d["new_tokens"])
        flops_p = phase_flops(pruned_shape, d["prompt_len"], d["new_tokens"])
        row = {"batch_size": d["batch_size"]}
        for phase in ("prefill", "decode"):
            speedup = p[f"{phase}_tokens_per_s"] / d[f"{phase}_tokens_per_s"]
            ideal = flops_d[phase] / flops_p[phase]
            row |= {
                f"{phase}_tokens_per_s_dense": d[f"{phase}_tokens_per_s"],
                f"{phase}_tokens_per_s": p[f"{phase}_tokens_per_s"],
                f"{phase}_speedup": speedup,
                f"{phase}_ideal": ideal,
                f"{phase}_fraction_of_ideal": speedup / ideal,
                f"{phase}_speedup_cpu_time": p[f"{phase}_tokens_per_cpu_s"] / d[f"{phase}_tokens_per_cpu_s"],
                **phase_check(d, p, phase, ideal),
            }
        row |= row_verdict(row, ("prefill", "decode"))
        row |= {
            "latency_ms_per_token": p["latency_ms_per_token"],
            "time_to_first_token_s": p["time_to_first_token_s"],
            "peak_memory_mib_dense": d["peak_memory_bytes"] / 2**20,
            "peak_memory_mib": p["peak_memory_bytes"] / 2**20,
        }
        rows.append(row)
    return rows
