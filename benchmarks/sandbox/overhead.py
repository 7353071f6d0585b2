"""Per-program overhead of the sandbox: this tree's against an earlier revision's, interleaved.

    PYTHONPATH=. .venv/bin/python benchmarks/sandbox/overhead.py [--before REV]

Checks out `nirvana/` of REV (default: 8ac2ab1, the first bubblewrap sandbox, before issue 41) into
a temporary folder and starts one worker process per tree. Each worker times the same trivial
problem (`def f(): return 1`, test `assert f() == 1`) through its tree's `run_tests` on request;
the two are asked in turn, 50 times each, so both see the same load. Writes
benchmarks/sandbox/overhead.json: median, quartiles, the isolation line of each and the machine's
load average while it ran.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tarfile
import tempfile
from datetime import UTC, datetime
from io import BytesIO
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
N = 50
WORKER = r"""
import sys, time
sys.path.insert(0, sys.argv[1])
from nirvana.accuracy.sandbox import isolation_line, run_tests
print(isolation_line(), flush=True)
for _ in sys.stdin:
    start = time.perf_counter()
    assert run_tests("def f():\n    return 1\n", "assert f() == 1\n").passed
    print(time.perf_counter() - start, flush=True)
"""


class Worker:
    def __init__(self, tree: Path):
        env = {**os.environ, "PYTHONPATH": str(tree)}
        self.proc = subprocess.Popen(
            [sys.executable, "-c", WORKER, str(tree)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
        )
        self.line = self.proc.stdout.readline().strip()

    def time_one(self) -> float:
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()
        return float(self.proc.stdout.readline())

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


def checkout(rev: str, into: Path) -> str:
    """`nirvana/` of `rev` under `into`; the full commit id."""
    commit = subprocess.run(["git", "rev-parse", rev], cwd=ROOT, capture_output=True, text=True, check=True)
    data = subprocess.run(["git", "archive", rev, "nirvana"], cwd=ROOT, capture_output=True, check=True).stdout
    with tarfile.open(fileobj=BytesIO(data)) as tar:
        tar.extractall(into, filter="data")
    return commit.stdout.strip()


def summary(xs: list[float]) -> dict:
    q = statistics.quantiles(xs, n=4)
    return {"median_s": round(statistics.median(xs), 4), "q1_s": round(q[0], 4), "q3_s": round(q[2], 4)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", default="8ac2ab1", help="the revision to compare with (default: %(default)s)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="nirvana-overhead-") as tmp:
        commit = checkout(args.before, Path(tmp))
        workers = {"before": Worker(Path(tmp)), "after": Worker(ROOT)}
        times: dict[str, list[float]] = {name: [] for name in workers}
        for w in workers.values():
            w.time_one()  # warm: each worker's probe is cached per process
        load_start = os.getloadavg()
        for _ in range(N):
            for name, w in workers.items():
                times[name].append(w.time_one())
        load_end = os.getloadavg()
        for w in workers.values():
            w.close()
    result = {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "programs_each": N,
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, Linux {platform.release()}, euid {os.geteuid()}",
        "load_average_start_end": [round(load_start[0], 2), round(load_end[0], 2)],
        "before": {"revision": commit[:12], "launcher": workers["before"].line, **summary(times["before"])},
        "after": {"revision": "this tree", "launcher": workers["after"].line, **summary(times["after"])},
    }
    result["overhead_median_s"] = round(result["after"]["median_s"] - result["before"]["median_s"], 4)
    (HERE / "overhead.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
