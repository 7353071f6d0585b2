"""Run generated Python in OS-level isolation: never inside the library or app process.

A test run (`run_tests(completion, tests)`) starts two sandboxes, each a bubblewrap (`bwrap`, 0.8 or
newer) container started with an empty environment:
- never host root: when this process is root, a launcher (`sandbox_scripts.LAUNCHER`) drops to an
  unprivileged host uid/gid of its own (`SANDBOX_UID`, or NIRVANA_SANDBOX_UID/GID) before bwrap
  starts, so uid 65534 inside maps to that uid, not to root: host-owned files and knobs
  (`/proc/sys`) refuse it, and its per-user kernel limits (tasks, pipes, inotify) are not root's.
  Where the interpreter lies under a folder that uid cannot enter (`/root/.pyenv`), the launcher
  first lays a read-only tmpfs over that folder, in a mount namespace of its own, holding only the
  interpreter's prefix. Not root: bwrap runs as this user;
- new user, pid, network, ipc, uts and cgroup namespaces; uid/gid 65534 inside; no further user
  namespaces; `--new-session` (no terminal injection); `--die-with-parent`; `--as-pid-1`: no
  bubblewrap init inside, the sandboxed interpreter is pid 1 and the only process, so the filter and
  the limits below cover every process of the namespace;
- a read-only filesystem: the root, binds of `/usr` and the interpreter's prefix (plus the `/lib`,
  `/bin` links), an empty read-only folder over every site-/dist-packages folder and over
  `/usr/local` (installed packages, evaluation data among them, are not visible), a private
  `/proc` of the pid namespace with `/proc/sys`, `/proc/irq`, `/proc/bus` and `/proc/sysrq-trigger`
  read-only, a `/dev` of only null, zero, full, random and urandom (no pts, no shm), and one
  writable place, a size-capped tmpfs as its work dir (`/tmp`, also HOME and the cwd): every
  writable byte is under that cap. No `/etc`, no home, no sockets;
- inside, before any generated code: rlimits (CPU seconds, address space, file size, open files,
  tasks, no core files), not dumpable (`PR_SET_DUMPABLE 0`: its `/proc/1/mem` and `pidfd_getfd` on
  it fail), and a seccomp filter (`nirvana.accuracy.seccomp`: no new processes, no exec, no
  sockets, no ptrace or pidfd, no mount or namespace calls, no memfd, System V IPC, POSIX message
  queues or inotify). Threads are allowed and bounded by the tasks rlimit, which holds because the
  uid is not root.
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
call (HumanEval's prompt helpers). The judge never lets candidate names shadow builtins or standard
modules, refuses any dunder name (`__builtins__` above all) and runs the tests with its own
builtins; it fetches, one message each, only the candidate globals its tests' code names, so a
large table the tests never touch never travels, and a value too big for one message arrives as
a handle.

The parent (this process) reads every pipe with a hard byte cap (a bounded tail is kept, the rest
discarded), kills both sandboxes at the wall-clock limit (SIGKILL to the namespace's pid 1, so
everything inside dies, then to bwrap) and never reads blockingly after the kill.

No isolation, no execution: where bubblewrap is missing or cannot create the namespaces,
`run_tests` raises `SandboxUnavailable` (what to install) unless the caller passes
`allow_unsandboxed=True` (CLI `--unsafe-exec-without-sandbox`): then the same two processes run
as plain child processes (of the sandbox uid when this process is root, else of this user), with
rlimits and seccomp but no namespaces. Every `Outcome` records which isolation was active.

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

from nirvana.accuracy.sandbox_scripts import CANDIDATE, JUDGE, LAUNCHER
from nirvana.accuracy.seccomp import filter_program
from nirvana.errors import InvalidInput, NirvanaError

UNSAFE_FLAG = "--unsafe-exec-without-sandbox"
OPT_IN = (
    "Generated code runs only with an explicit opt-in: pass --allow-code-execution (CLI), tick the "
    "code-execution box (app), or set HF_ALLOW_CODE_EVAL=1. It then runs in a bubblewrap sandbox "
    "(own user, pid and network namespaces, never root on the host, read-only system files, a private "
    "size-capped /tmp, time, memory, file-size and task limits, no new processes or sockets)."
)
INSTALL = "install bubblewrap 0.8 or newer (Debian/Ubuntu: apt-get install bubblewrap; Fedora: dnf install bubblewrap)"
# In every sandboxed process's command line, with the launching process's pid: "nirvana-sandbox-<pid>-<name>" (tests
# look for leftovers of their own process; a leftover reparented to init still names who started it).
MARKER = "nirvana-sandbox"
ISOLATED, UNSAFE = "bubblewrap", "none (unsafe: plain child processes)"
FILTER_SUMMARY = "no fork/exec/socket/ptrace/pidfd/mount, no memfd/SysV IPC/inotify"
SANDBOX_UID = 3_800_000  # the host uid and gid sandboxes run as when the evaluator is root (no account needed)


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
    """bwrap's option list (older releases lack --size, --disable-userns and --as-pid-1)."""
    try:
        return subprocess.run([bwrap, "--help"], capture_output=True, text=True, timeout=10, env={}).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ""


