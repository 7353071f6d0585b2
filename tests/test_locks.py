"""`heavy_work`: one heavy job per device, across threads (app sessions) and processes (CLI runs)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from nirvana.guard.locks import Busy, current_holder, device_key, heavy_work

ROOT = Path(__file__).resolve().parents[1]
WAIT = 60  # seconds: a safety net so a broken lock fails the test instead of hanging it


def test_device_names_are_normalised():
    assert device_key("CPU") == "cpu"
    assert device_key("cuda") == "cuda:0"
    assert device_key("cuda:1") == "cuda:1"
    assert device_key("auto") in {"cpu", "cuda:0"}


def test_a_second_session_waits_and_is_told_who_holds_the_device():
    order, messages = [], []
    holding, release = threading.Event(), threading.Event()

    def first():
        with heavy_work("cpu", who="session A: scoring"):
            order.append("A in")
            holding.set()
            release.wait(WAIT)
            order.append("A out")

    def second():
        holding.wait(WAIT)
        with heavy_work("cpu", on_wait=messages.append, who="session B"):
            order.append("B in")

    a, b = threading.Thread(target=first), threading.Thread(target=second)
    a.start()
    b.start()
    holding.wait(WAIT)
    while not messages and b.is_alive():  # B is blocked until it reports waiting
        b.join(0.05)
    assert messages == ["waiting for session A: scoring on cpu"]
    assert current_holder("cpu") == "session A: scoring"
    release.set()
    a.join(WAIT)
    b.join(WAIT)
    assert order == ["A in", "A out", "B in"]  # never both inside at once
    assert messages == ["waiting for session A: scoring on cpu"]  # said once, not once per poll
    assert current_holder("cpu") is None


def test_other_devices_are_not_blocked():
    waited, inside = [], []

    def other_device():
        with heavy_work("cuda:3", on_wait=waited.append, timeout=5):
            inside.append("cuda:3")

    with heavy_work("cpu", who="A"):
        t = threading.Thread(target=other_device)
        t.start()
        t.join(WAIT)
    assert inside == ["cuda:3"] and waited == []


def test_nested_use_in_one_thread_does_not_deadlock():
    with heavy_work("cpu", who="outer"), heavy_work("cpu", who="inner"):
        assert current_holder("cpu") == "outer"
    assert current_holder("cpu") is None


def test_timeout_raises_busy_with_a_clear_message():
    holding, release = threading.Event(), threading.Event()

    def holder():
        with heavy_work("cpu", who="a long evaluation"):
            holding.set()
            release.wait(WAIT)

    t = threading.Thread(target=holder)
    t.start()
    holding.wait(WAIT)
    messages = []
    try:
        with (
            pytest.raises(Busy, match="cpu is busy with a long evaluation"),
            heavy_work("cpu", on_wait=messages.append, timeout=0.3, poll=0.05),
        ):
            pytest.fail("entered a busy device")
    finally:
        release.set()
        t.join(WAIT)
    assert messages == ["waiting for a long evaluation on cpu"]
    with heavy_work("cpu", timeout=5):  # free again
        pass


HOLDER = """
import sys
from nirvana.guard.locks import heavy_work
with heavy_work("cpu", who="another process"):
    print("HOLDING", flush=True)
    sys.stdin.read()
"""


def _spawn(code: str, **kwargs) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, env=env, text=True, **kwargs)


def test_another_process_holding_the_device_blocks_us_until_it_dies():
    """The file lock works across processes, and a SIGKILLed holder never leaves the device locked."""
    proc = _spawn(HOLDER, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert proc.stdout.readline().strip() == "HOLDING"
        messages = []
        with pytest.raises(Busy), heavy_work("cpu", on_wait=messages.append, timeout=0.5, poll=0.05):
            pass
        assert messages == ["waiting for another process on cpu"]
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(WAIT)
    with heavy_work("cpu", timeout=10, poll=0.05):  # the OS dropped the dead holder's lock
        pass


def test_a_cli_prune_waits_for_the_device_and_then_completes(tiny_with_tokenizer_dir, tmp_path):
    """Two jobs on one device: the CLI says it is waiting, runs only after the holder is done."""
    from nirvana.runs import list_runs

    args = ["--model", str(tiny_with_tokenizer_dir), "--criterion", "magnitude", "--sparsity", "0.5"]
    argv = ["prune", *args, "--out", str(tmp_path / "o")]
    code = f"import sys; from nirvana.cli import main; sys.exit(main({argv!r}))"
    with heavy_work("cpu", who="the test (an app session)"):
        proc = _spawn(code, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        seen = []
        for line in proc.stderr:  # read until the CLI reports that it is waiting
            seen.append(line)
            if "waiting for" in line:
                break
        assert "waiting for the test (an app session) on cpu" in "".join(seen)
        assert proc.poll() is None and list_runs() == []  # still blocked: nothing ran
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert (tmp_path / "o" / "report.json").exists()
    assert len(list_runs()) == 1
