"""The launcher before issue 19 (main b67f179), kept only to measure the new one against it: do not use.

It is escapable (see docs/RELIABILITY.md, "Generated code"). Its original docstring follows.

Run generated Python in a separate, limited process: never inside the library or app process.

Each program runs as `python -I bootstrap.py` in its own temporary directory (deleted after), with
- a wall-clock timeout (the whole process group is killed) and resource rlimits: CPU seconds,
  address space, file size, process count, no core files;
- no network: a new network namespace (`unshare --net`, or an unprivileged user namespace) where
  the host allows it, and in every case an audit hook that refuses sockets;
- an audit hook that refuses writes, renames and deletes outside its directory, subprocesses,
  `os.system`, `fork`, `exec`, signals and `ctypes`;
- as root: the program drops to user `nobody` first, when `nobody` can read the interpreter;
- a minimal environment (PATH, HOME and TMPDIR set to its directory).
A program passes only if it exits 0 *after* running to its end (the bootstrap writes a random token
to a private descriptor once the code returns, so an early `sys.exit(0)` is a failure).

Code execution needs an explicit opt-in: `code_execution_allowed(flag)` is true for the flag or
`HF_ALLOW_CODE_EVAL=1` (lm-eval's and Hugging Face evaluate's convention).
"""

from __future__ import annotations

import contextlib
import functools
import os
import resource
import secrets
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass

from nirvana.errors import InvalidInput

NOBODY = 65534
OPT_IN = (
    "Generated code runs only with an explicit opt-in: pass --allow-code-execution (CLI), tick the "
    "code-execution box (app), or set HF_ALLOW_CODE_EVAL=1. It then runs in a separate sandboxed process "
    "(own temporary directory, time, memory and file-size limits, no network, no writes outside its directory)."
)

_BOOTSTRAP = r"""
import os, sys
workdir = os.path.realpath(sys.argv[1])
token_fd = int(sys.argv[3])
token = os.read(0, 64)
devnull = os.open(os.devnull, os.O_RDWR)
os.dup2(devnull, 0)
if sys.argv[2] == "1":
    os.setgroups([]); os.setgid(65534); os.setuid(65534)
BLOCK = ("socket.", "subprocess.", "os.exec", "os.posix_spawn", "os.spawn", "os.fork", "os.forkpty",
         "os.system", "os.kill", "os.killpg", "os.setuid", "os.setgid", "ctypes.", "pty.", "_posixsubprocess")
WRITES = {"os.remove", "os.rename", "os.rmdir", "os.mkdir", "os.chmod", "os.chown", "os.link", "os.symlink",
          "os.truncate", "os.utime", "shutil.rmtree", "shutil.copyfile", "shutil.move", "shutil.copytree"}
def inside(path):
    try:
        p = os.path.realpath(os.fsdecode(path))
    except Exception:
        return False
    return p == workdir or p.startswith(workdir + os.sep)
def hook(event, args):
    if event.startswith(BLOCK):
        raise PermissionError("sandbox: %s is not allowed" % event)
    if event == "open":
        path, mode, flags = args
        if isinstance(path, int) or path is None:
            return
        writes = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
            isinstance(flags, int) and flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC))
        if writes and not inside(path):
            raise PermissionError("sandbox: writing outside the sandbox directory is not allowed: %r" % (path,))
    elif event in WRITES:
        for a in args[:2]:
            if isinstance(a, (str, bytes, os.PathLike)) and not inside(a):
                raise PermissionError("sandbox: %s outside the sandbox directory is not allowed" % event)
with open(os.path.join(workdir, "program.py"), encoding="utf-8") as fh:
    code = compile(fh.read(), "program.py", "exec")
sys.addaudithook(hook)
exec(code, {"__name__": "__main__", "__builtins__": __builtins__})
sys.stdout.flush()
os.write(token_fd, token)
"""


@dataclass(frozen=True)
class Limits:
    """Per-program limits (the defaults suit MBPP/HumanEval tests on a loaded 2-core machine)."""

    timeout_s: float = 10.0
    cpu_s: int = 10
    memory_mb: int = 1024
    file_mb: int = 16
    nproc: int = 64


@dataclass(frozen=True)
class Outcome:
    passed: bool
    status: str  # "passed", "failed" or "timeout"
    returncode: int | None
    seconds: float
    stderr_tail: str

    def to_dict(self) -> dict:
        return asdict(self)


