"""Pruned models served by vLLM: the same greedy text as transformers, and the speed through the engine.

    python -m nirvana bench serve [--model smollm2-135m] [--methods nirvana,flap,llm-pruner] [--sparsities 0.2,0.5]

Needs the serving environment (`make serve-env`). For the dense model and each method at each sparsity, one row:
1. the pruned folder, written by `python -m nirvana prune --out` (the path a user takes);
2. transformers' greedy continuations of five prompts (`nirvana.measure.generation.generate`, what
   `python -m nirvana generate` prints) and the model's decode FLOPs per token (`phase_flops`);
3. in the serving environment (`nirvana_vllm.measure`, a fresh vLLM engine per folder, the plugin's class for
   a pruned one): the same prompts' greedy continuations, and output tokens per second at each batch size
   (`prompt_len` prompt tokens, `gen_tokens` new tokens per request, EOS ignored, median of `repeats`).
The report puts each row's speed beside the dense row's (the speed-up) and the FLOPs ideal (dense / pruned
decode FLOPs per token). Rows go to `benchmarks/serve/serve.jsonl` as they finish; a run skips rows already
there, and rewrites `serve.md`.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from nirvana.bench.baselines import METHOD_SETTINGS
from nirvana.bench.environment import machine_label
from nirvana.checkpoints.loading import embedded_model_dir, load_model
from nirvana.errors import NirvanaError
from nirvana.export.serve import SERVER_ENV, read_config, serve_python, serving_architecture
from nirvana.measure.flops import phase_flops
from nirvana.measure.generation import generate
from nirvana.models.shapes import count_parameters
from nirvana.store.atomic import atomic_write_text
from nirvana.store.paths import benchmarks_dir

DEFAULT_OUT = benchmarks_dir("serve")
PROMPTS = (
    "The capital of France is",
    "def fibonacci(n):",
    "Water boils at",
    "The three primary colors are",
    "Once upon a time, in a small village,",
)


@dataclass
class ServeConfig:
    model: str = "smollm2-135m"
    methods: tuple[str, ...] = ("nirvana", "flap", "llm-pruner")
    sparsities: tuple[float, ...] = (0.2, 0.5)
    new_tokens: int = 24  # greedy tokens per prompt compared with transformers
    batch_sizes: tuple[int, ...] = (1, 32)
    prompt_len: int = 64  # prompt tokens per request of the speed runs
    gen_tokens: int = 32  # new tokens per request of the speed runs
    repeats: int = 3
    out: Path = DEFAULT_OUT


def _key(model: str, method: str, sparsity: float) -> str:
    return f"{model}|{method}|{sparsity:g}"


def read_rows(out: Path) -> list[dict]:
    path = out / "serve.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def _prune(config: ServeConfig, method: str, sparsity: float, where: Path) -> Path:
    """The folder `prune --out` writes, with the baselines grid's settings for this method and sparsity (LLM-Pruner
    at 50% on SmolLM2 needs its layer range: `nirvana.bench.baselines.METHOD_SETTINGS`)."""
    argv = [sys.executable, "-m", "nirvana", "prune", "--model", config.model, "--method", method,
            "--sparsity", str(sparsity), "--out", str(where)]  # fmt: skip
    settings = METHOD_SETTINGS.get(config.model, {}).get((method, sparsity))
    if settings:
        argv += ["--method-settings", json.dumps(settings, sort_keys=True)]
    done = subprocess.run(argv, capture_output=True, text=True)
    if done.returncode != 0:
        raise NirvanaError(f"`{' '.join(argv[1:])}` failed: {done.stderr.strip()[-500:]}")
    return where / "model"


def _through_vllm(folder: Path, config: ServeConfig) -> dict:
    _, hf_config = read_config(folder)
    spec = {"model": str(folder), "architecture": serving_architecture(hf_config), "prompts": list(PROMPTS),
            "new_tokens": config.new_tokens, "batch_sizes": list(config.batch_sizes),
            "prompt_len": config.prompt_len, "gen_tokens": config.gen_tokens, "repeats": config.repeats}  # fmt: skip
    done = subprocess.run(
        [str(serve_python()), "-m", "nirvana_vllm.measure", json.dumps(spec)],
        capture_output=True, text=True, env={**os.environ, **SERVER_ENV},
    )  # fmt: skip
    line = next((x for x in done.stdout.splitlines() if x.startswith("NIRVANA-MEASURE ")), None)
    if done.returncode != 0 or line is None:
        raise NirvanaError(f"vLLM on {folder} failed ({done.returncode}): {done.stderr.strip()[-1500:]}")
    return json.loads(line.split(" ", 1)[1]) | {"architecture": spec["architecture"]}


def measure_one(config: ServeConfig, method: str, sparsity: float, folder: Path) -> dict:
    lm = load_model(str(folder), dtype="float32", device="cpu")
    hf = [r["output"] for r in generate(lm.model, lm.tokenizer, list(PROMPTS), max_new_tokens=config.new_tokens,
                                        chat=False)]  # fmt: skip
    flops = phase_flops(lm.model, config.prompt_len, config.gen_tokens)["decode"]
    params = count_parameters(lm.model)
    del lm
    served = _through_vllm(folder, config)
    texts = [g["text"].strip() for g in served["greedy"]]
    return {
        "model": config.model,
        "method": method,
        "sparsity": sparsity,
        "method_settings": METHOD_SETTINGS.get(config.model, {}).get((method, sparsity)),
        "key": _key(config.model, method, sparsity),
        "architecture": served["architecture"],
        "parameters": params,
        "decode_flops_per_token": flops,
        "identical": sum(a == b for a, b in zip(hf, texts)),
        "prompts": len(PROMPTS),
        "transformers": hf,
        "vllm": texts,
        "engine_start_s": round(served["start_s"], 1),
        "tokens_per_s": {b: round(v["output_tokens_per_s"], 2) for b, v in served["speed"].items()},
        "seconds": served["speed"],
        "settings": {"prompt_len": config.prompt_len, "gen_tokens": config.gen_tokens, "repeats": config.repeats},
        "machine": machine_label(),
        "load_avg_1min": round(os.getloadavg()[0], 2),
        "finished_utc": f"{dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M}",
    }


def run_serve(config: ServeConfig, log=print) -> list[dict]:
    """Every row of `config` not yet in `serve.jsonl`, appended as it finishes; the report rewritten."""
    config.out.mkdir(parents=True, exist_ok=True)
    serve_python()  # no serving environment: say so before any pruning
    rows = read_rows(config.out)
    done = {r["key"] for r in rows}
    wanted = [("dense", 0.0)] + [(m, s) for s in config.sparsities for m in config.methods]
    for method, sparsity in wanted:
        if _key(config.model, method, sparsity) in done:
            continue
        log(f"{method} at {sparsity:g}: prune, transformers, vLLM")
        with tempfile.TemporaryDirectory(prefix="nirvana-serve-") as tmp:
            folder = (
                embedded_model_dir(config.model)
                if method == "dense"
                else _prune(config, method, sparsity, Path(tmp) / "out")
            )
            row = measure_one(config, method, sparsity, folder)
        rows.append(row)
        with (config.out / "serve.jsonl").open("a") as f:
            f.write(json.dumps(row) + "\n")
        log(f"  {row['identical']}/{row['prompts']} identical; tokens/s {row['tokens_per_s']}")
    atomic_write_text(config.out / "serve.md", table(rows, config))
    return rows


def table(rows: list[dict], config: ServeConfig) -> str:
    dense = {r["model"]: r for r in rows if r["method"] == "dense"}
    batches = [str(b) for b in config.batch_sizes]
    head = " | ".join(f"batch {b}: tokens/s (speed-up)" for b in batches)
    lines = [
        "# Pruned models served by vLLM (CPU)",
        "",
        "Written by `python -m nirvana bench serve` (nirvana/bench/serve.py says how each figure is made): greedy "
        "text through vLLM (the plugin's class, `vllm_plugin/`) against transformers' (`python -m nirvana "
        "generate`), and output tokens per second through vLLM's engine, beside the dense model's and the FLOPs "
        "ideal (dense / pruned decode FLOPs per token). Each row's machine and load are in serve.jsonl.",
        "",
        f"| model | method | sparsity | parameters | identical greedy text | {head} | FLOPs ideal |",
        "|---|---|---:|---:|---:|" + "---:|" * len(batches) + "---:|",
    ]
    for r in rows:
        d = dense.get(r["model"])
        cells = []
        for b in batches:
            speed = r["tokens_per_s"].get(b)
            base = d["tokens_per_s"].get(b) if d else None
            cells.append("-" if speed is None else f"{speed:.1f}" + (f" ({speed / base:.2f}x)" if base else ""))
        ideal = d["decode_flops_per_token"] / r["decode_flops_per_token"] if d else None
        lines.append(
            f"| {r['model']} | {r['method']} | {r['sparsity']:.0%} | {r['parameters'] / 1e6:.1f} M | "
            f"{r['identical']}/{r['prompts']} | "
            + " | ".join(cells)
            + f" | {'-' if ideal is None else f'{ideal:.2f}x'} |"
        )
    settings = rows[0]["settings"] if rows else {}
    lines += [
        "",
        f"Speed runs: {settings.get('prompt_len')} prompt tokens and {settings.get('gen_tokens')} new tokens per "
        f"request, EOS ignored, fp32, eager mode, median of {settings.get('repeats')} after a warm-up; tokens/s is "
        "new tokens over the whole requests' time (their prefill included), vLLM's own thread settings (it sets "
        "torch to one thread for serving). Where a greedy text differs, serve.jsonl holds both.",
    ]
    return "\n".join(lines) + "\n"


__all__ = ["ServeConfig", "read_rows", "run_serve", "table"]
