"""A real local Ray cluster for tests, started on 127.0.0.1 and stopped by the test that started it.

`ray start --head --block` runs in its own session with its own temp folder; at the end it is sent
SIGTERM (it stops the processes it started), then any process still left whose command line names
that temp folder, or that is in its session, is killed. Processes of other clusters are never touched
(no `ray stop`: it ends every Ray process on the machine).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager, suppress
from pathlib import Path

import psutil

RAY = Path(sys.executable).parent / "ray"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ours(temp: str, session: int) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        try:
            if proc.pid != os.getpid() and (
                temp in " ".join(proc.info["cmdline"] or ()) or os.getsid(proc.pid) == session
            ):
                found.append(proc)
        except (psutil.Error, OSError):
            continue
    return found


@contextmanager
def local_cluster(num_cpus: int = 2, auth_mode: str | None = None):
    """Yield the address (127.0.0.1:PORT) of a fresh one-node Ray cluster with `num_cpus` CPUs.

    `auth_mode` None: leave RAY_AUTH_MODE to Ray's own default, as a user's `ray start` does (else: set it for
    the head and this process)."""
    port = free_port()
    temp = tempfile.mkdtemp(prefix="nrvray-", dir="/tmp")  # short: Ray's unix sockets live under it
    cmd = [
        str(RAY), "start", "--head", "--block", "--node-ip-address=127.0.0.1", f"--port={port}",
        f"--num-cpus={num_cpus}", "--num-gpus=0", "--include-dashboard=false", "--disable-usage-stats",
        f"--temp-dir={temp}", "--object-store-memory=100000000",
    ]  # fmt: skip
    # Token authentication as a user's cluster has it: Ray 2.60's `ray start` turns it on once ~/.ray/auth_token
    # exists (any local ray.init writes one), and `connect` decides the same way; the file is made here by Ray's
    # own `ray get-auth-token --generate` when missing, so the head and this process read the same token.
    auth = {"RAY_AUTH_MODE": auth_mode} if auth_mode else {}
    subprocess.run(
        [str(RAY), "get-auth-token", "--generate"], capture_output=True, check=True, env={**os.environ, **auth}
    )
    saved = {k: os.environ.get(k) for k in auth}
    env = {**os.environ, **auth, "RAY_USAGE_STATS_ENABLED": "0"}
    with open(Path(temp) / "start.log", "w") as log:
        head = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=env)
    try:
        deadline = time.monotonic() + 120
        while True:
            if head.poll() is not None:
                raise RuntimeError(
                    f"ray start exited {head.returncode}: {(Path(temp) / 'start.log').read_text()[-2000:]}"
                )
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError("the test's Ray head did not listen within 120 s") from None
                time.sleep(0.5)
        os.environ.update(auth)
        yield f"127.0.0.1:{port}"
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        try:  # every process the head started (workers rename themselves `ray::...`, so by ancestry too)
            started = psutil.Process(head.pid).children(recursive=True)
        except psutil.Error:
            started = []
        head.send_signal(signal.SIGTERM)
        try:
            head.wait(timeout=30)
        except subprocess.TimeoutExpired:
            head.kill()
        for proc in [*started, *_ours(temp, head.pid)]:
            with suppress(psutil.Error):
                proc.kill()
        shutil.rmtree(temp, ignore_errors=True)
