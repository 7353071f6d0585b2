"""One heavy job per device at a time, across app sessions (threads) and CLI processes.

Scoring, slicing and evaluating a model each take most of a device's memory; two at once on
one GPU (or on a small CPU box) run out of memory together. `heavy_work(device)` serialises them:

    with heavy_work("cuda:0", on_wait=lambda msg: status.update(label=msg)):
        scores = compute_scores(model, "nirvana", batch)

Two locks are taken in order: an in-process lock per device (Streamlit sessions are threads of
one process) and an inter-process file lock (`filelock`) under `<cache>/locks/`. The OS drops a
file lock when its process dies, even on SIGKILL, so a crashed job never blocks the device.
While blocked, `on_wait("waiting for <who> on <device>")` is called once, and again whenever the
holder changes. The same thread may nest `heavy_work` on one device (it does not deadlock).
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import torch
from filelock import FileLock, Timeout

from nirvana.errors import NirvanaError
from nirvana.store.paths import cache_dir

OnWait = Callable[[str], None] | None


class Busy(NirvanaError):
    """The device stayed busy with another job for longer than the caller agreed to wait."""


_guard = threading.Lock()
_process_locks: dict[str, threading.Lock] = {}
_holders: dict[str, str] = {}  # device -> who holds it in this process
_local = threading.local()  # .held: {device: depth} for the current thread


def device_key(device: str | None = "auto") -> str:
    """Normalise a device name: auto -> cuda:0 or cpu, cuda -> cuda:0, lower case."""

    text = str(device or "auto").strip().lower()
    if text == "auto":
        text = "cuda" if torch.cuda.is_available() else "cpu"
    if text == "cuda":
        text = "cuda:0"
    return text


def lock_path(device: str) -> Path:
    """The file lock of one device under the cache dir."""

    safe = "".join(c if c.isalnum() else "-" for c in device_key(device))
    return cache_dir() / "locks" / f"heavy-{safe}.lock"


def _holder_file(path: Path) -> Path:
    return path.with_suffix(".holder.json")


def current_holder(device: str) -> str | None:
    """Who holds the device now, as written by the holder (None when free or unknown)."""
    key = device_key(device)
    with _guard:
        if key in _holders:
            return _holders[key]
    try:
        data = json.loads(_holder_file(lock_path(key)).read_text())
    except (OSError, ValueError):
        return None
    return data.get("who") if isinstance(data, dict) else None


def _process_lock(key: str) -> threading.Lock:
    with _guard:
        return _process_locks.setdefault(key, threading.Lock())


def _held() -> dict[str, int]:
    if not hasattr(_local, "held"):
        _local.held = {}
    return _local.held


@contextlib.contextmanager
def heavy_work(
    device: str | None = "auto",
    on_wait: OnWait = None,
    *,
    who: str | None = None,
    timeout: float | None = None,
    poll: float = 0.25,
) -> Iterator[None]:
    """Hold `device` exclusively for the body; call `on_wait(message)` while waiting for it.

    `who` names this job for others' waiting messages (default: "process <pid>"); `timeout`
    (seconds, None = wait forever) raises `Busy` instead of waiting longer.
    """
    key = device_key(device)
    held = _held()
    if held.get(key):  # nested use in the same thread: already ours
        held[key] += 1
        try:
            yield
        finally:
            held[key] -= 1
        return
    who = who or f"process {os.getpid()}"
    deadline = None if timeout is None else time.monotonic() + timeout
    last_message: list[str | None] = [None]

    def waiting(holder: str | None) -> None:
        message = f"waiting for {holder or 'another job'} on {key}"
        if on_wait is not None and message != last_message[0]:
            on_wait(message)
        last_message[0] = message
        if deadline is not None and time.monotonic() >= deadline:
            raise Busy(
                f"{key} is busy with {holder or 'another job'} and stayed busy for {timeout:g} s; "
                "try again when it finishes (heavy jobs run one at a time per device)."
            )

    plock = _process_lock(key)
    while not plock.acquire(timeout=poll):
        with _guard:
            holder = _holders.get(key)
        waiting(holder)
    path = lock_path(key)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        flock = FileLock(str(path), thread_local=False)
        while True:
            try:
                flock.acquire(timeout=poll)
                break
            except Timeout:
                waiting(current_holder(key))
        try:
            with _guard:
                _holders[key] = who
            _holder_file(path).write_text(json.dumps({"who": who, "pid": os.getpid(), "since": time.time()}))
            held[key] = 1
            try:
                yield
            finally:
                held.pop(key, None)
                with _guard:
                    _holders.pop(key, None)
                with contextlib.suppress(OSError):
                    _holder_file(path).unlink()
        finally:
            flock.release()
    finally:
        plock.release()
