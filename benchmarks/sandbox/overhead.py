"""Per-program overhead of the sandbox launcher: the new one (two bubblewrap sandboxes) vs the one before.

    PYTHONPATH=. .venv/bin/python benchmarks/sandbox/overhead.py

Runs the same trivial problem (`def f(): return 1`, test `assert f() == 1`) 50 times through each
launcher, interleaved, and writes benchmarks/sandbox/overhead.json: median, quartiles and the
machine's load average while it ran.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE)]

import audit_hook_launcher as old  # noqa: E402

from nirvana.accuracy.sandbox import isolation_line, run_tests  # noqa: E402

CODE, TESTS, N = "def f():\n    return 1\n", "assert f() == 1\n", 50


def timed(call) -> float:
    start = time.perf_counter()
    assert call().passed
    return time.perf_counter() - start


def summary(xs: list[float]) -> dict:
    q = statistics.quantiles(xs, n=4)
    return {"median_s": round(statistics.median(xs), 4), "q1_s": round(q[0], 4), "q3_s": round(q[2], 4)}


def main() -> None:
    timed(lambda: old.run_program(CODE + TESTS))  # warm both (the probes are cached per process)
    timed(lambda: run_tests(CODE, TESTS))
    before, after = [], []
    load_start = os.getloadavg()
    for _ in range(N):
        before.append(timed(lambda: old.run_program(CODE + TESTS)))
        after.append(timed(lambda: run_tests(CODE, TESTS)))
    result = {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "programs_each": N,
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, Linux {platform.release()}",
        "load_average_start_end": [load_start[0], os.getloadavg()[0]],
        "before": {"launcher": "audit-hook launcher (main b67f179): python -I, unshare --net", **summary(before)},
        "after": {"launcher": isolation_line(), **summary(after)},
    }
    result["overhead_median_s"] = round(result["after"]["median_s"] - result["before"]["median_s"], 4)
    (HERE / "overhead.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
