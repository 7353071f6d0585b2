"""Batched against one-at-a-time generation for the generating tasks (MBPP, GSM8K), on one real model.

    NIRVANA_DATA_DIR=../shared/data .venv/bin/python benchmarks/generation/batched.py [--model smollm2-135m]
        [--tasks mbpp,gsm8k] [--limit 16] [--batch-sizes 1,8] [--max-gen-toks 128]

For each task the first `--limit` problems are generated greedily by lm-eval's `generate_until` at each
batch size (`run_accuracy(..., batch_size=B)`: the harness left-pads B problems into one `generate`),
with no result cache; MBPP's code runs in the sandbox as usual (its time is part of the task's). Recorded:
the task's wall seconds, problems per second, the speed-up over batch 1, and whether every completion
equals batch 1's. Rows go to `batched-<model>.jsonl` (one run per line) and `batched-<model>.md`.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--tasks", default="mbpp,gsm8k")
    p.add_argument("--limit", type=int, default=16)
    p.add_argument("--batch-sizes", default="1,8")
    p.add_argument("--max-gen-toks", type=int, default=128)
    p.add_argument("--note", default="", help="what else the machine was doing")
    args = p.parse_args()

    import torch

    from nirvana.accuracy.harness import run_accuracy
    from nirvana.bench.environment import machine_label
    from nirvana.checkpoints.loading import load_model

    lm = load_model(args.model, dtype="float32", device="cpu")
    rows = []
    for task in args.tasks.split(","):
        first = None
        for bs in [int(x) for x in args.batch_sizes.split(",")]:
            start = time.perf_counter()
            out = run_accuracy(
                lm.model,
                lm.tokenizer,
                task,
                limit=args.limit,
                batch_size=bs,
                source="local",
                use_cache=False,
                allow_code_execution=task in ("mbpp", "humaneval"),
                max_gen_toks=args.max_gen_toks,
            )
            seconds = time.perf_counter() - start
            row = out["tasks"][task]
            first = first or (seconds, row["completions"])
            result = {
                "model": args.model,
                "task": task,
                "problems": row["n"],
                "batch_size": bs,
                "max_gen_toks": args.max_gen_toks,
                "seconds": round(seconds, 1),
                "problems_per_s": round(row["n"] / seconds, 3),
                "speedup": round(first[0] / seconds, 2),
                "same_completions_as_batch_1": row["completions"] == first[1],
                "metric": row.get("pass@1", row.get("exact_match")),
                "threads": torch.get_num_threads(),
                "machine": machine_label(),
                "note": args.note,
                "finished_utc": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M"),
            }
            print(json.dumps(result), flush=True)
            rows.append(result)
    name = args.model.replace("/", "_")
    with (HERE / f"batched-{name}.jsonl").open("a") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    lines = [
        f"# Batched generation on {args.model} (greedy, CPU, fp32)",
        "",
        f"`benchmarks/generation/batched.py`, {rows[0]['finished_utc']} UTC, {rows[0]['machine']}."
        + (f" {args.note}" if args.note else ""),
        "Seconds are the whole task (generation, and for MBPP its sandboxed tests), no result cache.",
        "",
        "| task | problems | max new tokens | batch | seconds | problems/s | speed-up | same completions as batch 1 |",
        "|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['task']} | {r['problems']} | {r['max_gen_toks']} | {r['batch_size']} | {r['seconds']:.1f} "
            f"| {r['problems_per_s']:.3f} | {r['speedup']:.2f}x "
            f"| {'yes' if r['same_completions_as_batch_1'] else 'NO'} |"
        )
    (HERE / f"batched-{name}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
