"""Batched against one-at-a-time generation for the generating tasks (MBPP, GSM8K, HumanEval), on one real model.

    NIRVANA_DATA_DIR=../shared/data .venv/bin/python benchmarks/generation/batched.py [--model smollm2-135m]
        [--tasks mbpp,gsm8k] [--limit 16] [--batch-sizes 1,8] [--max-gen-toks 128] [--paths continuous]

For each task the first `--limit` problems are generated greedily by lm-eval's `generate_until` at each
batch size (`run_accuracy(..., batch_size=B)`: the harness left-pads B problems into one `generate`),
with no result cache; MBPP's and HumanEval's code runs in the sandbox as usual (its time is part of the
task's). `--paths` compares how a batch is generated (`nirvana.accuracy.harness`), each at each batch size:
`lm-eval` (lm-eval's own `_model_generate`: stop strings answered for the whole batch), `row-stops` (each row
stops at its own stop string, `nirvana.accuracy.stops`), `prefix` (row stops, and the prompt prefix every
problem shares computed once, `nirvana.accuracy.prefix`) and `continuous` (row stops, the shared prefix, and a
finished row's slot taken by the next problem at once, `nirvana.accuracy.continuous`; what the harness does
where the model qualifies; the first three are lm-eval's static batches). Recorded: the task's wall
seconds, problems per second, the speed-up over the first path and batch size, and whether every completion
equals that first run's. Rows go to `batched-<model>.jsonl` (one run per line) and `batched-<model>.md`.
HumanEval's own cap is 1,024 new tokens (its task config); `--max-gen-toks` applies to the others.
"""

from __future__ import annotations

import argparse
import sys
import time

from record import record, stamped  # this folder's (the script's own folder is first on sys.path)

PATHS = ("lm-eval", "row-stops", "prefix", "continuous")


def use_path(name: str) -> None:
    """Make the harness's model class generate the way `name` says (see the module docstring)."""
    from lm_eval.models.huggingface import HFLM

    from nirvana.accuracy import harness

    cls = harness._lm_class()
    own = ("_model_generate", "_generation_prefix", "_continuous_plan")
    for attr, method in vars(cls).get("_benchmark_saved", {}).items():  # the harness's own first
        setattr(cls, attr, method)
    cls._benchmark_saved = {attr: vars(cls)[attr] for attr in own}
    if name != "continuous":  # lm-eval's static batches
        cls._continuous_plan = lambda self, requests: None
    if name == "lm-eval":

        def stock(self, context, max_length, stop, **kwargs):
            if self.meter is not None:
                self.meter.tick(int(context.shape[0]))
            return HFLM._model_generate(self, context, max_length, stop, **kwargs)

        cls._model_generate = stock
    elif name == "row-stops":
        cls._generation_prefix = lambda self, context, mask: (None, None)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--tasks", default="mbpp,gsm8k")
    p.add_argument("--limit", type=int, default=16)
    p.add_argument("--batch-sizes", default="1,8")
    p.add_argument("--max-gen-toks", type=int, default=128)
    p.add_argument("--paths", default="continuous", help=f"comma-separated, of: {', '.join(PATHS)}")
    p.add_argument("--note", default="", help="what else the machine was doing")
    args = p.parse_args()
    paths = args.paths.split(",")
    if any(x not in PATHS for x in paths):
        p.error(f"--paths takes {', '.join(PATHS)}, got {args.paths}")

    # here, not at the top: `--help` answers without loading torch
    from nirvana.accuracy.harness import run_accuracy
    from nirvana.checkpoints.loading import load_model

    lm = load_model(args.model, dtype="float32", device="cpu")
    rows = []
    for task in args.tasks.split(","):
        first = None
        for path in paths:
            use_path(path)
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
                first = first or (seconds, row["completions"], f"{path}, batch {bs}")
                result = {
                    "model": args.model,
                    "task": task,
                    "problems": row["n"],
                    "path": path,
                    "batch_size": bs,
                    "max_gen_toks": 1024 if task == "humaneval" else args.max_gen_toks,
                    "seconds": round(seconds, 1),
                    "problems_per_s": round(row["n"] / seconds, 3),
                    "speedup": round(first[0] / seconds, 2),
                    "against": first[2],
                    "same_completions": row["completions"] == first[1],
                    "metric": row.get("pass@1", row.get("exact_match")),
                }
                rows.append(stamped(result, args.note))
    text = record(
        "batched",
        args.model,
        rows,
        f"Batched generation on {args.model} (greedy, CPU, fp32)",
        "",
        "Seconds are the whole task (generation, and for MBPP and HumanEval the sandboxed tests), no result cache. "
        "Paths: `lm-eval` its own generate call (stop strings answered for the whole batch), `row-stops` each row "
        "stopping at its own, `prefix` row stops and the shared prompt prefix computed once, `continuous` those and "
        "a finished row's slot refilled at once (the harness's).",
        {
            "task": "---",
            "problems": "---:",
            "max new tokens": "---:",
            "path": "---",
            "batch": "---:",
            "seconds": "---:",
            "problems/s": "---:",
            "speed-up": "---:",
            "same completions": "---",
        },
        lambda r: (
            r["task"],
            str(r["problems"]),
            str(r["max_gen_toks"]),
            r["path"],
            str(r["batch_size"]),
            f"{r['seconds']:.1f}",
            f"{r['problems_per_s']:.3f}",
            f"{r['speedup']:.2f}x against {r['against']}",
            "yes" if r["same_completions"] else "NO",
        ),
    )
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