NEEDED_OPTIONS = ("--as-pid-1", "--size", "--remount-ro", "--disable-userns")  # bubblewrap >= 0.8
DEVICES = ("null", "zero", "full", "random", "urandom")  # the whole /dev inside: no pts, no shm, no tty
PROC_KNOBS = ("sys", "sysrq-trigger", "irq", "bus")  # read-only inside, whoever the sandbox's uid is


def sandbox_ids() -> tuple[int, int] | None:
    """The host (uid, gid) sandboxes run as when this process is root; None when it is not root (then
    they run as this process's own uid, which is no more than the evaluator already has).

    NIRVANA_SANDBOX_UID / NIRVANA_SANDBOX_GID choose them (default SANDBOX_UID): an id no account or
    service uses, so that the per-user kernel limits a sandbox can reach are nobody else's."""
    if os.geteuid() != 0:
        return None
    ids = []
    for var in ("NIRVANA_SANDBOX_UID", "NIRVANA_SANDBOX_GID"):
        raw = os.environ.get(var, "").strip() or str(SANDBOX_UID)
        if not raw.isdigit() or not 0 < int(raw) < 2**32 - 1:
            raise InvalidInput(f"{var} must be a host id from 1 to {2**32 - 2} (not root), got {raw!r}.")
        ids.append(int(raw))
    return ids[0], ids[1]


def _unreachable_tops(path: str) -> list[str]:
    """The highest folder above `path` that other users cannot enter (e.g. /root, mode 0700), if any."""
    parts = path.strip("/").split("/")
    for i in range(1, len(parts)):
        folder = "/" + "/".join(parts[:i])
        if not os.stat(folder).st_mode & 0o001:
            return [folder]
    return []


def _site_folders(prefix: str) -> list[str]:
    """Installed packages (evaluation data among them) the sandbox must not see: every site- and
    dist-packages folder of the bound trees, and /usr/local whole when the interpreter is not in it."""
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    found = [
        f"{top}/{kind}"
        for top in (f"{prefix}/lib/{version}", f"/usr/lib/{version}", "/usr/lib/python3", f"/usr/local/lib/{version}")
        for kind in ("site-packages", "dist-packages")
    ]
    local = [] if prefix == "/usr/local" or prefix.startswith("/usr/local/") else ["/usr/local"]
    return [f for f in dict.fromkeys(local + found) if os.path.isdir(f) and not f.startswith(tuple(local))]


