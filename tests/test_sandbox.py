"""The code sandbox: generated snippets that misbehave are stopped and counted as failures; without OS
isolation nothing runs unless the risk is accepted by name. (Real escapes: tests/test_sandbox_escapes.py.)"""

from __future__ import annotations

import errno
import os
import struct

import pytest

from nirvana.accuracy import seccomp
from nirvana.accuracy.harness import check_request
from nirvana.accuracy.mbpp import SandboxedPassAt1
from nirvana.accuracy.sandbox import (
    UNSAFE,
    Limits,
    SandboxUnavailable,
    code_execution_allowed,
    isolation_line,
    probe,
    require_opt_in,
    run_program,
    run_tests,
)
from nirvana.errors import InvalidInput

needs_bwrap = pytest.mark.skipif(not probe().active, reason=f"no OS isolation on this host: {probe().reason}")

FAST = Limits(timeout_s=3.0, cpu_s=3)


@needs_bwrap
def test_a_correct_program_passes_and_a_wrong_one_fails():
    assert run_program("def add(a, b):\n    return a + b\nassert add(2, 3) == 5\n", FAST).passed
    bad = run_program("def add(a, b):\n    return a * b\nassert add(2, 3) == 5\n", FAST)
    assert not bad.passed and bad.status == "failed" and "AssertionError" in bad.stderr_tail


@needs_bwrap
def test_an_infinite_loop_is_killed_at_the_timeout():
    out = run_program("while True:\n    pass\n", Limits(timeout_s=1.5, cpu_s=5))
    assert out.status == "timeout" and not out.passed
    assert out.seconds < 10


@needs_bwrap
def test_a_huge_allocation_fails():
    out = run_program("x = bytearray(8 * 1024 ** 3)\n", FAST)
    assert not out.passed and "MemoryError" in out.stderr_tail


@needs_bwrap
def test_a_write_outside_its_directory_is_refused(tmp_path):
    target = tmp_path / "escaped.txt"
    out = run_program(f"open({str(target)!r}, 'w').write('x')\n", FAST)
    assert not out.passed and not target.exists()
    inside = run_program("open('mine.txt', 'w').write('x')\nassert open('mine.txt').read() == 'x'\n", FAST)
    assert inside.passed  # its own directory is writable


@needs_bwrap
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


@needs_bwrap
def test_subprocesses_and_removing_files_are_refused(tmp_path):
    marker = tmp_path / "made-by-child"
    for snippet in (
        f"import subprocess\nsubprocess.run(['touch', {str(marker)!r}])\n",
        f"import os\nassert os.system('touch {marker}') == 0\n",
        "import os\nos.fork()\n",
        f"import os\nos.remove({str(tmp_path)!r})\n",
    ):
        assert not run_program(snippet, FAST).passed
    assert not marker.exists() and tmp_path.exists()


@needs_bwrap
def test_an_early_exit_zero_is_not_a_pass():
    out = run_program("import sys\nsys.exit(0)\nassert False\n", FAST)
    assert not out.passed and "SystemExit: 0" in out.stderr_tail
    early = run_tests("def f():\n    return 1\nimport os\nos._exit(0)\n", "assert f() == 1\n", FAST)
    assert not early.passed and early.returncode == 0


@needs_bwrap
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


def _no_bwrap(monkeypatch):
    from nirvana.accuracy import sandbox

    missing = sandbox.Isolation(False, sandbox.UNSAFE, "bubblewrap (bwrap) is not installed", True)
    monkeypatch.setattr(sandbox, "probe", lambda: missing)


def test_without_os_isolation_generated_code_is_refused_unless_the_risk_is_named(monkeypatch):
    _no_bwrap(monkeypatch)
    with pytest.raises(SandboxUnavailable, match=r"bwrap\) is not installed.*apt-get install bubblewrap.*--unsafe"):
        run_tests("def f():\n    return 1\n", "assert f() == 1\n", FAST)
    with pytest.raises(SandboxUnavailable):
        check_request("mbpp", 1, 8, "local", True)  # before any model loads
    ok = run_tests("def f():\n    return 1\n", "assert f() == 1\n", FAST, allow_unsandboxed=True)
    assert ok.passed and ok.isolation == UNSAFE  # the result says it ran without isolation
    bad = run_tests("def f():\n    return 2\n", "assert f() == 1\n", FAST, allow_unsandboxed=True)
    assert not bad.passed and "AssertionError" in bad.stderr_tail
    assert "isolation: NONE" in isolation_line(True) and "will not run" in isolation_line(False)


def test_the_cli_refuses_mbpp_without_isolation_and_names_the_flag(monkeypatch):
    from tests.test_bad_input import run_cli

    _no_bwrap(monkeypatch)
    code, err = run_cli(["eval", "--model", "smollm2-135m", "--tasks", "mbpp", "--allow-code-execution"])
    assert code == 2 and "SandboxUnavailable" in err and "--unsafe-exec-without-sandbox" in err
    assert "Traceback" not in err


