"""GPU throughput benchmark: Llama-3.1-8B architecture, dense vs NIRVANA-pruned at 20% and 50%.

    python -m nirvana bench gpu            # one GPU, random bf16 weights, no download (< 8 min on an H200)
    python -m nirvana bench gpu --tiny     # the same pipeline on a tiny config, on CPU, in seconds

The model is built from the Llama-3.1-8B config written below (speed and memory do not depend
on weight values), scored with the seeded `random` criterion, and pruned with the real
allocation (global ranking, default gamma, align 8) and physical slicing. Speed comes from
`nirvana.measure.speed.measure_speeds` (dense and pruned runs interleaved, median of repeats):

- prefill throughput: B x T prompt tokens per second of one forward at batch B = 32; this is
  the quantity of the paper's table (about 12 ktokens/s dense on one A100: an 8B model cannot
  decode that many tokens/s at batch 32, but it does prefill about that many).
- decode throughput and per-step latency of greedy `generate` with a KV cache, and the prefill
  latency of the whole batch.
- peak memory of a model = its weights + the peak growth of allocated memory during its runs
  (`torch.cuda.max_memory_allocated` on GPU, peak RSS on CPU). Other models resident at the
  same time are excluded, so the figures compare with the paper's memory row.

The paper's figures come from `nirvana.reference` (nirvana/assets/paper_reference.json, their one
source) and are copied into the JSON as `paper_reference`. The JSON is printed and written to
benchmarks/gpu/<name>.json. On the shared runner (`nirvana.bench.base`) it is one job: dense and
pruned models are timed together.
"""

from __future__ import annotations

import datetime as dt
import json
import time
from dataclasses import dataclass, replace
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, LlamaConfig

from nirvana.bench.base import Measured, WholeRun, progress_log
from nirvana.bench.methods import NIRVANA, MethodChoice, method_stem
from nirvana.checkpoints.options import resolve_device
from nirvana.data.calibration import CalibrationBatch
from nirvana.guard.memory import oom_guard
from nirvana.measure.flops import phase_flops
from nirvana.measure.speed import device_info, measure_speeds
from nirvana.measure.speed_check import judge, round_ratios
from nirvana.methods.run import method_scores
from nirvana.models.shapes import count_block_parameters, count_parameters
from nirvana.models.weights import input_device
from nirvana.progress import sub_progress
from nirvana.reference import paper_reference
from nirvana.scoring.criteria import compute_scores
from nirvana.store.paths import benchmarks_dir

DEFAULT_OUT = benchmarks_dir("gpu")  # the checkout's benchmarks/gpu; ./benchmarks/gpu when installed
SPARSITIES = (0.2, 0.5)


CALIBRATION = (8, 64)  # a baseline's random-id calibration batch [N, T]


@dataclass(frozen=True)
class GpuBenchConfig:
    """Which architecture (the 8B, or `tiny` on CPU), where, and the timing settings (None: the
    architecture's default, see `run_gpu_bench`)."""

    tiny: bool = False
    device: str = "auto"
    batch_size: int = 32
    prompt_len: int | None = None
    new_tokens: int | None = None
    repeats: int | None = None
    sparsities: tuple[float, ...] = SPARSITIES
    out: Path | None = None  # None: DEFAULT_OUT
    # The pruned models' method (nirvana.bench.methods): NIRVANA's allocation of seeded random scores,
    # or a baseline scored on random token ids (random weights: only the shape its allocation gives matters).
    method: str = "nirvana"
    method_settings: dict | None = None

    def __post_init__(self) -> None:
        MethodChoice.of(self.method, self.method_settings)  # an unknown method or setting: before any building


@dataclass(frozen=True)
class GpuJob:
    """Time the `architecture` ("tiny" or "llama-3.1-8b") dense and pruned at each of `sparsities`."""

    architecture: str
    sparsities: tuple[float, ...]


class GpuBench(WholeRun):
    name = "gpu"

    def jobs(self, config: GpuBenchConfig) -> list[GpuJob]:
        return [GpuJob("tiny" if config.tiny else "llama-3.1-8b", tuple(config.sparsities))]

    def worker(self, config: GpuBenchConfig, log) -> GpuWorker:
        return GpuWorker(config, log)


GPU = GpuBench()


class GpuWorker:
    def __init__(self, config: GpuBenchConfig, log):
        self.config = config
        self.progress = progress_log(log)

    def run(self, job: GpuJob) -> Measured:
        config = replace(self.config, tiny=job.architecture == "tiny", sparsities=job.sparsities)
        result = run_gpu_bench(config, self.progress)
        return Measured(result, f"{result['architecture']}: {len(result['results'])} models timed")


