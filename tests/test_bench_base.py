"""The benchmarks' shared base: picklable jobs, resume from the CSV, atomic rows, the committed CSVs.

No model runs here: a fake worker measures each job by writing its key back as a row.
"""

from __future__ import annotations

import dataclasses
import importlib
import pickle
import pkgutil
import shutil
from pathlib import Path

import pytest

import nirvana.bench
from nirvana.bench.accuracy import ACCURACY, AccuracyConfig, kl_best_gammas
from nirvana.bench.base import Benchmark, Measured, pending, run
from nirvana.bench.baselines import BASELINES, BaselinesConfig, best_gammas
from nirvana.bench.distill import DISTILL, DistillConfig
from nirvana.bench.gamma import GAMMA, GammaBenchConfig
from nirvana.bench.gpu import GPU, GpuBenchConfig
from nirvana.bench.quality import QUALITY
from nirvana.bench.quality_config import QualityConfig
from nirvana.bench.recovery import RECOVERY, RecoveryBenchConfig
from nirvana.bench.rows import number, read_rows, row_key, store_row, write_rows
from nirvana.bench.speed import SPEED, SpeedBenchConfig
from nirvana.errors import NirvanaError
from nirvana.search.calibration import AnchorSpec

ROOT = Path(__file__).resolve().parents[1]
PLAIN = (str, int, float, bool, type(None))

# Every benchmark with a default config and a small one (out_dir under tmp_path) for the resume tests.
DEFAULTS = {
    QUALITY: QualityConfig(),
    GAMMA: GammaBenchConfig(),
    SPEED: SpeedBenchConfig(),
    ACCURACY: AccuracyConfig(best_gamma={0.2: 8.0}),
    RECOVERY: RecoveryBenchConfig(),
    GPU: GpuBenchConfig(tiny=True),
    BASELINES: BaselinesConfig(best_gamma={0.2: 8.0, 0.5: 4.0}),
    DISTILL: DistillConfig(),
}


def small(bench: Benchmark, out: Path):
    return {
        QUALITY: QualityConfig(
            model="m", criteria=("nirvana", "magnitude"), sparsities=(0.5,), uniform_criteria=("nirvana",),
            select_criteria=("nirvana",), candidates=3, anchor=AnchorSpec(samples=4, seq_len=16), out_dir=out,
        ),
        ACCURACY: AccuracyConfig(model="m", sparsities=(0.2,), lambada_limit=5, out_dir=out),
        RECOVERY: RecoveryBenchConfig(model="m", acc_limit=0, out_dir=out),
        BASELINES: BaselinesConfig(model="m", sparsities=(0.2,), lambada_limit=5, out_dir=out),
        DISTILL: DistillConfig(model="m", budgets=(64, 128), acc_limit=0, out_dir=out),
    }[bench]  # fmt: skip


CSV_BENCHES = (QUALITY, ACCURACY, RECOVERY, BASELINES, DISTILL)
COMMITTED_BENCHES = (QUALITY, ACCURACY, RECOVERY, BASELINES, DISTILL)  # those with a committed CSV


def plain(value) -> bool:
    """Only plain values all the way down: what a job shipped to another process may hold."""
    if isinstance(value, PLAIN):
        return True
    if isinstance(value, tuple):
        return all(plain(v) for v in value)
    if dataclasses.is_dataclass(value):
        return value.__dataclass_params__.frozen and all(
            plain(getattr(value, f.name)) for f in dataclasses.fields(value)
        )
    return False


def test_every_benchmark_in_the_package_is_covered():
    found = set()
    for info in pkgutil.iter_modules(nirvana.bench.__path__):
        module = importlib.import_module(f"nirvana.bench.{info.name}")
        found |= {v for v in vars(module).values() if isinstance(v, Benchmark)}
    assert found == set(DEFAULTS)
    assert {b.name for b in found} == {
        "quality",
        "gamma",
        "speed",
        "accuracy",
        "recovery",
        "gpu",
        "baselines",
        "distill",
    }


@pytest.mark.parametrize("bench", DEFAULTS, ids=lambda b: b.name)
def test_jobs_are_plain_frozen_values_that_pickle_round_trip(bench):
    config = DEFAULTS[bench]
    jobs = bench.jobs(config)
    assert jobs and all(dataclasses.is_dataclass(j) and plain(j) for j in jobs), jobs[:3]
    assert pickle.loads(pickle.dumps(jobs)) == jobs
    assert len({bench.key(config, j) for j in jobs}) == len(jobs)  # one key per row
    assert pickle.loads(pickle.dumps(config)) == config  # the worker is built from the config alone
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(jobs[0], dataclasses.fields(jobs[0])[0].name, None)
    if bench.columns:
        assert set(bench.key_columns) <= set(bench.columns)


