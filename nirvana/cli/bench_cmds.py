"""`bench <benchmark>`: benchmarks that write committed tables and plots under `benchmarks/`.

Each module in BENCH_MODULES has `register(bench_subparsers)` and adds one sub-subcommand.
"""

from __future__ import annotations

import importlib

BENCH_MODULES = (
    "nirvana.bench.speed",
    "nirvana.bench.gpu",
    "nirvana.bench.quality",
    "nirvana.bench.gamma",
    "nirvana.bench.accuracy",
)


def register(sub) -> None:
    p = sub.add_parser("bench", help="run a benchmark and write its table and plot under benchmarks/")
    bench_sub = p.add_subparsers(dest="benchmark", metavar="BENCHMARK", required=True)
    for name in BENCH_MODULES:
        importlib.import_module(name).register(bench_sub)