def code_execution_allowed(flag: bool = False) -> bool:
    return bool(flag) or os.environ.get("HF_ALLOW_CODE_EVAL", "") == "1"


def require_opt_in(flag: bool, task: str) -> None:
    if not code_execution_allowed(flag):
        raise InvalidInput(f"{task} runs the model's generated Python to score it, so it is off by default. {OPT_IN}")


@functools.lru_cache(maxsize=1)
def network_isolation() -> tuple[tuple[str, ...], str]:
    """(command prefix, description): a new network namespace where the host allows one."""
    exe = shutil.which("unshare")
    if exe:
        for prefix in ((exe, "--net"), (exe, "--user", "--map-root-user", "--net")):
            try:
                ok = subprocess.run([*prefix, "true"], capture_output=True, timeout=10).returncode == 0
            except (OSError, subprocess.TimeoutExpired):
                ok = False
            if ok:
                return prefix, "network namespace (" + " ".join(prefix[1:]) + ") + socket audit hook"
    return (), "socket audit hook (no network namespace available on this host)"


@functools.lru_cache(maxsize=1)
def _nobody_can_run_python() -> bool:
    for target in {os.path.realpath(sys.executable), os.path.realpath(os.__file__)}:
        p = target
        while True:
            mode = os.stat(p).st_mode
            if not mode & (stat.S_IROTH if p == target else stat.S_IXOTH):
                return False
            if p == os.path.dirname(p):
                break
            p = os.path.dirname(p)
    return True


def isolation() -> dict:
    """What the sandbox does on this host (for the output and the app's notice)."""
    drop = os.geteuid() == 0 and _nobody_can_run_python()
    return {
        "process": "separate `python -I` process in its own temporary directory",
        "network": network_isolation()[1],
        "user": "nobody" if drop else "the current user (audit hook guards writes)",
        "limits": asdict(Limits()),
    }


def _rlimits(lim: Limits):
    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_CPU, (lim.cpu_s, lim.cpu_s + 1))
        resource.setrlimit(resource.RLIMIT_AS, (lim.memory_mb << 20, lim.memory_mb << 20))
        resource.setrlimit(resource.RLIMIT_FSIZE, (lim.file_mb << 20, lim.file_mb << 20))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        resource.setrlimit(resource.RLIMIT_NPROC, (lim.nproc, lim.nproc))

    return apply


def run_program(source: str, limits: Limits | None = None) -> Outcome:
    """Run `source` (a complete program, e.g. solution + asserts) in the sandbox."""
    lim = limits or Limits()
    prefix, _ = network_isolation()
    drop = os.geteuid() == 0 and _nobody_can_run_python()
    token = secrets.token_hex(16).encode()
    with tempfile.TemporaryDirectory(prefix="nirvana-sandbox-") as work:
        with open(os.path.join(work, "program.py"), "w", encoding="utf-8") as fh:
            fh.write(source)
        boot = os.path.join(work, "bootstrap.py")
        with open(boot, "w", encoding="utf-8") as fh:
            fh.write(_BOOTSTRAP)
        if drop:
            os.chown(work, NOBODY, NOBODY)
        read_end, write_end = os.pipe()
        env = {"PATH": "/usr/bin:/bin", "HOME": work, "TMPDIR": work, "LANG": "C.UTF-8", "PYTHONHASHSEED": "0"}
        cmd = [*prefix, sys.executable, "-I", boot, work, "1" if drop else "0", str(write_end)]
        start = time.perf_counter()
        try:
            proc = subprocess.Popen(
                cmd,
                cwd=work,
                env=env,
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                preexec_fn=_rlimits(lim),
                start_new_session=True,
                pass_fds=(write_end,),
            )
        finally:
            os.close(write_end)
        try:
            _, err = proc.communicate(input=token, timeout=lim.timeout_s)
            status = None
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            _, err = proc.communicate()
            status = "timeout"
        with os.fdopen(read_end, "rb") as fh:
            finished = fh.read() == token
        seconds = time.perf_counter() - start
    if status is None and proc.returncode in (-signal.SIGXCPU, -signal.SIGKILL):
        status = "timeout"  # the CPU-seconds rlimit stopped it: a time limit too (on an idle machine it comes first)
    if status is None:
        status = "passed" if proc.returncode == 0 and finished else "failed"
    tail = err.decode("utf-8", errors="replace")[-600:]
    return Outcome(status == "passed", status, proc.returncode, round(seconds, 3), tail)
