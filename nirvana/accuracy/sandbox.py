"""Run generated Python in OS-level isolation: never inside the library or app process.

A test run (`run_tests(completion, tests)`) starts two sandboxes, each a bubblewrap (`bwrap`)
container started with an empty environment (`env -i`):
- new user, pid, network, ipc, uts and cgroup namespaces; uid/gid 65534 inside; no further user
  namespaces; `--new-session` (no terminal injection); `--die-with-parent`;
- a filesystem of only read-only binds of `/usr` and the interpreter's prefix (plus the `/lib`,
  `/bin` links), a private `/proc` of the pid namespace, a minimal `/dev`, and a size-capped tmpfs
  as its work dir (`/tmp`, also HOME and the cwd): no host `/proc`, no `/etc`, no home, no sockets;
- inside, before any generated code: rlimits (CPU seconds, address space, file size, open files,
  processes, no core files) and a seccomp filter (`nirvana.accuracy.seccomp`: no new processes, no
  exec, no sockets, no ptrace, no mount or namespace calls).
The *candidate* sandbox executes the generated code (MBPP's or HumanEval's completion); the *judge*
sandbox executes the problem's tests, calling into the candidate over two pipes with plain-data
messages (`nirvana.accuracy.sandbox_scripts`).

Why the verdict cannot be forged: the verdict is one line, "<token> passed", that the judge writes
to a pipe only the judge and this process hold. The token is random per run and goes to the judge
on its stdin; the candidate runs in another sandbox (another pid namespace, another address space)
and holds none of the judge's descriptors, so it can neither read the token nor write the verdict.
The tests run in the judge: every value the candidate returns arrives as plain data or as an
opaque handle (an object whose `==` always says True is a handle, equal only to itself), so the
asserts are evaluated by the judge's own `==`. What it cannot stop: a candidate that computes the
right answers by hard-coding them, or that redefines helpers its own program defines and the tests
call (HumanEval's prompt helpers); the judge never lets candidate names shadow builtins or standard
modules.

The parent (this process) reads every pipe with a hard byte cap (a bounded tail is kept, the rest
discarded), kills both sandboxes at the wall-clock limit (SIGKILL to bwrap; its pid 1 dies with it,
so everything inside dies) and never reads blockingly after the kill.

No isolation, no execution: where bubblewrap is missing or cannot create the namespaces,
`run_tests` raises `SandboxUnavailable` (what to install) unless the caller passes
`allow_unsandboxed=True` (CLI `--unsafe-exec-without-sandbox`): then the same two processes run
as plain child processes of this user, with rlimits and seccomp but no namespaces. Every
`Outcome` records which isolation was active.

Code execution needs an explicit opt-in: `code_execution_allowed(flag)` is true for the flag or
`HF_ALLOW_CODE_EVAL=1` (lm-eval's and Hugging Face evaluate's convention).
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
import secrets
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass

from nirvana.accuracy.sandbox_scripts import CANDIDATE, JUDGE
from nirvana.accuracy.seccomp import filter_program
from nirvana.errors import InvalidInput, NirvanaError

UNSAFE_FLAG = "--unsafe-exec-without-sandbox"
OPT_IN = (
    "Generated code runs only with an explicit opt-in: pass --allow-code-execution (CLI), tick the "
    "code-execution box (app), or set HF_ALLOW_CODE_EVAL=1. It then runs in a bubblewrap sandbox "
    "(own user, pid and network namespaces, read-only system files, a private size-capped /tmp, time, "
    "memory and file-size limits, no new processes or sockets)."
)
INSTALL = "install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap; Fedora: dnf install bubblewrap)"
MARKER = "nirvana-sandbox"  # in every sandboxed process's command line (tests look for leftovers)
ISOLATED, UNSAFE = "bubblewrap", "none (unsafe: plain child processes)"


class SandboxUnavailable(NirvanaError):
    """Generated code would run without OS isolation, and the caller did not accept that risk."""


@dataclass(frozen=True)
class Limits:
    """Per-program limits (the defaults suit MBPP/HumanEval tests on a loaded 2-core machine)."""

    timeout_s: float = 10.0
    cpu_s: int = 10
    memory_mb: int = 1024
    file_mb: int = 16
    nproc: int = 64
    nofile: int = 256
    tmpfs_mb: int = 64
    output_kb: int = 64  # per pipe: the tail kept in memory; the rest is read and discarded
    message_mb: int = 16  # the largest value the candidate may hand to the tests


@dataclass(frozen=True)
class Outcome:
    passed: bool
    status: str  # "passed", "failed" or "timeout"
    returncode: int | None  # the candidate's exit code (None: still running when the run ended)
    seconds: float
    stderr_tail: str
    isolation: str = ISOLATED

    def to_dict(self) -> dict:
        return asdict(self)


def code_execution_allowed(flag: bool = False) -> bool:
    return bool(flag) or os.environ.get("HF_ALLOW_CODE_EVAL", "") == "1"


def require_opt_in(flag: bool, task: str) -> None:
    if not code_execution_allowed(flag):
        raise InvalidInput(f"{task} runs the model's generated Python to score it, so it is off by default. {OPT_IN}")


def _interpreter() -> tuple[str, str]:
    """(the base interpreter, its prefix): a venv's python is a link to it, the venv is not needed."""
    exe = os.path.realpath(getattr(sys, "_base_executable", None) or sys.executable)
    return exe, os.path.realpath(sys.base_prefix)


