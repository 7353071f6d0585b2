"""Scale benchmark: one fixed small quality grid in-process, on a local Ray cluster with one worker, and with two.

    python -m nirvana bench scale [--model smollm2-135m] [--tokens 2048]

The grid: SmolLM2, three criteria (nirvana, magnitude, wanda) x two sparsities (0.2, 0.5) with
global allocation, plus the dense row; perplexity on the first 2,048 tokens of WikiText-2 and KL
on 8 anchor sequences. It is the quality grid (`nirvana.bench.quality`) itself, run three times
into fresh folders, so the rows of the three runs must be equal (checked, and the result says so).

What is timed, and what is not:
- the scores are computed once before the timed runs (the shared score cache: every run finds them
  there), so each run times its rows (allocation, slicing, KL, perplexity) and the model loads;
- every run uses one thread per worker (in-process: `torch.set_num_threads(1)`; a Ray worker with
  one CPU gets `OMP_NUM_THREADS=1`), so one worker and in-process do the same work;
- a Ray run's wall time includes starting the local Ray instance, its worker processes (Python and
  torch imports) and each worker's model load: that, over the rows, is the per-row overhead.
On a 2-core machine shared with other work, two workers cannot reach 2x: the driver, Ray's own
processes and any other load share the same two cores, and each worker loads its own model copy.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from nirvana.bench.base import run
from nirvana.bench.environment import machine_label
from nirvana.bench.quality import QUALITY, QualityWorker
from nirvana.bench.quality_config import QualityConfig
from nirvana.cluster.ray_tasks import disconnect, start_local
from nirvana.scoring.criteria import CRITERIA
from nirvana.search.calibration import AnchorSpec
from nirvana.store.atomic import atomic_write_text
from nirvana.store.paths import benchmarks_dir

DEFAULT_OUT = benchmarks_dir("scale")
TIMING = ("seconds", "finished_utc", "machine")  # cells that may differ between runs of one row


@dataclass
class ScaleConfig:
    model: str = "smollm2-135m"
    criteria: tuple[str, ...] = ("nirvana", "magnitude", "wanda")
    sparsities: tuple[float, ...] = (0.2, 0.5)
    tokens: int = 2048
    window: int = 512  # perplexity window (tokens)
    workers: tuple[int, ...] = (1, 2)  # the Ray clusters' sizes (one-CPU workers)
    repeats: int = 2  # rounds of (in-process, each cluster size), interleaved; the median of each is reported
    out: Path = DEFAULT_OUT


def grid(config: ScaleConfig, out_dir: Path) -> QualityConfig:
    return QualityConfig(
        model=config.model, criteria=config.criteria, sparsities=config.sparsities, uniform_criteria=(),
        select_criteria=(), candidates=1, tokens=config.tokens, window=config.window, datasets=("wikitext2",),
        kl_sequences=8, anchor=AnchorSpec(samples=32, seq_len=64), out_dir=out_dir,
    )  # fmt: skip


def _values(rows: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if k not in TIMING} for r in rows]


def run_scale_bench(config: ScaleConfig, log=print) -> dict:
    """Time the grid in-process and on each Ray cluster size; the document `write_outputs` writes."""
    started = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M:%S")
    load_before = os.getloadavg()
    threads = torch.get_num_threads()
    runs, reference = [], None
    with tempfile.TemporaryDirectory(prefix="nirvana-scale-") as tmp:
        torch.set_num_threads(1)
        try:
            log("scores, once, before the timed runs (the shared score cache)")
            warm = QualityWorker(grid(config, Path(tmp) / "warm"), log)
            for criterion in config.criteria:
                warm.scores(criterion, 0 if CRITERIA[criterion].needs_data else None)
            del warm
            for round_, workers in ((r, w) for r in range(config.repeats) for w in (0, *config.workers)):
                where = "in-process" if workers == 0 else f"ray, {workers} worker{'s' if workers > 1 else ''}"
                out_dir = Path(tmp) / f"run-{round_}-{workers}"
                start = time.perf_counter()
                cluster = start_local(workers) if workers else None
                try:
                    rows = run(QUALITY, grid(config, out_dir), log, cluster=cluster)
                finally:
                    if cluster is not None:
                        disconnect()
                wall = time.perf_counter() - start
                reference = reference or _values(rows)
                runs.append(
                    {
                        "round": round_ + 1,
                        "where": where,
                        "workers": workers or 1,
                        "rows": len(rows),
                        "wall_s": round(wall, 1),
                        "row_seconds_sum": round(sum(float(r["seconds"]) for r in rows), 1),
                        "same_rows_as_in_process": _values(rows) == reference,
                    }
                )
                log(f"{where}: {wall:.1f} s for {len(rows)} rows")
        finally:
            torch.set_num_threads(threads)
    median = {
        where: statistics.median(r["wall_s"] for r in runs if r["where"] == where)
        for where in {r["where"] for r in runs}
    }
    local, one, two = median["in-process"], median.get("ray, 1 worker"), median.get("ray, 2 workers")
    rows = runs[0]["rows"]
    summary = {"median_wall_s": {k: round(v, 1) for k, v in sorted(median.items())}}
    if one:
        summary["ray_overhead_per_row_s"] = round((one - local) / rows, 2)
    if one and two:
        summary["speedup_two_over_one"] = round(one / two, 2)
    return {
        "model": config.model,
        "grid": f"{len(config.criteria)} criteria x {len(config.sparsities)} sparsities + dense, "
        f"perplexity on {config.tokens} tokens (WikiText-2), KL on 8 anchor sequences",
        "machine": machine_label(),
        "cpu_count": os.cpu_count(),
        "load_average_before": [round(x, 2) for x in load_before],
        "load_average_after": [round(x, 2) for x in os.getloadavg()],
        "started_utc": started,
        "runs": runs,
        **summary,
    }


def markdown(result: dict) -> str:
    lines = [
        f"# Scale benchmark: {result['model']}",
        "",
        f"{result['grid']}. Machine: {result['machine']} ({result['cpu_count']} cores); load average "
        f"before {result['load_average_before']}, after {result['load_average_after']}; {result['started_utc']} UTC.",
        "",
        "| round | run | workers | rows | wall (s) | sum of row times (s) | rows equal to in-process |",
        "|---:|---|---:|---:|---:|---:|---|",
    ]
    for r in result["runs"]:
        same = "yes" if r["same_rows_as_in_process"] else "**no**"
        cells = (r.get("round", 1), r["where"], r["workers"], r["rows"], r["wall_s"], r["row_seconds_sum"], same)
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    medians = ", ".join(f"{k} {v} s" for k, v in result.get("median_wall_s", {}).items())
    lines += ["", f"Median wall time per run: {medians}." if medians else ""]
    if "speedup_two_over_one" in result:
        lines.append(f"Two workers over one: **{result['speedup_two_over_one']}x**.")
    if "ray_overhead_per_row_s" in result:
        lines.append(
            f"Ray's overhead against in-process: **{result['ray_overhead_per_row_s']} s per row** (one worker's median "
            "wall time minus in-process, over the rows: Ray's start, the worker process and its model load)."
        )
    by_where = {r["where"]: r for r in result["runs"]}
    one, two = by_where.get("ray, 1 worker"), by_where.get("ray, 2 workers")
    if one and two and two["row_seconds_sum"] > 1.5 * one["row_seconds_sum"]:
        lines.append(
            f"With two workers each row took longer (rows summed to {two['row_seconds_sum']} s against "
            f"{one['row_seconds_sum']} s with one): the two workers did not get two cores' worth of CPU (load average "
            f"{result['load_average_before'][0]} on {result['cpu_count']} cores), and each loads its own model."
        )
    lines += ["", "Made by `python -m nirvana bench scale` (`nirvana/bench/scale.py` says what is timed).", ""]
    return "\n".join(lines)


def write_outputs(result: dict, out_dir: Path) -> list[Path]:
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    name = f"scale-{result['model'].replace('/', '_')}"
    paths = [out_dir / f"{name}.json", out_dir / f"{name}.md"]
    atomic_write_text(paths[0], json.dumps(result, indent=2) + "\n")
    atomic_write_text(paths[1], markdown(result))
    return paths