class FakeWorker:
    """Measures a job by writing its key back as a row; records what it ran."""

    def __init__(self, bench, config, ran: list, fail: set = frozenset()):
        self.bench, self.config, self.ran, self.fail = bench, config, ran, fail

    def run(self, job) -> Measured:
        self.ran.append(job)
        if job in self.fail:
            raise NirvanaError("out of memory (planted)")
        row = dict(zip(self.bench.key_columns, self.bench.key(self.config, job)))
        return Measured({**row, "machine": "fake", **self.extra()}, f"{job} measured")

    def extra(self) -> dict:
        return {"acc7_after": "40.0", "acc_limit": str(self.config.acc_limit)} if self.bench is RECOVERY else {}


def key_row(bench, config, job, **cells) -> dict:
    return {**dict(zip(bench.key_columns, bench.key(config, job))), "machine": "earlier run", **cells}


@pytest.mark.parametrize("bench", CSV_BENCHES, ids=lambda b: b.name)
def test_resume_skips_exactly_the_rows_in_the_csv(bench, tmp_path, monkeypatch):
    config = small(bench, tmp_path)
    jobs = bench.jobs(config)
    assert len(jobs) >= 4
    present = jobs[1::2]
    for job in present:
        store_row(bench.path(config), key_row(bench, config, job), bench.columns, bench.key_columns)
    before = bench.path(config).read_bytes()
    assert pending(bench, config) == [j for j in jobs if j not in present]

    ran: list = []
    monkeypatch.setattr(type(bench), "worker", lambda self, c, log: FakeWorker(bench, c, ran))
    monkeypatch.setattr(type(bench), "report", lambda self, rows, c: None)
    logs: list[str] = []
    rows = run(bench, config, logs.append)
    assert ran == [j for j in jobs if j not in present]
    assert f"{len(present)} already in" in logs[0] and f"{len(jobs) - len(present)} to run" in logs[0]
    on_disk = read_rows(bench.path(config))
    assert bench.path(config).read_bytes().startswith(before)  # the earlier rows untouched, the new ones after
    assert sorted(bench.key(config, j) for j in jobs) == sorted(tuple(r[k] for k in bench.key_columns) for r in on_disk)
    assert len(rows) == len(jobs)
    ran.clear()
    run(bench, config, logs.append)
    assert ran == []  # everything is there now


