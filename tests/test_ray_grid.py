"""Grids on a real local Ray cluster (started here on 127.0.0.1, stopped at the end): the same CSV
as in-process, a worker killed mid-row, a worker that always dies, an unreachable address."""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch

import nirvana.bench.quality as q
from nirvana.bench.base import run
from nirvana.bench.rows import read_rows
from nirvana.checkpoints.loading import load_model
from nirvana.cluster.ray_tasks import ENV, connect, disconnect, ray_address
from nirvana.errors import InvalidInput
from nirvana.pruning.allocation import Allocation
from nirvana.scoring.criteria import compute_scores
from nirvana.search.calibration import AnchorSpec
from nirvana.search.sweep import SweepSettings, run_sweep
from tests.ray_bench import MARKS, MarkConfig
from tests.ray_cluster import free_port, local_cluster

ROOT = Path(__file__).resolve().parents[1]
TIMING = ("seconds", "finished_utc")  # the only cells that differ between two runs of one row


@pytest.fixture(scope="module")
def cluster_address():
    with local_cluster(num_cpus=2) as address:
        yield address


@pytest.fixture
def cluster(cluster_address):
    connected = connect(cluster_address)
    try:
        yield connected
    finally:
        disconnect()


def test_the_address_comes_from_the_flag_else_the_environment(monkeypatch):
    monkeypatch.delenv(ENV, raising=False)
    assert ray_address(None) is None and ray_address("") is None
    monkeypatch.setenv(ENV, "10.0.0.1:6379")
    assert ray_address(None) == "10.0.0.1:6379" and ray_address("auto") == "auto"


def test_a_tiny_quality_grid_on_the_cluster_equals_the_in_process_grid(
    cluster, tiny_with_tokenizer_dir, tmp_path, monkeypatch
):
    config = q.QualityConfig(
        model=str(tiny_with_tokenizer_dir), criteria=("nirvana", "magnitude"), sparsities=(0.5,),
        uniform_criteria=("nirvana",), select_criteria=("nirvana",), candidates=2, tokens=128, window=32,
        samples=2, seq_len=32, anchor=AnchorSpec(samples=4, seq_len=16), out_dir=tmp_path / "local",
    )  # fmt: skip
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as a Ray task with one CPU: the same float sums
    try:
        local = run(q.QUALITY, config, log=lambda m: None)
    finally:
        torch.set_num_threads(threads)
    assert cluster.workers == 2 and cluster.nodes == 1 and "2 workers (1 CPU each)" in cluster.describe()
    monkeypatch.setenv("NIRVANA_CACHE_DIR", str(tmp_path / "cluster-cache"))  # the workers score afresh
    disconnect()
    cluster = connect(cluster.address)  # the workers get the new cache folder
    far = dataclasses.replace(config, out_dir=tmp_path / "cluster")
    logs: list[str] = []
    remote = run(q.QUALITY, far, log=logs.append, cluster=cluster)
    assert len(remote) == len(local) == 5
    strip = [[{k: v for k, v in r.items() if k not in TIMING} for r in rows] for rows in (local, remote)]
    assert strip[0] == strip[1]  # row for row, in the same order, the same values
    assert (tmp_path / "cluster-cache" / "scores").is_dir()  # the workers computed and cached the scores
    assert any(m.startswith("[5/5]") for m in logs) and any("running on" in m for m in logs)
    pids = {m.rsplit(" on ", 1)[1].split(" (")[0] for m in logs if m.startswith("[")}
    assert len(pids) >= 1 and all(":" in p for p in pids)


def test_a_sweep_on_the_cluster_equals_the_in_process_sweep_and_fills_in_as_points_arrive(
    cluster, tiny_with_tokenizer_dir
):
    lm = load_model(str(tiny_with_tokenizer_dir), dtype="float32", device="cpu")
    scores = compute_scores(lm.model, "magnitude")
    settings = SweepSettings(
        sparsities=(0.2, 0.5), gammas=(1.0,), allocation=Allocation(0.5), metric="perplexity", tokens=64,
        window=32, speed=False,
    )  # fmt: skip
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        local = run_sweep(lm, scores, settings)
    finally:
        torch.set_num_threads(threads)
    seen: list[int] = []
    remote = run_sweep(lm, scores, settings, cluster=cluster, on_row=lambda rows: seen.append(len(rows)))
    assert remote == local and len(local) == 4
    assert seen == [1, 2, 3, 4]  # the table grows by one row per point that arrives


def _kill_when_started(folder: Path, name: str, killed: list) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        started = list(folder.glob(f"{name}.*")) if folder.exists() else []
        if started:
            pid = int(started[0].suffix[1:])
            time.sleep(0.5)  # well inside the row
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
            return
        time.sleep(0.1)