def test_the_probe_says_when_bwrap_is_missing(monkeypatch):
    from nirvana.accuracy import sandbox

    monkeypatch.setattr(sandbox.shutil, "which", lambda name: None)
    iso = sandbox.probe.__wrapped__()
    assert not iso.active and "not installed" in iso.reason


def _run_bpf(prog: bytes, nr: int, arch: int = seccomp.AUDIT_ARCH_X86_64, arg0: int = 0) -> int:
    """A tiny classic-BPF interpreter (the instructions the filter uses) over one seccomp_data."""
    data = struct.pack("=IIQ6Q", nr, arch, 0, arg0, 0, 0, 0, 0, 0)
    insns = [struct.unpack("=HBBI", prog[i : i + 8]) for i in range(0, len(prog), 8)]
    pc, acc = 0, 0
    while True:
        code, jt, jf, k = insns[pc]
        if code == 0x20:
            acc = struct.unpack_from("=I", data, k)[0]
        elif code == 0x06:
            return k
        else:
            hit = {0x15: acc == k, 0x35: acc >= k, 0x45: bool(acc & k)}[code]
            pc += jt if hit else jf
        pc += 1


def test_the_seccomp_filter_denies_processes_and_sockets_and_allows_threads():
    prog = seccomp.filter_program("x86_64")
    assert prog is not None and len(prog) % 8 == 0 and seccomp.filter_program("riscv64") is None
    eperm = seccomp.RET_ERRNO | errno.EPERM
    for name in ("fork", "vfork", "execve", "socket", "ptrace", "mount", "unshare", "mknodat", "bpf"):
        assert _run_bpf(prog, seccomp.X86_64[name]) == eperm, name
    assert _run_bpf(prog, 56, arg0=0x11) == eperm  # clone(SIGCHLD): a new process
    assert _run_bpf(prog, 56, arg0=0x3D0F00) == seccomp.RET_ALLOW  # clone(CLONE_THREAD | ...): a thread
    assert _run_bpf(prog, 435) == seccomp.RET_ERRNO | errno.ENOSYS  # clone3: the C library falls back to clone
    for nr in (0, 1, 9, 60, 231):  # read, write, mmap, exit, exit_group
        assert _run_bpf(prog, nr) == seccomp.RET_ALLOW
    assert _run_bpf(prog, 0, arch=0x40000003) == seccomp.RET_KILL_PROCESS  # i386 ABI
    assert _run_bpf(prog, 0x40000000 + 57) == seccomp.RET_KILL_PROCESS  # x32 ABI


def test_unsandboxed_programs_still_get_their_own_directory(monkeypatch, tmp_path):
    _no_bwrap(monkeypatch)
    monkeypatch.chdir(tmp_path)
    program = "import os\nopen('mine.txt', 'w').write('x')\nassert os.getcwd().startswith(os.environ['TMPDIR'])\n"
    out = run_tests(program, "", FAST, allow_unsandboxed=True)
    assert out.passed and out.isolation == UNSAFE and not (tmp_path / "mine.txt").exists()


def test_unsandboxed_programs_are_never_root_either(monkeypatch):
    from nirvana.accuracy.sandbox import sandbox_ids

    _no_bwrap(monkeypatch)
    out = run_tests(
        "import os\nprint('ids', os.getuid(), os.getgid(), os.getgroups())\n", "", FAST, allow_unsandboxed=True
    )
    assert out.passed and out.isolation == UNSAFE, out.stderr_tail
    uid, gid = sandbox_ids() or (os.getuid(), os.getgid())
    assert f"ids {uid} {gid} " in out.stderr_tail
    assert (uid != 0 and gid != 0) or os.geteuid() != 0


def test_the_sandbox_uid_is_checked(monkeypatch):
    from nirvana.accuracy import sandbox

    if os.geteuid() != 0:
        assert sandbox.sandbox_ids() is None  # not root: sandboxes run as this user, nothing to choose
        return
    assert sandbox.sandbox_ids() == (sandbox.SANDBOX_UID, sandbox.SANDBOX_UID)
    for bad in ("0", "root", "-5", str(2**32 - 1)):
        monkeypatch.setenv("NIRVANA_SANDBOX_UID", bad)
        with pytest.raises(InvalidInput, match="NIRVANA_SANDBOX_UID must be a host id from 1 to"):
            sandbox.sandbox_ids()
    monkeypatch.setenv("NIRVANA_SANDBOX_UID", "3800123")
    monkeypatch.setenv("NIRVANA_SANDBOX_GID", "3800124")
    assert sandbox.sandbox_ids() == (3800123, 3800124)
