"""A benchmark for the Ray tests whose worker a test can kill mid-row, or that always dies.

Imported by the Ray workers (as `tests.ray_bench`, through the driver's path): it needs no model.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

from nirvana.bench.base import Benchmark, Measured
from nirvana.bench.rows import read_rows


@dataclass(frozen=True)
class MarkJob:
    name: str
    # "plain" | "victim" (hangs on its first try until killed) | "doomed" (its worker always dies) | "slow" (30 s)
    kind: str = "plain"


@dataclass
class MarkConfig:
    out_dir: Path
    names: tuple[tuple[str, str], ...]

    @property
    def csv_path(self) -> Path:
        return Path(self.out_dir) / "marks.csv"


class MarkBench(Benchmark):
    name = "marks"
    columns = ("name", "kind", "pid")
    key_columns = ("name",)

    def jobs(self, config: MarkConfig) -> list[MarkJob]:
        return [MarkJob(n, k) for n, k in config.names]

    def key(self, config, job: MarkJob) -> tuple[str, ...]:
        return (job.name,)

    def label(self, job: MarkJob) -> str:
        return job.name

    def worker(self, config: MarkConfig, log):
        return MarkWorker(config)

    def committed(self, config: MarkConfig) -> list[dict]:
        return read_rows(config.csv_path)


MARKS = MarkBench()


class MarkWorker:
    def __init__(self, config: MarkConfig):
        self.folder = Path(config.out_dir) / "started"
        self.folder.mkdir(parents=True, exist_ok=True)

    def run(self, job: MarkJob) -> Measured:
        tries = list(self.folder.glob(f"{job.name}.*"))
        (self.folder / f"{job.name}.{os.getpid()}").write_text("")  # the test reads the PID from the name
        if job.kind == "doomed":
            os._exit(1)
        if job.kind == "victim" and not tries:
            time.sleep(120)  # killed by the test long before
        time.sleep(30 if job.kind == "slow" else 0.2)
        return Measured({"name": job.name, "kind": job.kind, "pid": os.getpid()}, f"{job.name} done")