def paper_a100() -> dict:
    """The paper's speed and memory rows (nirvana/assets/paper_reference.json) in this benchmark's JSON fields."""
    ref = paper_reference()
    rows = {row["metric"]: row for row in ref["speed"]}
    speed, mem = rows["throughput"], rows["memory"]
    pct = round(speed["sparsity"] * 100)
    return {
        "source": f"NIRVANA paper, {ref['model']}, {pct}% sparsity, batch {speed['batch_size']}, {ref['hardware']}",
        "dense_ktokens_per_s": speed["dense"],
        f"pruned{pct}_ktokens_per_s": speed["pruned"],
        "dense_memory_gb": mem["dense"],
        f"pruned{pct}_memory_gb": mem["pruned"],
    }


# Llama-3.1-8B (meta-llama/Llama-3.1-8B config.json), written out so no download is needed.
LLAMA_31_8B = dict(
    hidden_size=4096,
    intermediate_size=14336,
    num_hidden_layers=32,
    num_attention_heads=32,
    num_key_value_heads=8,
    head_dim=128,
    vocab_size=128256,
    max_position_embeddings=131072,
    rms_norm_eps=1e-5,
    rope_parameters={
        "rope_type": "llama3",
        "rope_theta": 500000.0,
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
    },
    tie_word_embeddings=False,
    bos_token_id=128000,
    eos_token_id=128001,
)

# Same family and GQA ratio (g = 4), I/D = 3.5 like the 8B, small enough for a CPU test.
TINY = dict(
    LLAMA_31_8B,
    hidden_size=64,
    intermediate_size=224,
    num_hidden_layers=2,
    num_attention_heads=8,
    num_key_value_heads=2,
    head_dim=8,
    vocab_size=512,
    max_position_embeddings=256,
    bos_token_id=1,
    eos_token_id=2,
)


def build_model(config_values: dict, dtype: torch.dtype, device: str, seed: int = 0):
    """A Llama with random weights, built directly on `device` (no CPU copy of 16 GB first)."""

    config = LlamaConfig(**config_values)
    config._attn_implementation = "sdpa"
    torch.manual_seed(seed)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    return model.eval()


def weight_bytes(model) -> int:
    seen, total = set(), 0
    for p in model.parameters():
        if id(p) not in seen:
            seen.add(id(p))
            total += p.numel() * p.element_size()
    return total


def prune(model, sparsity: float, align: int = 8, seed: int = 0, method: MethodChoice = NIRVANA):
    """Random scores -> real allocation (global, default gamma, `align`) -> physically sliced copy.

    A baseline `method` scores `CALIBRATION` random token ids (seeded) and slices with its own
    allocation and compensation (FLAP's biases): the pruned shape is that method's.
    """
    method.check(model, sparsity)
    if method.has_allocation_settings:  # NIRVANA's data-free ablation: seeded random scores, no calibration text
        scores = compute_scores(model, "random", seed=seed, use_cache=False)
        plan, pruned = method.slice(model, scores, sparsity, align=align)
        return pruned, plan
    vocab = model.get_input_embeddings().num_embeddings
    ids = torch.randint(0, vocab, CALIBRATION, generator=torch.Generator().manual_seed(seed))
    batch = CalibrationBatch(ids, "random-ids", seed)
    source = batch if method.on_data else method_scores(model, method.method, method.config, batch, use_cache=False)
    plan, pruned = method.slice(model, source, sparsity)
    return pruned, plan


def _summary(name: str, model, speed: dict, plan=None) -> dict:

    point = speed["results"][0]
    weights = weight_bytes(model)
    row = {
        "variant": name,
        "target_sparsity": plan.settings.sparsity if plan is not None else 0.0,
        "params": count_parameters(model),
        "block_params": count_block_parameters(model),
        "batch_size": point["batch_size"],
        "prompt_len": point["prompt_len"],
        "new_tokens": point["new_tokens"],
        "prefill_tokens_per_s": round(point["prefill_tokens_per_s"], 1),
        "prefill_ktokens_per_s": round(point["prefill_tokens_per_s"] / 1000, 3),
        "prefill_latency_ms": round(point["prefill_seconds"] * 1000, 2),
        "decode_tokens_per_s": round(point["decode_tokens_per_s"], 1),
        "decode_latency_ms_per_step": round(point["latency_ms_per_token"], 3),
        "weights_bytes": weights,
        "peak_memory_bytes": weights + point["peak_extra_bytes"],
        "weights_gb": round(weights / 1e9, 3),
        "peak_extra_gb": round(point["peak_extra_bytes"] / 1e9, 3),
        "peak_memory_gb": round((weights + point["peak_extra_bytes"]) / 1e9, 3),
        "prefill_runs_s": point["prefill_runs"],
    }
    if plan is not None:
        row["achieved_block_sparsity"] = plan.stats.get("achieved_block_sparsity")
        row["gamma"] = plan.settings.gamma
        row["align"] = plan.settings.align
    return row


