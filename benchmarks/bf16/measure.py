"""What bf16 changes against fp32, on one real model: perplexity, NIRVANA scores, kept units, time, memory.

    python benchmarks/bf16/measure.py MODEL [--samples 32] [--seq-len 128] [--tokens 16384]

For `MODEL` (a registry name) it loads the model in fp32 and then in bf16 (each in its own fresh
process, one after the other, so each peak RSS is its own) and records:
- WikiText-2 test perplexity on the first `--tokens` tokens (512-token windows; the log-softmax is in
  fp32 in both dtypes, `nirvana.measure.perplexity`) and its wall time;
- NIRVANA scores on the same calibration batch (N x T of WikiText-2 validation, seed 0, the default
  micro-batch), their wall time and the process's peak RSS; the scores are accumulated in fp32 in both;
- from the fp32 and bf16 scores: Spearman rank correlation of the KV-group and the neuron scores, and
  the overlap of the kept units of the plans at 20% and 50% (gamma*, align 8): |kept_bf16 & kept_fp32| /
  |kept_fp32| for KV groups and for neurons.
Rows are appended to `benchmarks/bf16/bf16.jsonl` (one per model) and the table `bf16.md` is rebuilt.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
OUT = HERE / "bf16.jsonl"


def one_dtype(model: str, dtype: str, samples: int, seq_len: int, tokens: int, scores_out: str) -> dict:
    """In this process: load in `dtype`, perplexity, score; the scores are saved to `scores_out`."""
    import torch

    from nirvana.checkpoints.loading import load_model
    from nirvana.data.calibration import calibration_batch
    from nirvana.measure.perplexity import perplexity
    from nirvana.scoring.criteria import compute_scores

    torch.manual_seed(0)
    start = time.perf_counter()
    lm = load_model(model, dtype=dtype, device="cpu")
    load_s = time.perf_counter() - start
    start = time.perf_counter()
    ppl = perplexity(lm.model, lm.tokenizer, "wikitext2", max_tokens=tokens, use_cache=False)
    ppl_s = time.perf_counter() - start
    batch = calibration_batch(lm.tokenizer, "wikitext2-valid", samples=samples, seq_len=seq_len, seed=0)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    start = time.perf_counter()
    scores = compute_scores(lm.model, "nirvana", batch, use_cache=False)
    score_s = time.perf_counter() - start
    scores.save(scores_out)
    return {
        "dtype": dtype,
        "load_s": round(load_s, 1),
        "ppl": round(ppl.ppl, 4),
        "ppl_tokens": ppl.tokens,
        "ppl_s": round(ppl_s, 1),
        "score_s": round(score_s, 1),
        "micro_batch": scores.meta.get("micro_batch"),
        "peak_rss_gb_before_scoring": round(before, 2),
        "peak_rss_gb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2),
    }


def compare(model: str, fp32_path: str, bf16_path: str) -> dict:
    """Rank correlations and kept-unit overlaps of the two score files."""
    import numpy as np
    from scipy.stats import spearmanr

    from nirvana.checkpoints.loading import load_model
    from nirvana.models.shapes import model_shape
    from nirvana.pruning.allocation import Allocation, allocate
    from nirvana.scoring.scores import Scores

    shape = model_shape(load_model(model, dtype="float32", device="cpu", weights=False).model)
    a, b = Scores.load(fp32_path), Scores.load(bf16_path)
    out = {
        "spearman_kv_groups": round(float(spearmanr(a.attn.flatten(), b.attn.flatten()).statistic), 5),
        "spearman_neurons": round(float(spearmanr(a.mlp.flatten(), b.mlp.flatten()).statistic), 5),
        "max_relative_difference_kv": round(float((a.attn - b.attn).abs().max() / a.attn.abs().max()), 5),
        "max_relative_difference_neurons": round(float((a.mlp - b.mlp).abs().max() / a.mlp.abs().max()), 5),
    }
    for sparsity in (0.2, 0.5):
        alloc = Allocation(sparsity).resolve(shape)
        pa, pb = allocate(a, shape, alloc), allocate(b, shape, alloc)
        for kind, field in (("kv_groups", "kept_kv_groups"), ("neurons", "kept_neurons")):
            kept_a = sum(len(getattr(layer, field)) for layer in pa.layers)
            common = sum(len(set(getattr(x, field)) & set(getattr(y, field))) for x, y in zip(pa.layers, pb.layers))
            out[f"kept_overlap_{kind}_{int(sparsity * 100)}"] = round(common / kept_a, 4) if kept_a else None
    out["gamma"] = round(float(np.float64(Allocation(0.2).resolve(shape).gamma)), 4)
    return out


def cpu() -> str:
    """The CPU's name and which bf16 instructions it has (what decides bf16's speed on a CPU)."""
    info = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    name = next((x.split(":", 1)[1].strip() for x in info.splitlines() if x.startswith("model name")), "unknown CPU")
    flags = set(next((x.split(":", 1)[1].split() for x in info.splitlines() if x.startswith("flags")), []))
    bf16 = [f for f in ("avx512_bf16", "amx_bf16") if f in flags]
    return f"{name}, {os.cpu_count()} cores, bf16 instructions: {', '.join(bf16) or 'none'}"


def table(rows: list[dict]) -> str:
    lines = [
        "# bf16 against fp32 on a CPU",
        "",
        "Measured by `benchmarks/bf16/measure.py`, each dtype in its own fresh process, one after the other "
        "(a note says what else was running). Perplexity: WikiText-2 test, 512-token windows. Scores: NIRVANA, "
        "WikiText-2 "
        "validation calibration, the default micro-batch. Overlap: kept units of the bf16 plan that the fp32 "
        "plan also keeps, over the fp32 plan's kept units (gamma*, align 8).",
        "",
        *[f"Note ({r['model']}): {r['note']}" for r in rows if r.get("note")],
        "",
        "CPU of each row: " + "; ".join(sorted({f"{r['model']}: {r.get('cpu', '?')}" for r in rows})) + ".",
        "",
        "| model | N x T | ppl fp32 | ppl bf16 | ppl diff | ppl s fp32 / bf16 | score s fp32 / bf16 "
        "| peak RSS GB fp32 / bf16 | Spearman KV / neurons | overlap 20% KV / neurons | overlap 50% KV / neurons |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        f, b, c = r["fp32"], r["bf16"], r["compare"]
        lines.append(
            f"| {r['model']} | {r['samples']} x {r['seq_len']} | {f['ppl']:.3f} | {b['ppl']:.3f} "
            f"| {100 * (b['ppl'] / f['ppl'] - 1):+.2f}% | {f['ppl_s']:.0f} / {b['ppl_s']:.0f} "
            f"| {f['score_s']:.0f} / {b['score_s']:.0f} | {f['peak_rss_gb']:.2f} / {b['peak_rss_gb']:.2f} "
            f"| {c['spearman_kv_groups']:.4f} / {c['spearman_neurons']:.4f} "
            f"| {c['kept_overlap_kv_groups_20']:.3f} / {c['kept_overlap_neurons_20']:.3f} "
            f"| {c['kept_overlap_kv_groups_50']:.3f} / {c['kept_overlap_neurons_50']:.3f} |"
        )
    return "\n".join(lines) + "\n"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("model")
    p.add_argument("--samples", type=int, default=32)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--tokens", type=int, default=16384)
    p.add_argument("--note", default="", help="what else the machine was doing (into the row and the table)")
    p.add_argument("--child", nargs=2, metavar=("DTYPE", "SCORES"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        row = one_dtype(args.model, args.child[0], args.samples, args.seq_len, args.tokens, args.child[1])
        print(json.dumps(row))
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        result = {"model": args.model, "samples": args.samples, "seq_len": args.seq_len}
        paths = {}
        for dtype in ("float32", "bfloat16"):
            paths[dtype] = os.path.join(tmp, f"{dtype}.safetensors")
            cmd = [sys.executable, __file__, args.model, "--samples", str(args.samples), "--seq-len"]
            cmd += [str(args.seq_len), "--tokens", str(args.tokens), "--child", dtype, paths[dtype]]
            done = subprocess.run(cmd, check=True, capture_output=True, text=True)
            result["fp32" if dtype == "float32" else "bf16"] = json.loads(done.stdout.strip().splitlines()[-1])
            print(dtype, result["fp32" if dtype == "float32" else "bf16"], flush=True)
        result["compare"] = compare(args.model, paths["float32"], paths["bfloat16"])
    result["finished_utc"] = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M")
    result["cpu"] = cpu()
    result["note"] = args.note
    print(result["compare"])
    rows = [json.loads(x) for x in OUT.read_text().splitlines()] if OUT.exists() else []
    rows = [r for r in rows if (r["model"], r["samples"], r["seq_len"]) != (args.model, args.samples, args.seq_len)]
    rows.append(result)
    OUT.write_text("".join(json.dumps(r) + "\n" for r in rows))
    (HERE / "bf16.md").write_text(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
