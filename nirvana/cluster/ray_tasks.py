"""A grid's jobs as Ray tasks: connect to a cluster, run each job where there is room, hand back results.

The engine is Ray core's (`@ray.remote`, `ray.wait`, `max_retries`): nothing here schedules,
retries or restarts anything by hand. What this module adds is the shape every grid shares:

- `ray_address(flag)`: `--ray auto|ADDRESS`, else `NIRVANA_RAY_ADDRESS`, else None (in-process);
- `connect(address)`: join the cluster within 10 s or fail with a message that names the address
  and says how to start one; the driver's `NIRVANA_*`/`HF_*` settings and its copy of `nirvana`
  go to the workers, so they read the same data and share one score cache;
- `run_tasks(cluster, factory, jobs)`: one task per job, at most `cluster.workers` at once (so
  what is running is what the log says is running, and Ctrl-C has only those to cancel). A task
  builds its worker with `factory()` once per worker process and per grid (`_run_one` keeps it:
  Ray reuses a driver's worker processes, so the loaded model serves every row that lands there)
  and returns `worker.run(job)`. Results come back as they finish, as `Done` records; the caller
  puts them back in job order.

A worker process that dies mid-job (killed, out of memory) is retried by Ray (`max_retries`);
past the retries the job comes back with `error` set and the other jobs go on.

Ray is imported inside the functions that use it: `import nirvana` never needs Ray installed.
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nirvana.errors import InvalidInput

ENV = "NIRVANA_RAY_ADDRESS"
CONNECT_TIMEOUT = 10.0  # seconds: an unreachable address fails within this
MAX_RETRIES = 2  # retries of a job whose worker process died
HOW_TO_START = (
    "start one with `ray start --head --port 6379` on this machine (and `ray start --address HEAD:6379` on the "
    "others), then pass --ray auto or --ray HEAD:6379 (docs/SCALE.md); leave --ray out to run in this process."
)
# Environment the workers need to read the same data, cache and offline settings as the driver.
FORWARDED_ENV = ("NIRVANA_", "HF_", "TOKENIZERS_PARALLELISM", "TRANSFORMERS_")


def ray_address(flag: str | None = None) -> str | None:
    """The cluster to run on: the `--ray` flag, else `NIRVANA_RAY_ADDRESS`, else None (run in-process)."""
    value = (flag if flag is not None else os.environ.get(ENV, "")).strip()
    return value or None


@dataclass(frozen=True)
class Cluster:
    """A connected Ray cluster and the share of it one job takes."""

    address: str
    nodes: int
    workers: int  # jobs that run at once: the cluster's CPUs (or GPUs) over one job's share
    cpus_per_task: float
    gpus_per_task: float
    max_retries: int = MAX_RETRIES  # Ray's retries of a job whose worker process died

    def describe(self) -> str:
        share = f"{self.gpus_per_task:g} GPU" if self.gpus_per_task else f"{self.cpus_per_task:g} CPU"
        nodes = f"{self.nodes} node{'s' if self.nodes != 1 else ''}"
        workers = f"{self.workers} worker{'s' if self.workers != 1 else ''}"
        return f"Ray cluster at {self.address}: {nodes}, {workers} ({share} each)"


@dataclass
class Done:
    """One finished job: its place in the job list, and what its worker returned (or why it failed)."""

    index: int
    job: Any
    value: Any = None
    error: BaseException | None = None  # the job's own exception, or the worker's death past the retries
    where: str = ""  # host:pid of the worker process that ran it
    crashed: bool = False  # the worker process died (every retry), as opposed to the job raising


def _reachable(address: str, timeout: float) -> bool:
    """Whether something listens at host:port (a quick check before Ray's own, much longer, connect wait)."""
    host, _, port = address.removeprefix("ray://").rpartition(":")
    try:
        with socket.create_connection((host or "127.0.0.1", int(port)), timeout=timeout):
            return True
    except (OSError, ValueError):
        return False


def _unreachable(address: str, why: str = "") -> InvalidInput:
    return InvalidInput(f"no Ray cluster answers at {address!r}{f' ({why})' if why else ''}; {HOW_TO_START}")


def _refused(address: str, why: str) -> InvalidInput:
    return InvalidInput(
        f"something listens at {address!r} but Ray could not join it ({why}). If the cluster uses token "
        "authentication (Ray's default once ~/.ray/auth_token exists), give this process the head's token: "
        "RAY_AUTH_MODE=token and RAY_AUTH_TOKEN, or the same ~/.ray/auth_token; docs/SCALE.md."
    )


def connect(address: str, *, cpus_per_task: float = 1.0, gpus_per_task: float | None = None) -> Cluster:
    """Join the Ray cluster at `address` ("auto": the one started on this machine) within 10 s.

    `gpus_per_task` None: one GPU per job on a cluster with GPUs, none otherwise.
    Raises `InvalidInput` naming the address (and how to start a cluster) when nobody answers.
    """
    # here, not at the top: Ray is needed only for --ray; `import nirvana` must not need it
    import ray

    if ray.is_initialized():
        ray.shutdown()
    resolved = address
    if address == "auto":
        try:
            resolved = ray._private.services.canonicalize_bootstrap_address_or_die("auto")
        except (ConnectionError, RuntimeError, ValueError) as exc:
            raise _unreachable(address, "no cluster was started on this machine") from exc
    if not _reachable(resolved, CONNECT_TIMEOUT / 2):
        raise _unreachable(address if address == resolved else f"{address} = {resolved}")
    # `ray start --head` turns token authentication on when ~/.ray/auth_token exists and RAY_AUTH_MODE is
    # unset; a joining `ray.init` does not (Ray 2.60), so it would be refused: decide as `ray start` does.
    with contextlib.suppress(ImportError):
        from ray._private.authentication.authentication_token_setup import (
            maybe_enable_token_auth_if_token_available,
        )

        maybe_enable_token_auth_if_token_available(warn_if_disabled=False)
    # Ray retries a GCS that does not let it in (wrong token, wrong version) once a second, 20 times by default.
    os.environ.setdefault("RAY_gcs_server_port_wait_time_s", str(int(CONNECT_TIMEOUT // 2)))
    try:
        ray.init(address=resolved, runtime_env={"env_vars": _worker_env()}, logging_level="ERROR")
    except (ConnectionError, RuntimeError, TimeoutError) as exc:
        raise _refused(address, str(exc)[:200]) from exc
    resources = ray.cluster_resources()
    gpus = resources.get("GPU", 0.0)
    share = (1.0 if gpus else 0.0) if gpus_per_task is None else gpus_per_task
    slots = int(gpus // share) if share else int(resources.get("CPU", 1.0) // cpus_per_task)
    nodes = sum(1 for n in ray.nodes() if n.get("Alive"))
    return Cluster(resolved, nodes, max(1, slots), cpus_per_task, share)


def _worker_env() -> dict:
    """The driver's settings the workers need, and its copy of nirvana first on their path."""
    env = {k: v for k, v in os.environ.items() if k.startswith(FORWARDED_ENV)}
    # The workers run the driver's copy of nirvana (the same code on one machine or a shared filesystem).
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(Path(__file__).resolve().parents[2]), env.get("PYTHONPATH")]))
    return env


def start_local(num_cpus: int) -> Cluster:
    """Start a Ray instance inside this process with `num_cpus` one-CPU workers (the scale benchmark's
    one- and two-worker clusters); `disconnect()` ends it and its worker processes."""
    # here, not at the top: Ray is needed only for --ray; `import nirvana` must not need it
    import ray

    if ray.is_initialized():
        ray.shutdown()
    # address="local": a new instance even when `ray start` runs a cluster on this machine (ray.init would
    # join that one, and refuse num_cpus there)
    ray.init(
        address="local", num_cpus=num_cpus, num_gpus=0, include_dashboard=False,
        runtime_env={"env_vars": _worker_env()},
        logging_level="ERROR", object_store_memory=200_000_000,
    )  # fmt: skip
    return Cluster("local", 1, num_cpus, 1.0, 0.0)


def disconnect() -> None:
    """Leave the cluster (it keeps running; `ray stop` on its nodes ends it)."""
    # here, not at the top: Ray is needed only for --ray; `import nirvana` must not need it
    import ray

    if ray.is_initialized():
        ray.shutdown()


_WORKER: dict[str, Any] = {}  # in a worker process: grid key -> the worker built by its factory (one grid at a time)


def _run_one(key: str, factory: Callable[[], Any], job) -> tuple[Any, str]:
    """Inside a Ray worker process: build the grid's worker once (it holds the model), run one job."""
    if key not in _WORKER:
        _WORKER.clear()  # another grid's model goes before this one's loads
        _WORKER[key] = factory()
    return _WORKER[key].run(job), f"{socket.gethostname()}:{os.getpid()}"


def run_tasks(
    cluster: Cluster,
    factory: Callable[[], Any],
    jobs: Sequence,
    *,
    label: Callable[[Any], str] = str,
    log: Callable[[str], None] = print,
) -> Iterator[Done]:
    """Run `factory().run(job)` for every job as a Ray task; yield a `Done` per job as each finishes.

    `factory` is a plain picklable callable (a module-level function or a `functools.partial` of one):
    it is shipped once, through the object store. Closing the iterator (Ctrl-C, an error in the
    caller) cancels the jobs still running or queued; the finished ones were already yielded.
    """
    # here, not at the top: Ray is needed only for --ray; `import nirvana` must not need it
    import ray
    from ray.exceptions import RayTaskError

    remote = ray.remote(_run_one).options(
        num_cpus=cluster.cpus_per_task, num_gpus=cluster.gpus_per_task, max_retries=cluster.max_retries
    )
    shipped = ray.put(factory)
    key = f"{shipped.hex()}-{time.time_ns()}"
    queue = list(enumerate(jobs))
    running: dict = {}  # ObjectRef -> (index, job)
    try:
        while queue or running:
            while queue and len(running) < cluster.workers:
                index, job = queue.pop(0)
                running[remote.remote(key, shipped, job)] = (index, job)
            log(f"running on {cluster.address}: " + "; ".join(label(j) for _, j in running.values()))
            (ref,), _ = ray.wait(list(running), num_returns=1)
            index, job = running.pop(ref)
            try:
                value, where = ray.get(ref)
                yield Done(index, job, value, where=where)
            except RayTaskError as exc:  # the job itself raised: hand back its own exception
                yield Done(index, job, error=exc.cause if exc.cause is not None else exc)
            except ray.exceptions.RayError as exc:  # the worker process died on every try
                yield Done(index, job, error=exc, crashed=True)
    finally:
        for ref in running:
            ray.cancel(ref, force=True)