def bwrap_command(limits: Limits, info_fd: int | None = None) -> list[str]:
    """The command prefix that runs one sandboxed interpreter (without its arguments); bwrap writes
    the pid of the sandbox's pid 1 (the interpreter itself, --as-pid-1) to `info_fd` as JSON.

    As root, the prefix is the launcher (`sandbox_scripts.LAUNCHER`): it drops to `sandbox_ids()`
    before bwrap starts, so the sandbox is never host root; otherwise bwrap runs as this user."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        raise FileNotFoundError("bwrap")
    missing = [o for o in NEEDED_OPTIONS if o not in _bwrap_help(bwrap)]
    if missing:
        raise OSError(f"bubblewrap is too old (no {', '.join(missing)}; 0.8 or newer is needed)")
    exe, prefix = _interpreter()
    cmd = [bwrap, "--unshare-all", "--unshare-user", "--disable-userns", "--as-pid-1"]
    cmd += ["--die-with-parent", "--new-session", "--uid", "65534", "--gid", "65534", "--hostname", "sandbox"]
    cmd += ["--ro-bind", "/usr", "/usr"]
    for top in ("/bin", "/sbin", "/lib", "/lib32", "/lib64"):
        if os.path.islink(top):
            cmd += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            cmd += ["--ro-bind", top, top]
    if not prefix.startswith("/usr/"):
        cmd += ["--ro-bind", prefix, prefix]
    for folder in _site_folders(prefix):  # an empty read-only folder over each
        cmd += ["--perms", "0555", "--size", "4096", "--tmpfs", folder, "--remount-ro", folder]
    cmd += ["--proc", "/proc"]
    for knob in PROC_KNOBS:
        if os.path.exists(f"/proc/{knob}"):
            cmd += ["--ro-bind", f"/proc/{knob}", f"/proc/{knob}"]
    cmd += ["--dir", "/dev"]
    for dev in DEVICES:
        cmd += ["--dev-bind", f"/dev/{dev}", f"/dev/{dev}"]
    for i, name in enumerate(("stdin", "stdout", "stderr")):
        cmd += ["--symlink", f"/proc/self/fd/{i}", f"/dev/{name}"]
    cmd += ["--symlink", "/proc/self/fd", "/dev/fd"]
    cmd += ["--size", str(limits.tmpfs_mb << 20), "--tmpfs", "/tmp"]
    cmd += ["--remount-ro", "/"]  # last: the only writable place left is the size-capped /tmp
    cmd += ["--chdir", "/tmp", "--clearenv", "--setenv", "PATH", "/usr/bin:/bin", "--setenv", "HOME", "/tmp"]
    cmd += ["--setenv", "TMPDIR", "/tmp", "--setenv", "LANG", "C.UTF-8", "--setenv", "PYTHONHASHSEED", "0"]
    cmd += [] if info_fd is None else ["--info-fd", str(info_fd)]
    launcher = _launcher()
    return [*launcher, *cmd, exe] if launcher else [shutil.which("env") or "/usr/bin/env", "-i", *cmd, exe]


def _launcher(env: dict | None = None) -> list[str]:
    """As root, the command prefix that drops to `sandbox_ids()` and then execs what follows it with
    `env` (empty by default); [] when this process is not root."""
    ids = sandbox_ids()
    if ids is None:
        return []
    exe, prefix = _interpreter()
    hide = _unreachable_tops(prefix)
    launch = {"uid": ids[0], "gid": ids[1], "hide": hide, "keep": [prefix] if hide else [], "env": env or {}}
    return [exe, "-I", "-S", "-c", LAUNCHER, json.dumps(launch)]


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
    except (OSError, InvalidInput) as exc:
        return Isolation(False, UNSAFE, str(exc), has_filter)
    try:
        done = subprocess.run(
            [*cmd, "-I", "-c", "import os; print(os.getuid())"], capture_output=True, timeout=30, env={}
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return Isolation(False, UNSAFE, f"bwrap could not start: {exc}", has_filter)
    if done.returncode != 0 or done.stdout.strip() != b"65534":
        why = done.stderr.decode(errors="replace").strip().splitlines()[-1:] or [f"exit code {done.returncode}"]
        ids = sandbox_ids()
        who = f" as host uid {ids[0]} (this process is root; sandboxes never run as root)" if ids else ""
        return Isolation(False, UNSAFE, f"bwrap could not create the namespaces{who} ({why[0]})", has_filter)
    return Isolation(True, ISOLATED, "", has_filter)


def unavailable_message(iso: Isolation) -> str:
    return (
        f"Generated code needs OS isolation to run, and it is not available here: {iso.reason}. "
        f"To fix it, {INSTALL}; in a container, also allow user namespaces (e.g. docker run "
        "--security-opt seccomp=unconfined --security-opt apparmor=unconfined). As root, sandboxes drop to "
        f"host uid {SANDBOX_UID} (or NIRVANA_SANDBOX_UID) first, which needs unprivileged user namespaces "
        "(sysctl user.max_user_namespaces above 0; kernel.unprivileged_userns_clone=1 where it exists), or run "
        "the evaluator as an ordinary user. Or accept the risk of running "
        f"it as plain processes (of your user, or of the sandbox uid as root), with only rlimits and a seccomp "
        f"filter: pass {UNSAFE_FLAG} (CLI) "
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


def _host_user() -> str:
    ids = sandbox_ids()
    return f"host uid {ids[0]} (dropped from root)" if ids else f"host uid {os.geteuid()} (yours)"


def isolation(allow_unsandboxed: bool = False) -> dict:
    """What the sandbox does on this host (for the output, every result and the app's notice)."""
    iso = probe()
    return {
        "isolation": ISOLATED if iso.active else (UNSAFE if allow_unsandboxed else "unavailable"),
        "process": "two bubblewrap sandboxes (candidate code, tests) talking over pipes"
        if iso.active
        else "two plain child processes (candidate code, tests) talking over pipes",
        "namespaces": f"user, pid, network, ipc, uts, cgroup; uid 65534 inside, {_host_user()}; the program is "
        "pid 1; read-only root, /usr and interpreter, no installed packages, a size-capped /tmp"
        if iso.active
        else "none",
        "seccomp": FILTER_SUMMARY if iso.seccomp else "not on this architecture",
        "reason": "" if iso.active else iso.reason,
        "runs": iso.active or allow_unsandboxed,
        "limits": asdict(Limits()),
        "line": isolation_line(allow_unsandboxed, iso),
    }


def isolation_line(allow_unsandboxed: bool = False, iso: Isolation | None = None) -> str:
    """One line for the CLI and the app: which isolation generated code runs under."""
    iso = iso or probe()
    filt = f"seccomp ({FILTER_SUMMARY})" if iso.seccomp else "no seccomp (not built for this CPU)"
    if iso.active:
        return (
            f"isolation: bubblewrap (user/pid/net/ipc/uts namespaces, uid 65534 = {_host_user()}, "
            f"read-only root and /usr, no site-packages, {Limits().tmpfs_mb} MB /tmp), {filt}, rlimits"
        )
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
    common = {"limits": rlimits, "seccomp": bpf.hex() if bpf else "", "message_cap": lim.message_mb << 20}
    configs = ({**common, "source": completion}, {**common, "token": token, "tests": tests})
    env, work, plain = {}, None, []
    if mode != ISOLATED:  # plain processes: their own temporary directory as cwd, HOME and TMPDIR; never root
        work = tempfile.mkdtemp(prefix="nirvana-unsandboxed-")
        env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "PYTHONHASHSEED": "0", "HOME": work, "TMPDIR": work}
        if ids := sandbox_ids():
            os.chown(work, *ids)
        plain = [*_launcher(env), _interpreter()[0]]
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
            prefix = bwrap_command(lim, info_w) if mode == ISOLATED else plain
            argv = [*prefix, "-I", "-c", script, f"{MARKER}-{os.getpid()}-{name}", *map(str, keep)]
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