@functools.lru_cache(maxsize=4)
def _bwrap_help(bwrap: str) -> str:
    """bwrap's option list (older releases lack --size and --disable-userns)."""
    try:
        return subprocess.run([bwrap, "--help"], capture_output=True, text=True, timeout=10, env={}).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ""


def bwrap_command(limits: Limits, info_fd: int | None = None) -> list[str]:
    """The `env -i bwrap ...` prefix that runs one sandboxed interpreter (without its arguments);
    bwrap writes the pid of the sandbox's pid 1 to `info_fd` as JSON."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        raise FileNotFoundError("bwrap")
    exe, prefix = _interpreter()
    cmd = [shutil.which("env") or "/usr/bin/env", "-i", bwrap, "--unshare-all", "--unshare-user"]
    cmd += ["--disable-userns"] if "--disable-userns" in _bwrap_help(bwrap) else []  # bwrap >= 0.8; seccomp too
    cmd += ["--die-with-parent", "--new-session", "--uid", "65534", "--gid", "65534", "--hostname", "sandbox"]
    cmd += ["--ro-bind", "/usr", "/usr"]
    for top in ("/bin", "/sbin", "/lib", "/lib32", "/lib64"):
        if os.path.islink(top):
            cmd += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            cmd += ["--ro-bind", top, top]
    if not prefix.startswith("/usr/"):
        cmd += ["--ro-bind", prefix, prefix]
    cmd += ["--proc", "/proc", "--dev", "/dev"]
    cmd += ["--size", str(limits.tmpfs_mb << 20)] if "--size" in _bwrap_help(bwrap) else []  # bwrap >= 0.7
    cmd += ["--tmpfs", "/tmp"]
    cmd += ["--chdir", "/tmp", "--clearenv", "--setenv", "PATH", "/usr/bin:/bin", "--setenv", "HOME", "/tmp"]
    cmd += ["--setenv", "TMPDIR", "/tmp", "--setenv", "LANG", "C.UTF-8", "--setenv", "PYTHONHASHSEED", "0"]
    cmd += [] if info_fd is None else ["--info-fd", str(info_fd)]
    return [*cmd, exe]


@dataclass(frozen=True)
class Isolation:
    active: bool  # bubblewrap works here
    name: str  # ISOLATED or UNSAFE
    reason: str  # why not, when not active
    seccomp: bool  # the filter is built for this machine


@functools.lru_cache(maxsize=1)
def probe() -> Isolation:
    """Try the real sandbox once with a trivial program; cached for the process."""
    has_filter = filter_program() is not None
    try:
        cmd = bwrap_command(Limits())
    except FileNotFoundError:
        return Isolation(False, UNSAFE, "bubblewrap (bwrap) is not installed", has_filter)
    try:
        done = subprocess.run(
            [*cmd, "-I", "-c", "import os; print(os.getuid())"], capture_output=True, timeout=30, env={}
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return Isolation(False, UNSAFE, f"bwrap could not start: {exc}", has_filter)
    if done.returncode != 0 or done.stdout.strip() != b"65534":
        why = done.stderr.decode(errors="replace").strip().splitlines()[-1:] or [f"exit code {done.returncode}"]
        return Isolation(False, UNSAFE, f"bwrap could not create the namespaces ({why[0]})", has_filter)
    return Isolation(True, ISOLATED, "", has_filter)


def unavailable_message(iso: Isolation) -> str:
    return (
        f"Generated code needs OS isolation to run, and it is not available here: {iso.reason}. "
        f"To fix it, {INSTALL}; in a container, also allow user namespaces (e.g. docker run "
        "--security-opt seccomp=unconfined --security-opt apparmor=unconfined). Or accept the risk of running "
        f"it as plain processes of your user, with only rlimits and a seccomp filter: pass {UNSAFE_FLAG} (CLI) "
        "or tick 'run without a sandbox' (app)."
    )


def require_isolation(allow_unsandboxed: bool = False) -> str:
    """The isolation code will run under, or SandboxUnavailable when there is none and it was not accepted."""
    iso = probe()
    if iso.active:
        return ISOLATED
    if allow_unsandboxed:
        return UNSAFE
    raise SandboxUnavailable(unavailable_message(iso))


def isolation(allow_unsandboxed: bool = False) -> dict:
    """What the sandbox does on this host (for the output, every result and the app's notice)."""
    iso = probe()
    return {
        "isolation": ISOLATED if iso.active else (UNSAFE if allow_unsandboxed else "unavailable"),
        "process": "two bubblewrap sandboxes (candidate code, tests) talking over pipes"
        if iso.active
        else "two plain child processes (candidate code, tests) talking over pipes",
        "namespaces": "user, pid, network, ipc, uts, cgroup; uid 65534; read-only /usr and interpreter"
        if iso.active
        else "none",
        "seccomp": "no fork/exec/socket/ptrace/mount/namespaces" if iso.seccomp else "not on this architecture",
        "reason": "" if iso.active else iso.reason,
        "runs": iso.active or allow_unsandboxed,
        "limits": asdict(Limits()),
        "line": isolation_line(allow_unsandboxed, iso),
    }


def isolation_line(allow_unsandboxed: bool = False, iso: Isolation | None = None) -> str:
    """One line for the CLI and the app: which isolation generated code runs under."""
    iso = iso or probe()
    filt = "seccomp (no fork/exec/socket/ptrace/mount)" if iso.seccomp else "no seccomp (not built for this CPU)"
    if iso.active:
        return f"isolation: bubblewrap (user/pid/net/ipc/uts namespaces, uid 65534, read-only /usr), {filt}, rlimits"
    if allow_unsandboxed:
        return f"isolation: NONE ({iso.reason}; running anyway because of {UNSAFE_FLAG}); {filt}, rlimits only"
    return f"isolation: unavailable ({iso.reason}): generated code will not run"


class _Pipes:
    """The parent's side of one run: pending writes, bounded tails of what was read, which pipes ended."""

    def __init__(self, writes: dict[int, bytes], reads: tuple[int, ...], cap: int):
        self.cap = cap
        self.writes = dict(writes)
        self.reads = {fd: bytearray() for fd in reads}
        self.done: set[int] = set()
        for fd in (*self.writes, *self.reads):
            os.set_blocking(fd, False)

    def read(self, fd: int) -> None:
        try:
            chunk = os.read(fd, 1 << 16)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            chunk = b""
        if not chunk:
            self.done.add(fd)
            return
        buf = self.reads[fd]
        buf += chunk
        if len(buf) > self.cap:
            del buf[: len(buf) - self.cap]

    def write(self, fd: int) -> None:
        try:
            n = os.write(fd, self.writes[fd][: 1 << 16])
        except (BlockingIOError, InterruptedError):
            return
        except OSError:  # the reader is gone
            n = len(self.writes[fd])
        self.writes[fd] = self.writes[fd][n:]
        if not self.writes[fd]:
            del self.writes[fd]
            os.close(fd)

    def pump(self, until: int, deadline: float) -> bool:
        """Move data until pipe `until` ends (True) or the deadline passes (False)."""
        while until not in self.done:
            left = deadline - time.perf_counter()
            if left <= 0:
                return False
            poller = select.poll()  # not select(): descriptors above 1024 are common in a long-lived app
            for fd in self.reads:
                if fd not in self.done:
                    poller.register(fd, select.POLLIN)
            for fd in self.writes:
                poller.register(fd, select.POLLOUT)
            for fd, _ in poller.poll(min(left, 1.0) * 1000):
                if fd in self.writes:
                    self.write(fd)
                else:
                    self.read(fd)
        return True

    def readable(self, fd: int, timeout_s: float) -> bool:
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        return bool(poller.poll(timeout_s * 1000))

    def drain_and_close(self) -> None:
        """Take what is already in the pipes, without waiting for more, and close them."""
        for fd in self.reads:
            for _ in range(64):
                if fd in self.done or not self.readable(fd, 0):
                    break
                self.read(fd)
        for fd in (*self.writes, *self.reads):
            with contextlib.suppress(OSError):
                os.close(fd)


def _spawn(cmd: list[str], stdin: int, out: int, keep: tuple[int, ...], env: dict, cwd: str | None):
    return subprocess.Popen(
        cmd, stdin=stdin, stdout=out, stderr=out, pass_fds=keep, env=env, cwd=cwd, start_new_session=True
    )


def _kill(proc: subprocess.Popen, info: bytes) -> int | None:
    """Kill one sandbox and wait until nothing of it is left; its exit code (None: killed here).

    Under bubblewrap, `info` (from --info-fd) names the namespace's pid 1: killing it makes the kernel
    kill every process of the pid namespace, and the outer bwrap exits once pid 1 is reaped."""
    code = proc.poll()
    pid1 = re.search(rb'"child-pid":\s*(\d+)', info)  # bwrap writes this first; the rest may not be there yet
    if pid1:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(int(pid1.group(1)), signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=5)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=5)
    return code