def test_an_incomplete_row_is_rerun_and_replaced_in_place(tmp_path, monkeypatch):
    config = dataclasses.replace(small(RECOVERY, tmp_path), acc_limit=5)
    jobs = RECOVERY.jobs(config)
    path = RECOVERY.path(config)
    for i, job in enumerate(jobs):  # every second row measured without acc7: incomplete at acc_limit 5
        cells = {"acc7_after": "41.0", "acc_limit": "5"} if i % 2 else {"ppl_wikitext2_after": "99"}
        store_row(path, key_row(RECOVERY, config, job, **cells), RECOVERY.columns, RECOVERY.key_columns)
    assert pending(RECOVERY, config) == jobs[0::2]
    ran: list = []
    monkeypatch.setattr(type(RECOVERY), "worker", lambda self, c, log: FakeWorker(RECOVERY, c, ran))
    monkeypatch.setattr(type(RECOVERY), "report", lambda self, rows, c: None)
    rows = run(RECOVERY, config, lambda m: None)
    assert ran == jobs[0::2]
    assert [r["criterion"] for r in rows] == [j.criterion for j in jobs]  # replaced where they were
    assert [r["machine"] for r in rows] == ["fake", "earlier run"] * (len(jobs) // 2) + ["fake"] * (len(jobs) % 2)
    assert all(r["acc7_after"] for r in rows) and pending(RECOVERY, config) == []


def test_a_declared_error_skips_one_job_and_the_grid_goes_on(tmp_path, monkeypatch):
    config = small(ACCURACY, tmp_path)
    jobs = ACCURACY.jobs(config)
    ran: list = []
    monkeypatch.setattr(type(ACCURACY), "worker", lambda self, c, log: FakeWorker(ACCURACY, c, ran, {jobs[1]}))
    reports = []
    monkeypatch.setattr(type(ACCURACY), "report", lambda self, rows, c: reports.append(len(rows)))
    logs: list[str] = []
    rows = run(ACCURACY, config, logs.append)
    assert ran == jobs and len(rows) == len(jobs) - 1
    assert any("skipped (NirvanaError: out of memory (planted))" in m for m in logs)
    assert reports == list(range(1, len(jobs)))  # the report rebuilt after every row written
    assert pending(ACCURACY, config) == [jobs[1]]


def test_side_files_are_written_before_the_row(tmp_path, monkeypatch):
    config = small(RECOVERY, tmp_path)
    seen = []

    class Worker:
        def run(self, job):
            seen.append((tmp_path / "curves").exists())
            row = dict(zip(RECOVERY.key_columns, RECOVERY.key(config, job)))
            return Measured(row, files={f"curves/{job.criterion}-{job.sparsity}.json": "{}"})

    monkeypatch.setattr(type(RECOVERY), "worker", lambda self, c, log: Worker())
    monkeypatch.setattr(type(RECOVERY), "report", lambda self, rows, c: None)
    run(RECOVERY, config, lambda m: None)
    assert seen[0] is False and len(list((tmp_path / "curves").iterdir())) == len(
        {(j.criterion, j.sparsity) for j in RECOVERY.jobs(config)}
    )


def test_a_row_that_stops_early_is_not_written(tmp_path, monkeypatch):
    config = small(RECOVERY, tmp_path)

    class Worker:
        def run(self, job):
            return Measured(None, "stopped: loss is not finite; row not written")

    monkeypatch.setattr(type(RECOVERY), "worker", lambda self, c, log: Worker())
    logs: list[str] = []
    assert run(RECOVERY, config, logs.append) == []
    assert not RECOVERY.path(config).exists() and any("row not written" in m for m in logs)


def test_store_row_rewrites_a_file_read_back_byte_for_byte(tmp_path):
    committed = ROOT / "benchmarks" / "accuracy" / "accuracy-smollm2-135m.csv"
    # the committed file under the current header (a CSV older than a column gains it, its rows kept)
    src = tmp_path / "src.csv"
    write_rows(src, read_rows(committed), ACCURACY.columns)
    old = read_rows(committed)
    assert [{k: r[k] for k in old[0]} for r in read_rows(src)] == old
    path = tmp_path / committed.name
    shutil.copy(src, path)
    rows = read_rows(path)
    store_row(path, rows[3], ACCURACY.columns, ACCURACY.key_columns)  # the same row in its own place
    assert path.read_bytes() == src.read_bytes()


def test_a_cell_reads_as_a_number_or_as_not_measured():
    assert number("20.67") == 20.67 and number("0") == 0.0 and number(3) == 3.0 and number("1e-5") == 1e-5
    # empty, missing, text and NaN all mean the row did not measure it: None, never NaN that sorts anywhere
    for cell in ("", None, "-", "n/a", "nan", float("nan")):
        assert number(cell) is None
    assert number("inf") == float("inf")


BENCH_DIR = ROOT / "benchmarks"
COMMITTED = {  # bench -> (its CLI-default config in a folder, the committed CSV)
    QUALITY.name: lambda out: (QualityConfig(out_dir=out), BENCH_DIR / "quality" / "quality-smollm2-135m.csv"),
    ACCURACY.name: lambda out: (
        AccuracyConfig(out_dir=out, best_gamma=kl_best_gammas("smollm2-135m"), allow_code_execution=True),
        BENCH_DIR / "accuracy" / "accuracy-smollm2-135m.csv",
    ),
    # the committed grid has its MBPP pass@1 rows (run with --allow-code-execution) and is being extended by the
    # reconstructed models (--reconstruct-sparsities 0.2,0.5)
    BASELINES.name: lambda out: (
        BaselinesConfig(
            out_dir=out,
            best_gamma=best_gammas("smollm2-135m", (0.2, 0.5)),
            allow_code_execution=True,
            reconstruct_sparsities=(0.2, 0.5),
        ),
        BENCH_DIR / "baselines" / "baselines-smollm2-135m.csv",
    ),
    RECOVERY.name: lambda out: (RecoveryBenchConfig(out_dir=out), BENCH_DIR / "recovery" / "recovery.csv"),
    DISTILL.name: lambda out: (DistillConfig(out_dir=out), BENCH_DIR / "distill" / "distill-smollm2-135m.csv"),
}


def _committed(bench, tmp_path):
    return COMMITTED[bench.name](tmp_path)


@pytest.mark.parametrize("bench", COMMITTED_BENCHES, ids=lambda b: b.name)
def test_the_committed_csvs_resume_without_rerunning_anything(bench, tmp_path, monkeypatch):
    """A copy of each committed CSV, with the CLI's default settings: every committed row is found and
    none is re-run; a grid still being filled in (rows yet to measure) is checked up to that point."""
    config, src = _committed(bench, tmp_path)
    shutil.copy(src, bench.path(config))
    committed = {row_key(r, bench.key_columns) for r in read_rows(src)}
    todo = pending(bench, config)
    assert not [j for j in todo if tuple(bench.key(config, j)) in committed]
    assert len(todo) == len(bench.jobs(config)) - len(committed)  # every committed row is one of the grid's
    if todo:
        return
    monkeypatch.setattr(type(bench), "worker", lambda *a: pytest.fail("nothing should be re-run"))
    logs: list[str] = []
    rows = run(bench, config, logs.append)
    n = len(bench.jobs(config))
    assert logs == [f"{n} rows in the grid, {n} already in {bench.path(config)}, 0 to run"]
    assert len(rows) == n == len(read_rows(src)) and bench.path(config).read_bytes() == src.read_bytes()
