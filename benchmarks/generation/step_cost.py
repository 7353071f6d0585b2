"""What one decode step costs against the number of rows decoding together, on one real model.

    .venv/bin/python benchmarks/generation/step_cost.py [--model qwen2.5-coder-1.5b] [--cache-len 1000]
        [--batch-sizes 1,2,4,8,16,32] [--note "..."]

Continuous batching (`nirvana.accuracy.continuous`) keeps `batch_size` rows decoding; how many is worth it
depends on what a step costs at each row count. Each row count B gets a KV cache of `--cache-len` columns
(random keys and values of the model's shapes: a step's cost does not depend on their values) and four
greedy decode steps (one token per row, the harness's call: attention mask, position ids, `logits_to_keep=1`);
the median of the last three is recorded, with seconds per row. Rows go to `step-cost-<model>.jsonl` (one
measurement per line, appended) and `step-cost-<model>.md` (this run).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

from record import record, stamped  # this folder's (the script's own folder is first on sys.path)


def step_seconds(model, rows: int, cache_len: int, steps: int = 4) -> float:
    import torch
    from transformers import DynamicCache

    cfg = model.config
    cache = DynamicCache(config=cfg)
    for layer, attn in zip(cache.layers, (layer.self_attn for layer in model.model.layers), strict=True):
        heads = attn.k_proj.out_features // attn.head_dim  # a pruned layer keeps its own KV-head count
        keys = torch.randn(rows, heads, cache_len, attn.head_dim) * 0.1
        layer.lazy_initialization(keys, keys)
        layer.keys, layer.values = keys, torch.randn_like(keys) * 0.1
    mask = torch.ones(rows, cache_len + 1, dtype=torch.long)
    ids = torch.randint(0, cfg.vocab_size, (rows, 1))
    times = []
    with torch.no_grad():
        for s in range(steps):
            pos = torch.full((rows, 1), cache_len + s)
            start = time.perf_counter()
            model(input_ids=ids, attention_mask=mask, position_ids=pos, cache=cache, use_cache=True, logits_to_keep=1)
            times.append(time.perf_counter() - start)
            mask = torch.cat([mask, torch.ones(rows, 1, dtype=torch.long)], dim=1)
    return statistics.median(times[1:])


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="qwen2.5-coder-1.5b")
    p.add_argument("--cache-len", type=int, default=1000)
    p.add_argument("--batch-sizes", default="1,2,4,8,16,32")
    p.add_argument("--note", default="", help="what else the machine was doing")
    args = p.parse_args()

    # here, not at the top: `--help` answers without loading torch
    from nirvana.checkpoints.loading import load_model

    model = load_model(args.model, dtype="float32", device="cpu").model.eval()
    rows = []
    for b in [int(x) for x in args.batch_sizes.split(",")]:
        seconds = step_seconds(model, b, args.cache_len)
        row = {"model": args.model, "rows": b, "cache_len": args.cache_len, "step_seconds": round(seconds, 3)}
        rows.append(stamped({**row, "seconds_per_row": round(seconds / b, 4)}, args.note))
    text = record(
        "step-cost",
        args.model,
        rows,
        f"Decode step cost against rows on {args.model} (greedy, CPU, fp32)",
        f"KV cache of {args.cache_len} columns",
        "",
        {"rows": "---:", "seconds a step": "---:", "seconds a row": "---:"},
        lambda r: (str(r["rows"]), f"{r['step_seconds']:.3f}", f"{r['seconds_per_row']:.4f}"),
    )
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
