"""Peak memory and time of `score` against the micro-batch (SmolLM2-135M, NIRVANA, 32 x 128, CPU).

    NIRVANA_DATA_DIR=../shared/data .venv/bin/python benchmarks/memory/microbatch.py [--before REV]

Each point is one fresh `python -m nirvana score --no-cache` process: its peak resident set (the
child's `ru_maxrss`, from `os.wait4`: the whole process, loading included), its wall time and the
scoring seconds it reports. `auto` is the default (micro-batch 0: from the memory plan). With
`--before REV`, the same points run on `nirvana/` of that revision too (full logits, no chunking).
Writes benchmarks/memory/microbatch-smollm2-cpu.jsonl and .md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tarfile
import tempfile
import time
from datetime import UTC, datetime
from io import BytesIO
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
POINTS = ("auto", 1, 2, 4, 8, 16, 32, "2+ckpt", "32+ckpt")  # +ckpt: --activation-checkpointing (this tree)


def run(tree: Path, micro_batch, out: Path) -> dict:
    cmd = [sys.executable, "-m", "nirvana", "score", "--model", "smollm2-135m", "--samples", "32"]
    cmd += ["--seq-len", "128", "--no-cache", "--out", str(out)]
    size, _, ckpt = str(micro_batch).partition("+")
    cmd += [] if size == "auto" else ["--micro-batch", size]
    cmd += ["--activation-checkpointing"] if ckpt else []
    start = time.perf_counter()
    proc = subprocess.Popen(
        cmd,
        cwd=tree,
        env={**os.environ, "PYTHONPATH": str(tree)},
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    stdout = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    if status != 0:
        raise SystemExit(f"score failed ({status}) for micro-batch {micro_batch}")
    meta = json.loads(stdout[stdout.index("{") :])["meta"]
    return {
        "micro_batch": micro_batch,
        "chosen": meta.get("micro_batch", 32 if micro_batch == "auto" else micro_batch),
        "checkpointing": meta.get("activation_checkpointing", False),
        "peak_rss_gb": round(usage.ru_maxrss / 1e6, 3),
        "wall_s": round(wall, 1),
        "scoring_s": meta["seconds"],
    }


def checkout(rev: str, into: Path) -> str:
    data = subprocess.run(["git", "archive", rev, "nirvana"], cwd=ROOT, capture_output=True, check=True).stdout
    with tarfile.open(fileobj=BytesIO(data)) as tar:
        tar.extractall(into, filter="data")
    return subprocess.run(["git", "rev-parse", "--short", rev], cwd=ROOT, capture_output=True, text=True).stdout.strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", help="also run the points on nirvana/ of this revision")
    parser.add_argument("--keep-before", action="store_true", help="keep the earlier rows of other revisions")
    args = parser.parse_args()
    old = HERE / "microbatch-smollm2-cpu.jsonl"
    kept = [json.loads(x) for x in old.read_text().splitlines()] if args.keep_before and old.exists() else []
    rows = []
    with tempfile.TemporaryDirectory(prefix="nirvana-microbatch-") as tmp:
        trees = [("this tree", ROOT)]
        if args.before:
            (Path(tmp) / "before").mkdir()
            trees.append((checkout(args.before, Path(tmp) / "before"), Path(tmp) / "before"))
        for label, tree in trees:
            for mb in POINTS if label == "this tree" else [p for p in POINTS if isinstance(p, int)]:
                row = {"code": label, **run(tree, mb, Path(tmp) / "s")}
                print(json.dumps(row), flush=True)
                rows.append(row)
    stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    rows = [{**row, "date": stamp} for row in rows] + [r for r in kept if r["code"] != "this tree"]
    with open(HERE / "microbatch-smollm2-cpu.jsonl", "w") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")
    lines = [
        "# `score` peak memory and time against the micro-batch (SmolLM2-135M, NIRVANA, 32 x 128, fp32, CPU)",
        "",
        f"Measured {stamp} by `benchmarks/memory/microbatch.py`, one fresh process per row, nothing else running "
        f"({platform.machine()}, {os.cpu_count()} cores); rows of other revisions keep their own date (`date` in "
        "the .jsonl). Peak RSS is the whole process (weights 0.54 GB). `auto` is the default; `+ckpt` adds "
        "`--activation-checkpointing`; a micro-batch of 32 is one pass, which streams its gradients.",
        "",
        "| code | micro-batch | peak RSS (GB) | wall (s) | scoring (s) |",
        "|---|---|---:|---:|---:|",
    ]
    for r in rows:
        mb = f"auto ({r['chosen']})" if r["micro_batch"] == "auto" else str(r["micro_batch"])
        lines.append(f"| {r['code']} | {mb} | {r['peak_rss_gb']:.2f} | {r['wall_s']:.1f} | {r['scoring_s']:.1f} |")
    (HERE / "microbatch-smollm2-cpu.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
