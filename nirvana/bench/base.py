"""One shape for every benchmark: a job list, a key per row, resume from the CSV, one writer, a report.

The shape comes from lm-evaluation-harness (a task is a small definition; the runner is shared)
and Ray Tune's `Tuner` (a trial is a plain, picklable configuration; the driver owns every write).
A benchmark is a `Benchmark` subclass that says, in a few small methods and class attributes:

- `jobs(config)`: what to measure, in priority order. Each job is a frozen dataclass of plain
  values (model reference, method settings, what to measure), never a closure, so a distributed
  runner can ship it to a worker as it is;
- `key(config, job)`: the job's row key, spelt as the CSV spells it (`key_columns`, as strings);
- `complete(row, config)`: whether a row already on disk needs no rerun (default: being there);
- `worker(config, log)`: what measures a job, `worker.run(job) -> Measured`. It holds what the
  jobs share (the loaded model, scores, the dense reference) and writes nothing;
- `columns` and `path(config)`: the CSV; `committed(config)`: its rows that belong to `config`;
  `report(rows, config)`: markdown and plots (after every row too when `report_each_row`);
  `result`: what `run` returns.

`run(bench, config)` does the rest: it skips the jobs whose complete row is on disk, measures the
others in order and writes each row (and its side files) atomically before the next job starts;
a row whose key is already there (an incomplete one) replaces it in place. Errors a benchmark
declares in `skip_errors` skip one job instead of ending the grid.

Benchmarks without a CSV (`columns = ()`) have nothing to resume: every job runs. Speed and gpu
are one job each (`WholeRun`: their models are timed together, repeats interleaved) and `run`
returns that job's document; gamma runs one job per criterion and `run_gamma_bench` gathers them.

Example:
    >>> from nirvana.bench.quality import QUALITY, QualityConfig
    >>> config = QualityConfig(sparsities=(0.2,))
    >>> rows = run(QUALITY, config)  # measures only the rows not yet in the CSV
    >>> md, text = QUALITY.report(rows, config)
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, ClassVar, Protocol

from nirvana.bench.rows import read_rows, row_key, store_row
from nirvana.cluster.ray_tasks import run_tasks
from nirvana.store.atomic import atomic_write_text

__all__ = ["Benchmark", "Measured", "WholeRun", "Worker", "pending", "progress_log", "row_key", "run", "store_row"]


@dataclass
class Measured:
    """What a worker returns for one job; the driver writes it."""

    row: dict | None  # None: nothing to write (the job stopped early; `message` says why)
    message: str = ""  # one log line about the job
    files: dict[str, str] = field(default_factory=dict)  # side files (path relative to the CSV's folder -> text)


class Worker(Protocol):
    def run(self, job) -> Measured: ...


class Benchmark:
    """A benchmark's definition (see the module docstring); `run` is its shared runner."""

    name: ClassVar[str] = ""
    columns: ClassVar[tuple[str, ...]] = ()  # the CSV's columns; () for a benchmark without a CSV
    key_columns: ClassVar[tuple[str, ...]] = ()  # the columns that identify a row
    skip_errors: ClassVar[tuple[type[BaseException], ...]] = ()  # errors that skip one job, not the grid
    report_each_row: ClassVar[bool] = False  # rebuild the report after every row written

    def jobs(self, config) -> list:
        raise NotImplementedError

    def key(self, config, job) -> tuple[str, ...]:
        raise NotImplementedError

    def label(self, job) -> str:
        """A job in a log line."""
        return str(job)

    def worker(self, config, log: Callable[[str], None]) -> Worker:
        raise NotImplementedError

    def path(self, config) -> Path:
        return Path(config.csv_path)

    def complete(self, row: dict, config) -> bool:
        return True

    def committed(self, config) -> list[dict]:
        """The rows already in the CSV that belong to `config` (what `--report-only` reports)."""
        return read_rows(self.path(config))

    def report(self, rows: list[dict], config) -> Any:
        return None

    def result(self, config, measured: list[dict]) -> Any:
        """What `run` returns: the committed rows (or, without a CSV, the rows measured now)."""
        return self.committed(config) if self.columns else measured


class WholeRun(Benchmark):
    """A benchmark measured in one job (its models timed together, interleaved): no CSV to resume,
    the job always runs, and `run` returns the document it measured."""

    def key(self, config, job) -> tuple[str, ...]:
        return (self.name,)

    def result(self, config, measured: list[dict]) -> dict:
        (document,) = measured
        return document


def progress_log(log: Callable[[str], None]) -> Callable[[float, str], None]:
    """A `progress(fraction, message)` callback that writes to `log`."""
    return lambda fraction, message: log(f"[{fraction:4.0%}] {message}")


