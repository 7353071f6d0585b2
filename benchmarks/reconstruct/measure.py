"""`--reconstruct` on a real model: WikiText-2 and PTB perplexity of each method's prune with and without the
least-squares reconstruction (nirvana.pruning.reconstruct), the same plan both ways, and what it costs.

    .venv/bin/python benchmarks/reconstruct/measure.py [--model smollm2-135m] [--methods nirvana,flap]
        [--sparsities 0.2,0.5] [--tokens 16384]

Each (method, sparsity) is one `prune` without and one with `reconstruct=True` (calibration: the CLI's default,
32 x 128 tokens of wikitext2-valid, seed 0; scores cached; each method's settings as the baselines grid ran it at
that sparsity, `benchmarks/baselines/baselines-<model>.csv`), then `perplexity` on the first `--tokens` tokens of
each test set in 512-token windows (the quality benchmark's protocol). Appends one JSON line per row to
reconstruct.jsonl and rewrites reconstruct.md from all rows. Resumes: a (model, method, sparsity, reconstruct)
row already in the file is not run again.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import resource
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--methods", default="nirvana,flap")
    p.add_argument("--sparsities", default="0.2,0.5")
    p.add_argument("--tokens", type=int, default=16384)
    args = p.parse_args()
    from nirvana.bench.environment import machine_label
    from nirvana.bench.quality import evaluate_ppl
    from nirvana.checkpoints.loading import load_model
    from nirvana.pipeline import PruneSettings, prune

    rows_path = OUT / "reconstruct.jsonl"
    done = set()
    if rows_path.exists():
        for line in rows_path.read_text().splitlines():
            r = json.loads(line)
            done.add((r["model"], r["method"], r["sparsity"], r["reconstruct"]))
    lm = load_model(args.model)
    dense = {name: evaluate_ppl(lm.model, lm.tokenizer, name, args.tokens, 512)[0] for name in ("wikitext2", "ptb")}
    for method in args.methods.split(","):
        for sparsity in (float(s) for s in args.sparsities.split(",")):
            for fitted in (False, True):
                if (args.model, method, sparsity, fitted) in done:
                    continue
                load = os.getloadavg()[0]
                t = time.perf_counter()
                settings = grid_settings(args.model, method, sparsity)
                result = prune(
                    lm, PruneSettings(sparsity=sparsity, method=method, method_settings=settings, reconstruct=fitted)
                )
                seconds = time.perf_counter() - t
                ppl = {name: evaluate_ppl(result.model, lm.tokenizer, name, args.tokens, 512)[0] for name in dense}
                row = {
                    "model": args.model, "method": method, "sparsity": sparsity, "reconstruct": fitted,
                    "method_settings": settings or {},
                    "achieved_block_sparsity": round(result.report["achieved_block_sparsity"], 4),
                    "ppl_wikitext2": round(ppl["wikitext2"], 3), "ppl_ptb": round(ppl["ptb"], 3),
                    "dense_ppl_wikitext2": round(dense["wikitext2"], 3), "dense_ppl_ptb": round(dense["ptb"], 3),
                    "prune_seconds": round(seconds, 1),
                    "reconstruct_seconds": round(result.report["timings"].get("reconstruct", 0.0), 1),
                    "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
                    "tokens": args.tokens, "load_avg_1min_before": round(load, 2), "machine": machine_label(),
                    "finished_utc": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M"),
                }  # fmt: skip
                with rows_path.open("a") as f:
                    f.write(json.dumps(row) + "\n")
                print(json.dumps(row), flush=True)
                del result
    write_md(rows_path)


def grid_settings(model: str, method: str, sparsity: float) -> dict | None:
    """The method settings the baselines grid used for this model and sparsity (LLM-Pruner at 50% on SmolLM2:
    attention layers [4, 19], the range that reaches it), so each row is the grid's model; None: the defaults."""
    import csv

    path = ROOT / "benchmarks" / "baselines" / f"baselines-{model}.csv"
    if not path.exists():
        return None
    for row in csv.DictReader(path.open()):
        same = row["method"] == method and float(row["sparsity"]) == sparsity
        if same and row["variant"].endswith(f"s={sparsity:g}"):
            return json.loads(row["method_settings"] or "{}") or None
    return None


def write_md(rows_path: Path) -> None:
    rows = [json.loads(line) for line in rows_path.read_text().splitlines()]
    pairs = {}
    for r in rows:
        pairs.setdefault((r["model"], r["method"], r["sparsity"]), {})[r["reconstruct"]] = r
    lines = [
        "# Least-squares reconstruction after pruning (`--reconstruct`)",
        "",
        "Each row: the same plan (method, target sparsity, CLI default calibration 32 x 128 tokens of "
        "wikitext2-valid, seed 0; each method's settings as the baselines grid ran it, e.g. LLM-Pruner at 50% on "
        "SmolLM2 with attention layers [4, 19]) sliced, then either kept as is or with its kept o_proj / down_proj "
        "columns "
        "re-solved block by block (nirvana.pruning.reconstruct, Tyr-the-Pruner's least squares). Perplexity on the "
        "first 16,384 tokens of each test set, 512-token windows; the lower of each pair in bold. Written by "
        "`benchmarks/reconstruct/measure.py`.",
        "",
        "| model | method | sparsity | achieved | WikiText-2 plain -> reconstructed | PTB plain -> reconstructed "
        "| reconstruction time | peak RSS | load before |",
        "|---|---|---:|---:|---|---|---:|---:|---|",
    ]
    for (model, method, sparsity), pair in pairs.items():
        if set(pair) != {False, True}:
            continue
        a, b = pair[False], pair[True]
        cells = []
        for key in ("ppl_wikitext2", "ppl_ptb"):
            plain, fitted = f"{a[key]:.2f}", f"{b[key]:.2f}"
            cells.append(f"{plain} -> **{fitted}**" if b[key] < a[key] else f"**{plain}** -> {fitted}")  # lower bold
        lines.append(
            f"| {model} | {method} | {sparsity:g} | {b['achieved_block_sparsity']:.4f} | {cells[0]} | {cells[1]} "
            f"| {b['reconstruct_seconds']:.1f} s | {b['peak_rss_mb']} MB | {a['load_avg_1min_before']}, "
            f"{b['load_avg_1min_before']} |"
        )
    first = rows[0]
    lines += [
        "",
        f"Dense: WikiText-2 {first['dense_ppl_wikitext2']:.2f}, PTB {first['dense_ppl_ptb']:.2f}. "
        f"{first['machine']}. Peak RSS is the process's so far (it holds the dense model throughout).",
    ]
    (OUT / "reconstruct.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