def run_gpu_bench(config: GpuBenchConfig = GpuBenchConfig(), progress=None) -> dict:
    """Build, prune and time dense vs pruned; return the JSON-ready result (see module docstring)."""

    device = resolve_device(config.device)
    choice = MethodChoice.of(config.method, config.method_settings)
    prompt_len, new_tokens, repeats = config.prompt_len, config.new_tokens, config.repeats
    if config.tiny:
        dtype = torch.float32 if not device.startswith("cuda") else torch.bfloat16
        values, prompt_len, new_tokens, repeats = TINY, prompt_len or 16, new_tokens or 4, repeats or 2
    else:
        dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
        values, prompt_len, new_tokens, repeats = LLAMA_31_8B, prompt_len or 128, new_tokens or 32, repeats or 5
    start = time.perf_counter()
    say = progress or (lambda f, m: None)
    with oom_guard("bench gpu", device):
        say(0.0, "building the model with random weights")
        dense = build_model(values, dtype, device)
        models, plans = {"dense": dense}, {}
        for s in config.sparsities:
            say(0.1, f"pruning at {s:.0%}")
            name = f"pruned-{round(s * 100)}"
            models[name], plans[name] = prune(dense, s, method=choice)
        build_seconds = time.perf_counter() - start
        speeds = measure_speeds(
            models,
            batch_sizes=(config.batch_size,),
            prompt_len=prompt_len,
            new_tokens=new_tokens,
            repeats=repeats,
            warmup=1,
            progress=sub_progress(say, 0.2, 1.0),
        )
    rows = [_summary(name, models[name], speeds[name], plans.get(name)) for name in models]
    dense_row = rows[0]
    dense_flops = phase_flops(dense, prompt_len, new_tokens)
    for name, row in zip(models, rows, strict=True):
        row["prefill_speedup"] = round(row["prefill_tokens_per_s"] / dense_row["prefill_tokens_per_s"], 3)
        row["decode_speedup"] = round(row["decode_tokens_per_s"] / dense_row["decode_tokens_per_s"], 3)
        row["memory_ratio"] = round(row["peak_memory_gb"] / dense_row["peak_memory_gb"], 3)
        if name != "dense":  # a speed-up beyond its FLOPs ideal is not a result (nirvana.measure.speed_check)
            flops = phase_flops(models[name], prompt_len, new_tokens)
            dense_point, point = speeds["dense"]["results"][0], speeds[name]["results"][0]
            for phase in ("prefill", "decode"):
                ideal = dense_flops[phase] / flops[phase]
                check = judge(round_ratios(dense_point, point, phase), ideal)
                row[f"{phase}_ideal"], row[f"{phase}_verdict"] = round(ideal, 3), check.verdict
    return {
        "benchmark": "bench gpu",
        "architecture": "tiny Llama (Llama-3.1-8B layout)" if config.tiny else "Llama-3.1-8B (random weights)",
        "config": {k: v for k, v in values.items() if k != "rope_parameters"},
        "dtype": str(dtype).replace("torch.", ""),
        "weights": "random (seed 0); scores: seeded random criterion; allocation: global, default gamma, align 8"
        if choice.has_allocation_settings
        else f"random (seed 0); scores: {choice.method} on {CALIBRATION[0]} x {CALIBRATION[1]} random token ids "
        "(seed 0); its own allocation",
        **choice.cells(),
        "throughput_definition": "prefill tokens per second of one forward over batch x prompt_len tokens",
        "memory_definition": "model weights + peak allocation growth during its runs (other models excluded)",
        "measured_utc": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "build_and_prune_seconds": round(build_seconds, 2),
        "total_seconds": round(time.perf_counter() - start, 2),
        "environment": device_info(input_device(dense)),
        "paper_reference": paper_a100(),
        "results": rows,
    }


def write_result(result: dict, out: Path | None = None) -> Path:
    """benchmarks/gpu/<llama-3.1-8b | tiny-cpu | tiny-cuda>.json"""
    out = Path(out or DEFAULT_OUT)
    out.mkdir(parents=True, exist_ok=True)
    device = result["environment"]["device"]
    tiny = result["architecture"].startswith("tiny")
    stem = ("tiny-" + ("cuda" if str(device).startswith("cuda") else "cpu")) if tiny else "llama-3.1-8b"
    path = out / f"{method_stem(stem, result.get('method', NIRVANA.method))}.json"
    path.write_text(json.dumps(result, indent=2) + "\n")
    return path