def pending(bench: Benchmark, config, jobs: list | None = None) -> list:
    """The jobs without a complete row in the CSV (what a rerun still has to do), in order."""
    jobs = bench.jobs(config) if jobs is None else jobs
    if not bench.columns:
        return list(jobs)
    rows = read_rows(bench.path(config))
    done = {row_key(r, bench.key_columns) for r in rows if bench.complete(r, config)}
    return [j for j in jobs if bench.key(config, j) not in done]


def run(bench: Benchmark, config, log: Callable[[str], None] = print, progress=None, cluster=None):
    """Run (or resume) `bench` on `config`: measure the pending jobs, write each row as it finishes,
    and return `bench.result(config, rows measured now)`.

    `cluster` (a `nirvana.cluster.ray_tasks.Cluster`): each job is a Ray task there instead of a call
    in this process; this process still writes every row, in job order (`_run_on_cluster`)."""
    jobs = bench.jobs(config)
    todo = pending(bench, config, jobs)
    if bench.columns:
        done = len(jobs) - len(todo)
        log(f"{len(jobs)} rows in the grid, {done} already in {bench.path(config)}, {len(todo)} to run")
    measured: list[dict] = []
    if not todo:
        return bench.result(config, measured)
    if cluster is not None:
        _run_on_cluster(bench, config, todo, cluster, log, progress, measured)
        return bench.result(config, measured)
    worker = bench.worker(config, log)
    start = time.perf_counter()
    for i, job in enumerate(todo):
        step = f"[{i + 1}/{len(todo)}]"
        try:
            out = worker.run(job)
        except bench.skip_errors as exc:
            log(f"{step} {bench.label(job)}: skipped ({type(exc).__name__}: {str(exc)[:200]})")
            continue
        _keep(bench, config, out, measured)
        log(f"{step} {out.message or bench.label(job)} ({(time.perf_counter() - start) / 60:.1f} min so far)")
        if progress:
            progress((i + 1) / len(todo), bench.label(job))
    return bench.result(config, measured)


def make_worker(bench: Benchmark, config):
    """A benchmark's worker inside a Ray worker process (`run_tasks`' factory: a plain picklable call)."""
    return bench.worker(config, lambda message: print(message, flush=True))


def _run_on_cluster(bench: Benchmark, config, todo: list, cluster, log, progress, measured: list[dict]) -> None:
    """The pending jobs as Ray tasks. Results arrive in any order; rows are written in job order (a
    finished row waits for the rows before it), so the CSV is the one an in-process run writes. A job
    whose worker died past Ray's retries is reported failed and the grid goes on; on Ctrl-C (or an
    error a job raised that the benchmark does not skip) the running tasks are cancelled and every
    finished row is written before the exception goes on."""
    log(f"on the {cluster.describe()}")
    start = time.perf_counter()
    results: dict[int, Measured | None] = {}  # job index -> what to write (None: skipped or failed)
    written, failed = 0, []
    try:
        for n, done in enumerate(
            run_tasks(cluster, partial(make_worker, bench, config), todo, label=bench.label, log=log)
        ):
            step = f"[{n + 1}/{len(todo)}]"
            results[done.index] = None
            if done.crashed:
                failed.append(done.job)
                log(f"{step} {bench.label(done.job)}: FAILED, its worker died on every try ({str(done.error)[:200]})")
            elif done.error is not None and not isinstance(done.error, bench.skip_errors):
                raise done.error
            elif done.error is not None:
                log(f"{step} {bench.label(done.job)}: skipped ({type(done.error).__name__}: {str(done.error)[:200]})")
            else:
                results[done.index] = done.value
                message = done.value.message or bench.label(done.job)
                log(f"{step} {message} on {done.where} ({(time.perf_counter() - start) / 60:.1f} min so far)")
            while written in results:  # the next rows in job order, as far as they are finished
                if results[written] is not None:
                    _keep(bench, config, results[written], measured)
                written += 1
            if progress:
                progress((n + 1) / len(todo), bench.label(done.job))
    finally:
        for index in sorted(i for i in results if i >= written and results[i] is not None):
            _keep(bench, config, results[index], measured)  # stopped early: the finished rows still count
    if failed:
        log(
            f"{len(failed)} row(s) failed (worker died past the retries), not written: rerun to measure them: "
            + "; ".join(bench.label(j) for j in failed)
        )


def _keep(bench: Benchmark, config, out: Measured, measured: list[dict]) -> None:
    if out.row is not None:
        if bench.columns:
            _write(bench, config, out)
        measured.append(out.row)


def _write(bench: Benchmark, config, out: Measured) -> None:
    """Side files first, then the row: a row on disk means everything it refers to is there too."""
    path = bench.path(config)
    for name, text in out.files.items():
        atomic_write_text(path.parent / name, text)
    store_row(path, out.row, bench.columns, bench.key_columns)
    if bench.report_each_row:
        bench.report(read_rows(path), config)
