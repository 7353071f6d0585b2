"""The code sandbox: generated snippets that misbehave are stopped and counted as failures."""

from __future__ import annotations

import os

import pytest

from nirvana.accuracy.mbpp import SandboxedPassAt1
from nirvana.accuracy.sandbox import Limits, code_execution_allowed, require_opt_in, run_program
from nirvana.errors import InvalidInput

FAST = Limits(timeout_s=3.0, cpu_s=3)


def test_a_correct_program_passes_and_a_wrong_one_fails():
    assert run_program("def add(a, b):\n    return a + b\nassert add(2, 3) == 5\n", FAST).passed
    bad = run_program("def add(a, b):\n    return a * b\nassert add(2, 3) == 5\n", FAST)
    assert not bad.passed and bad.status == "failed" and "AssertionError" in bad.stderr_tail


def test_an_infinite_loop_is_killed_at_the_timeout():
    out = run_program("while True:\n    pass\n", Limits(timeout_s=1.5, cpu_s=5))
    assert out.status == "timeout" and not out.passed
    assert out.seconds < 10


def test_a_huge_allocation_fails():
    out = run_program("x = bytearray(8 * 1024 ** 3)\n", FAST)
    assert not out.passed and "MemoryError" in out.stderr_tail


def test_a_write_outside_its_directory_is_refused(tmp_path):
    target = tmp_path / "escaped.txt"
    out = run_program(f"open({str(target)!r}, 'w').write('x')\n", FAST)
    assert not out.passed and not target.exists()
    inside = run_program("open('mine.txt', 'w').write('x')\nassert open('mine.txt').read() == 'x'\n", FAST)
    assert inside.passed  # its own directory is writable


@pytest.mark.parametrize(
    "snippet",
    [
        "import socket\nsocket.socket()\n",
        "import socket\nsocket.create_connection(('127.0.0.1', 9), timeout=1)\n",
        "import urllib.request\nurllib.request.urlopen('http://127.0.0.1:9', timeout=1)\n",
    ],
)
def test_opening_a_socket_fails(snippet):
    out = run_program(snippet, FAST)
    assert not out.passed


def test_subprocesses_and_removing_files_are_refused(tmp_path):
    marker = tmp_path / "made-by-child"
    for snippet in (
        f"import subprocess\nsubprocess.run(['touch', {str(marker)!r}])\n",
        f"import os\nos.system('touch {marker}')\n",
        "import os\nos.fork()\n",
        f"import os\nos.remove({str(tmp_path)!r})\n",
    ):
        assert not run_program(snippet, FAST).passed
    assert not marker.exists() and tmp_path.exists()


def test_an_early_exit_zero_is_not_a_pass():
    out = run_program("import sys\nsys.exit(0)\nassert False\n", FAST)
    assert out.returncode == 0 and not out.passed


def test_the_metric_scores_completion_plus_tests_and_counts_outcomes():
    metric = SandboxedPassAt1(FAST)
    tests = "assert square(3) == 9\nassert square(0) == 0"
    assert metric(references=[tests], predictions=["def square(x):\n    return x * x"]) == 1.0
    assert metric(references=[tests], predictions=["def square(x):\n    return x + x"]) == 0.0
    assert metric(references=[tests], predictions=["def square(x):\n    while True: pass"]) == 0.0
    assert metric.statuses == {"passed": 1, "failed": 1, "timeout": 1}
    assert metric.__name__ == "pass_at_1"


def test_code_execution_needs_an_explicit_opt_in(monkeypatch):
    monkeypatch.delenv("HF_ALLOW_CODE_EVAL", raising=False)
    assert not code_execution_allowed(False)
    with pytest.raises(InvalidInput, match="--allow-code-execution"):
        require_opt_in(False, "mbpp")
    require_opt_in(True, "mbpp")
    monkeypatch.setenv("HF_ALLOW_CODE_EVAL", "1")
    assert code_execution_allowed(False)
    assert os.getpid()  # the test process survived every case above