def test_a_worker_killed_mid_row_is_retried_and_a_dying_one_fails_alone(cluster, tmp_path):
    kinds = (("a", "plain"), ("victim", "victim"), ("b", "plain"), ("doomed", "doomed"), ("c", "plain"))
    config = MarkConfig(tmp_path, kinds)
    killed: list[int] = []
    killer = threading.Thread(target=_kill_when_started, args=(tmp_path / "started", "victim", killed))
    killer.start()
    logs: list[str] = []
    rows = run(MARKS, config, logs.append, cluster=dataclasses.replace(cluster, max_retries=1))
    killer.join()
    assert killed, "the victim row never started"
    names = [r["name"] for r in read_rows(config.csv_path)]
    assert names == ["a", "victim", "b", "c"] == [r["name"] for r in rows]  # every row once, in job order
    victim = next(r for r in rows if r["name"] == "victim")
    assert int(victim["pid"]) != killed[0]  # measured again by another worker process
    assert len(list((tmp_path / "started").glob("doomed.*"))) == 2  # its first try and one retry
    assert any("doomed: FAILED, its worker died on every try" in m for m in logs)
    assert any("1 row(s) failed" in m and "doomed" in m for m in logs)


def test_ctrl_c_cancels_the_running_tasks_and_keeps_the_finished_rows(cluster, tmp_path):
    config = MarkConfig(tmp_path, (("a", "plain"), ("slow", "slow"), ("b", "plain"), ("c", "plain")))

    def log(message: str) -> None:
        if message.startswith("[2/"):  # two rows done (a and b), slow still running: the user presses Ctrl-C
            raise KeyboardInterrupt

    start = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        run(MARKS, config, log, cluster=cluster)
    assert time.monotonic() - start < 25  # the 30 s row was cancelled, not waited for
    assert [r["name"] for r in read_rows(config.csv_path)] == ["a", "b"]  # finished rows kept (b past the gap)
    ran: list[str] = []
    quick = dataclasses.replace(config, names=tuple((n, "plain") for n, _ in config.names))
    rows = run(MARKS, quick, ran.append, cluster=cluster)
    assert "4 rows in the grid, 2 already in" in ran[0] and {r["name"] for r in rows} == {"a", "slow", "b", "c"}


def test_import_nirvana_needs_no_ray():
    code = "import sys, nirvana, nirvana.cli, nirvana.bench.base, nirvana.search.sweep; print('ray' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip() == "False"


def test_an_unreachable_address_fails_fast_naming_it_and_how_to_start_one(tmp_path):
    address = f"127.0.0.1:{free_port()}"
    start = time.monotonic()
    with pytest.raises(InvalidInput, match="ray start --head") as err:
        connect(address)
    assert address in str(err.value) and time.monotonic() - start < 10


def test_a_cluster_that_refuses_us_fails_fast_and_says_why(cluster_address):
    code = "import sys; from nirvana.cluster.ray_tasks import connect; connect(sys.argv[1])"
    env = {**os.environ, "RAY_AUTH_TOKEN": "0" * 64}  # not the head's token (a process keeps the first it reads)
    start = time.monotonic()
    result = subprocess.run([sys.executable, "-c", code, cluster_address], capture_output=True, text=True, env=env)
    assert result.returncode != 0 and "could not join it" in result.stderr and "RAY_AUTH_TOKEN" in result.stderr
    assert cluster_address in result.stderr
    assert time.monotonic() - start < 40  # Python and torch imports included; the connect gives up after 5 s


def test_the_cli_refuses_an_unreachable_address_with_exit_2_and_writes_nothing(tmp_path):
    address = f"127.0.0.1:{free_port()}"
    start = time.monotonic()
    env = {**os.environ, ENV: address, "OMP_NUM_THREADS": "1"}
    out = tmp_path / "out"
    result = subprocess.run(
        [sys.executable, "-m", "nirvana", "bench", "quality", "--model", "smollm2-135m", "--out-dir", str(out)],
        capture_output=True, text=True, env=env, cwd=ROOT, timeout=120,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    assert address in result.stderr and "ray start --head" in result.stderr
    assert time.monotonic() - start < 60  # Python and torch imports included; the connect itself is < 10 s
    assert not out.exists()


def test_the_scale_benchmarks_local_instance_is_its_own_even_beside_a_running_cluster(cluster_address, monkeypatch):
    """`start_local` (bench scale) starts a new instance of its size; a plain ray.init() would join the
    cluster a user's `ray start` runs (found via RAY_ADDRESS or /tmp/ray) and refuse num_cpus there."""
    import ray

    from nirvana.cluster.ray_tasks import start_local

    monkeypatch.setenv("RAY_ADDRESS", cluster_address)
    try:
        start_local(1)
        assert ray.cluster_resources().get("CPU") == 1  # not the 2-CPU cluster of the fixture
    finally:
        disconnect()