def run_tests(completion: str, tests: str, limits: Limits | None = None, *, allow_unsandboxed: bool = False) -> Outcome:
    """Run `completion` in the candidate sandbox and `tests` (asserts on its names) in the judge sandbox.

    Passed only if the judge reports every test passed before the wall-clock limit. Raises
    SandboxUnavailable where bubblewrap cannot isolate and `allow_unsandboxed` is False."""
    lim = limits or Limits()
    mode = require_isolation(allow_unsandboxed)
    token = secrets.token_hex(16)
    bpf = filter_program()
    rlimits = {k: getattr(lim, k) for k in ("cpu_s", "memory_mb", "file_mb", "nproc", "nofile")}
    common = {"limits": rlimits, "seccomp": bpf.hex() if bpf else ""}
    configs = (
        {**common, "source": completion},
        {**common, "token": token, "tests": tests, "message_cap": lim.message_mb << 20},
    )
    env, work = {}, None
    if mode != ISOLATED:  # plain processes: at least their own temporary directory as cwd, HOME and TMPDIR
        work = tempfile.mkdtemp(prefix="nirvana-unsandboxed-")
        env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "PYTHONHASHSEED": "0", "HOME": work, "TMPDIR": work}
    req_r, req_w = os.pipe()  # judge -> candidate
    rep_r, rep_w = os.pipe()  # candidate -> judge
    verdict_r, verdict_w = os.pipe()  # judge -> this process, nobody else
    # per sandbox: (script, name, its descriptors); stdin, output and --info-fd pipes are made below
    plan = ((CANDIDATE, "candidate", (req_r, rep_w)), (JUDGE, "judge", (verdict_w, req_w, rep_r)))
    child_ends, ours, procs = [req_r, rep_w, verdict_w, req_w, rep_r], [verdict_r], []
    stdins, outs, infos = [], [], []
    start = time.perf_counter()
    try:
        for script, name, keep in plan:
            in_r, in_w = os.pipe()
            out_r, out_w = os.pipe()
            info_r, info_w = os.pipe()
            child_ends += [in_r, out_w, info_w]
            ours += [in_w, out_r, info_r]
            stdins.append(in_w)
            outs.append(out_r)
            infos.append(info_r)
            prefix = bwrap_command(lim, info_w) if mode == ISOLATED else [_interpreter()[0]]
            argv = [*prefix, "-I", "-c", script, f"{MARKER}-{name}", *map(str, keep)]
            procs.append(_spawn(argv, in_r, out_w, (*keep, info_w) if mode == ISOLATED else keep, env, work))
    except BaseException:
        for p in procs:
            _kill(p, b"")
        for fd in (*child_ends, *ours):
            os.close(fd)
        if work:
            shutil.rmtree(work, ignore_errors=True)
        raise
    for fd in child_ends:
        os.close(fd)
    io = _Pipes(
        {fd: json.dumps(cfg).encode() for fd, cfg in zip(stdins, configs)},
        (verdict_r, *outs, *infos),
        lim.output_kb << 10,
    )
    timed_out = not io.pump(verdict_r, start + lim.timeout_s)
    cand = procs[0]
    if cand.poll() is None and not timed_out:  # the judge finished: give the candidate a moment to end itself
        with contextlib.suppress(subprocess.TimeoutExpired):
            cand.wait(timeout=0.2)
    for fd in infos:  # bwrap writes its info at start-up, before the program runs: it is there, or never
        if not io.reads[fd] and fd not in io.done and io.readable(fd, 0.5):
            io.read(fd)
    code, _ = (_kill(p, bytes(io.reads[fd])) for p, fd in zip(procs, infos))
    io.drain_and_close()
    if work:
        shutil.rmtree(work, ignore_errors=True)
    seconds = time.perf_counter() - start
    verdict = bytes(io.reads[verdict_r]).strip()
    if mode == ISOLATED and code is not None and code >= 128:
        code = -(code - 128)  # bwrap reports a child killed by signal N as 128 + N
    if timed_out or code in (-signal.SIGXCPU, -signal.SIGKILL):
        status = "timeout"  # the CPU-seconds rlimit stopped it: a time limit too
    else:
        status = "passed" if verdict == f"{token} passed".encode() else "failed"
    tail = b"\n".join(bytes(io.reads[fd][-2000:]) for fd in outs).decode(errors="replace")
    return Outcome(status == "passed", status, code, round(seconds, 3), tail.strip(), mode)


def run_program(source: str, limits: Limits | None = None, *, allow_unsandboxed: bool = False) -> Outcome:
    """Run `source` (a complete program) in the candidate sandbox; it passes if it runs to its end.

    For a verdict the program cannot forge, pass its tests separately to `run_tests`: asserts inside
    `source` run in the candidate, so a program that skips them can also pretend it ran them."""
    return run_tests(source, "", limits, allow_unsandboxed=allow_unsandboxed)
