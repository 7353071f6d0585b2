"""Red team: generated code tries every escape found against the audit-hook sandbox (issue 19).

Each payload runs through the real sandbox (`run_program`, or `run_tests` for verdicts) and each
test asserts that the side effect did not happen on the host: the canary file is still there,
the listeners accepted nothing, no file appeared in the read-only system folders, the parent's
memory stayed bounded, the call returned within its limit plus a margin, nothing outlived the run,
and a forged pass is a fail. Payloads print ESCAPED when an action they try succeeds.

These tests need bubblewrap to create namespaces; they skip only where it cannot (with the reason).
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import sys
import threading
import time
from pathlib import Path

import pytest

from nirvana.accuracy.mbpp import SandboxedPassAt1
from nirvana.accuracy.sandbox import MARKER, Limits, probe, run_program, run_tests

ISO = probe()
pytestmark = pytest.mark.skipif(not ISO.active, reason=f"no OS isolation on this host: {ISO.reason}")

QUICK = Limits(timeout_s=4.0, cpu_s=4)
PREFIX = os.path.realpath(sys.base_prefix)


def sandboxed_pids() -> list[int]:
    """Sandboxed processes this test process started (another pytest-xdist worker's runs are its own business)."""
    mine = f"{MARKER}-{os.getpid()}-".encode()
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if mine in (entry / "cmdline").read_bytes():
                    pids.append(int(entry.name))
            except OSError:
                continue
    return pids


@pytest.fixture(autouse=True)
def nothing_outlives_the_run():
    yield
    assert sandboxed_pids() == [], "a sandboxed process outlived its run"


@pytest.fixture
def canary(tmp_path):
    path = tmp_path / "canary.txt"
    path.write_text("still here")
    return path


def try_each(*snippets: str) -> str:
    """A program that runs each snippet, printing ESCAPED if it did not raise."""
    body = "".join(
        f"try:\n{''.join('    ' + line + chr(10) for line in s.splitlines())}    print('ESCAPED', {i})\n"
        f"except BaseException as e:\n    print('blocked', {i}, type(e).__name__, e)\n"
        for i, s in enumerate(snippets)
    )
    return "import os, sys, stat\n" + body


def assert_blocked(out, count: int) -> None:
    assert "ESCAPED" not in out.stderr_tail, out.stderr_tail
    assert out.stderr_tail.count("blocked") == count, out.stderr_tail


def test_switching_the_audit_hook_off_gains_nothing(tmp_path):
    made = tmp_path / "made-by-id"
    program = try_each(
        "m = sys.modules['__main__']\nfor k in ('BLOCK', 'WRITES', 'workdir'):\n    setattr(m, k, ())",
        "import gc\n[setattr(f, '__code__', (lambda e, a: None).__code__) for f in gc.get_objects() "
        "if callable(f) and getattr(f, '__name__', '') == 'hook']\nimport os.path\nos.path.realpath = lambda p: p",
        f"import subprocess\nprint(subprocess.run(['id'], capture_output=True).stdout)\n"
        f"subprocess.run(['touch', {str(made)!r}])",
    )
    out = run_program(program, QUICK)
    assert "ESCAPED 2" not in out.stderr_tail and "uid=" not in out.stderr_tail
    assert "Operation not permitted" in out.stderr_tail  # seccomp: no new process
    assert not made.exists()


def test_no_process_can_be_started_by_any_route(tmp_path):
    made = tmp_path / "made-by-sh"
    sh = f"['/bin/sh', '-c', 'touch {made}']"
    program = try_each(
        f"import subprocess\nsubprocess._USE_POSIX_SPAWN = False\nsubprocess.Popen({sh}).wait()",
        "import _posixsubprocess, subprocess\nsubprocess._fork_exec = _posixsubprocess.fork_exec\n"
        f"subprocess._USE_POSIX_SPAWN = False\nsubprocess.Popen({sh}, close_fds=False).wait()",
        f"os.posix_spawn('/bin/sh', {sh}, {{}})",
        "pid = os.fork()\nif pid == 0:\n    os._exit(0)",
        f"os.execv('/bin/sh', {sh})",
        "import multiprocessing as mp\np = mp.get_context('spawn').Process(target=print)\np.start()\np.join()",
        "import multiprocessing as mp\np = mp.get_context('fork').Process(target=print)\np.start()\np.join()",
        f"assert os.system('touch {made}') == 0",
    )
    out = run_program(program, QUICK)
    assert_blocked(out, 8)
    assert not made.exists()


def test_writes_and_deletes_outside_by_descriptor_never_reach_the_host(canary):
    folder = str(canary.parent)
    escape = f"nirvana-escape-{secrets.token_hex(4)}"
    targets = ["/usr", PREFIX, f"{PREFIX}/lib"]
    program = try_each(
        f"d = os.open({folder!r}, os.O_RDONLY)\nos.unlink('canary.txt', dir_fd=d)",
        f"os.remove({str(canary)!r})",
        *[
            f"d = os.open({t!r}, os.O_RDONLY)\nos.close(os.open({escape!r}, os.O_CREAT | os.O_WRONLY, dir_fd=d))"
            for t in targets
        ],
        f"d = os.open('/usr', os.O_RDONLY)\nos.mkdir({escape!r}, dir_fd=d)",
        f"d = os.open({PREFIX!r}, os.O_RDONLY)\nos.link('bin', {escape!r}, src_dir_fd=d, dst_dir_fd=d)",
        f"os.symlink('/tmp', {f'{PREFIX}/{escape}'!r})",
        "fd = os.open(sys.executable, os.O_RDONLY)\nos.fchmod(fd, 0o777)",
        "fd = os.open(sys.executable, os.O_RDONLY)\nos.fchown(fd, 65534, 65534)",
        "os.setxattr(sys.executable, 'user.nirvana', b'x')",
        f"os.mkfifo({f'{PREFIX}/{escape}'!r})",
        "os.mkfifo('/tmp/fifo')",
        "os.mknod('/tmp/null', stat.S_IFCHR | 0o666, os.makedev(1, 3))",
        f"open({f'{PREFIX}/{escape}'!r}, 'w').write('x')",
    )
    mode = os.stat(os.path.realpath(sys.executable)).st_mode
    out = run_program(program, QUICK)
    assert_blocked(out, 15)
    assert canary.read_text() == "still here"
    for t in targets:
        assert not os.path.lexists(os.path.join(t, escape))
    assert os.stat(os.path.realpath(sys.executable)).st_mode == mode


def test_its_own_tmp_is_writable_but_capped():
    out = run_program("open('/tmp/a', 'w').write('x')\nassert open('a').read() == 'x'\n", QUICK)
    assert out.passed
    big = run_program("open('/tmp/big', 'wb').write(b'x' * (200 << 20))\n", QUICK)  # over 16 MB files, 64 MB tmpfs
    assert not big.passed


def test_secrets_of_the_host_cannot_be_read(monkeypatch):
    secret = secrets.token_hex(16)
    monkeypatch.setenv("NIRVANA_SECRET_FOR_TEST", secret)
    program = try_each(
        "print(open('/etc/shadow').read())",
        "print(open('/etc/passwd').read())",
        f"print(open('/proc/{os.getpid()}/environ', 'rb').read())",
        "print(os.listdir('/root/.ssh'))",
    ) + (
        "print('pids', [p for p in os.listdir('/proc') if p.isdigit()])\n"
        "try:\n    open('/proc/1/environ', 'rb').read()\nexcept OSError as e:\n    print('environ', e.errno)\n"
        "print('env', sorted(os.environ))\n"
    )
    out = run_program(program, QUICK)
    assert_blocked(out, 4)
    assert secret not in out.stderr_tail and "root:" not in out.stderr_tail
    assert "pids ['1']" in out.stderr_tail  # the program is pid 1 and alone (--as-pid-1)
    assert "environ 13" in out.stderr_tail  # not dumpable: not even its own /proc environ
    assert "env ['HOME', 'LANG', 'PATH', 'PWD', 'PYTHONHASHSEED', 'TMPDIR']" in out.stderr_tail  # bwrap's --clearenv


def test_no_network_to_a_listener_on_the_host(tmp_path):
    tcp = socket.socket()
    tcp.bind(("127.0.0.1", 0))
    tcp.listen()
    tcp.setblocking(False)
    port = tcp.getsockname()[1]
    path = str(tmp_path / "s.sock")
    unix = socket.socket(socket.AF_UNIX)
    unix.bind(path)
    unix.listen()
    unix.setblocking(False)
    program = try_each(
        f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=1).sendall(b'hi')",
        f"import socket\ns = socket.socket(socket.AF_UNIX)\ns.connect({path!r})\ns.sendall(b'hi')",
        "import socket\nsocket.socket(socket.AF_NETLINK, socket.SOCK_RAW)",
        f"import urllib.request\nurllib.request.urlopen('http://127.0.0.1:{port}', timeout=1)",
    )
    try:
        out = run_program(program, QUICK)
        assert_blocked(out, 4)
        for listener in (tcp, unix):
            with pytest.raises(BlockingIOError):
                listener.accept()
    finally:
        tcp.close()
        unix.close()


def test_a_program_holding_the_pipes_is_killed_at_the_limit():
    program = (
        "import os, threading, time\n"
        "try:\n    os.setsid()\nexcept OSError:\n    pass\n"
        "try:\n    os.fork()\nexcept OSError as e:\n    print('no fork', e)\n"
        "threading.Thread(target=time.sleep, args=(100,)).start()\n"
        "os.set_inheritable(1, True)\n"
        "time.sleep(100)\n"
    )
    start = time.perf_counter()
    out = run_program(program, Limits(timeout_s=2.0, cpu_s=10))
    took = time.perf_counter() - start
    assert out.status == "timeout" and took < 2.0 + 3.0


def test_a_test_that_hangs_in_the_candidate_is_killed_at_the_limit():
    start = time.perf_counter()
    out = run_tests("import time\ndef f():\n    time.sleep(100)\n", "assert f() is None\n", Limits(timeout_s=2.0))
    assert out.status == "timeout" and time.perf_counter() - start < 2.0 + 3.0


def _rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def test_a_gigabyte_of_output_keeps_the_parent_small():
    program = (
        "import os\nchunk = b'x' * (1 << 20)\nfor _ in range(512):\n    os.write(1, chunk)\n    os.write(2, chunk)\n"
        "print('done')\n"
    )
    base, peak, stop = _rss_mb(), [0.0], threading.Event()

    def sample():
        while not stop.is_set():
            peak[0] = max(peak[0], _rss_mb())
            time.sleep(0.02)

    watcher = threading.Thread(target=sample)
    watcher.start()
    try:
        out = run_program(program, Limits(timeout_s=30.0, cpu_s=30))
    finally:
        stop.set()
        watcher.join()
    assert peak[0] - base < 64, f"parent RSS grew {peak[0] - base:.0f} MB"
    assert out.passed and out.stderr_tail.endswith("done")  # all of it was read (and dropped), to its end
    assert len(out.stderr_tail) <= 4000 and out.seconds < 30 + 3


def test_a_fork_storm_starts_nothing():
    program = (
        "import os\nn = 0\nfor _ in range(10000):\n    try:\n        os.fork()\n        n += 1\n"
        "    except OSError:\n        pass\nprint('forked', n)\n"
    )
    out = run_program(program, QUICK)
    assert "forked 0" in out.stderr_tail and out.seconds < QUICK.timeout_s + 3


def test_forged_passes_are_failures():
    tests = "assert add(2, 3) == 5\nassert add(1, 1) == 2\nassert all(map(lambda p: add(*p) == sum(p), [(1, 2)]))\n"
    wrong = "def add(a, b):\n    return a * b\n"
    forgeries = {
        "write 'passed' to every descriptor, then exit 0": wrong
        + "import os\nfor fd in range(3, 256):\n    try:\n        os.write(fd, b'x' * 32 + b' passed\\n')\n"
        "    except OSError:\n        pass\nos._exit(0)\n",
        "exit 0 before the tests": wrong + "import sys\nsys.exit(0)\n",
        "an answer equal to everything": "class Any:\n    def __eq__(self, other):\n        return True\n"
        "    __hash__ = object.__hash__\ndef add(a, b):\n    return Any()\n",
        "an int subclass equal to everything": "class Any(int):\n    def __eq__(self, other):\n        return True\n"
        "    __hash__ = int.__hash__\ndef add(a, b):\n    return Any(0)\n",
        "StopIteration ending the tests' map() early": "def add(a, b):\n    raise StopIteration\n",
        "a fake ready message with a constant": wrong
        + "import os, json, struct, sys\nm = json.dumps({'ready': True, 'names': {'add': ['i', 5]}}).encode()\n"
        "os.write(int(sys.argv[3]), struct.pack('>Q', len(m)) + m)\nos._exit(0)\n",
    }
    for name, completion in forgeries.items():
        out = run_tests(completion, tests, QUICK)
        assert not out.passed, name
    assert run_tests("def add(a, b):\n    return a + b\n", tests, QUICK).passed  # the honest one passes
    only_map = "assert all(map(lambda p: add(*p) == sum(p), [(1, 2), (3, 4)]))\n"  # StopIteration would end it
    assert not run_tests(forgeries["StopIteration ending the tests' map() early"], only_map, QUICK).passed


def test_shadowing_a_builtin_the_tests_compare_with_is_no_pass():
    tests = "assert abs(area(2) - 12.566) < 0.01\nassert set(pair(1)) == {1, 2}\n"
    cheat = "def abs(x):\n    return 0\ndef set(x):\n    return 0\n"
    cheat += "def area(r):\n    return 0\ndef pair(x):\n    return []\n"
    assert not run_tests(cheat, tests, QUICK).passed
    honest = "import math\ndef area(r):\n    return math.pi * r * r\ndef pair(x):\n    return [x, x + 1]\n"
    assert run_tests(honest, tests, QUICK).passed


def test_the_metric_scores_a_forgery_as_zero():
    metric = SandboxedPassAt1(QUICK)
    completion = "def square(x):\n    return x + x\nimport os\n"
    completion += "for fd in range(256):\n    try:\n        os.write(fd, b'ok')\n    except OSError:\n        pass\n"
    completion += "os._exit(0)\n"
    assert metric(references=["assert square(3) == 9"], predictions=[completion]) == 0.0
    assert metric.isolation == {"bubblewrap"}


def test_inside_the_sandbox_it_is_nobody_with_no_capabilities_and_seccomp():
    program = (
        "import os\nprint('uid', os.getuid(), os.getgid())\n"
        "status = open('/proc/self/status').read()\n"
        "print([l for l in status.splitlines() if l.startswith(('CapEff', 'Seccomp:', 'NoNewPrivs'))])\n"
        "print('root', sorted(os.listdir('/')))\nprint('pids', [p for p in os.listdir('/proc') if p.isdigit()])\n"
    )
    out = run_program(program, QUICK)
    assert out.passed
    assert "uid 65534 65534" in out.stderr_tail
    assert "'CapEff:\\t0000000000000000'" in out.stderr_tail and "'Seccomp:\\t2'" in out.stderr_tail
    assert "'etc'" not in out.stderr_tail and "'home'" not in out.stderr_tail and "'work'" not in out.stderr_tail


def test_killing_the_namespace_takes_every_process_in_it_down():
    """Without seccomp (the launcher alone, no bootstrap), a program that forks is still killed whole."""
    import subprocess

    from nirvana.accuracy import sandbox

    info_r, info_w = os.pipe()
    program = "import os, time\nfor _ in range(3):\n    os.fork()\ntime.sleep(100)\n"
    cmd = [*sandbox.bwrap_command(QUICK, info_w), "-c", program, f"{MARKER}-{os.getpid()}-forker"]
    proc = subprocess.Popen(cmd, pass_fds=(info_w,), env={}, start_new_session=True)
    os.close(info_w)
    try:
        info = os.read(info_r, 4096)
        deadline = time.time() + 10
        while len(sandboxed_pids()) < 8 and time.time() < deadline:  # 2**3 forked pythons
            time.sleep(0.05)
        assert len(sandboxed_pids()) >= 8
        sandbox._kill(proc, info)
    finally:
        os.close(info_r)
    assert sandboxed_pids() == []  # all gone when _kill returns


def test_runs_in_parallel_threads_do_not_mix():
    from concurrent.futures import ThreadPoolExecutor

    def one(n: int) -> bool:
        return run_tests(f"def f():\n    return {n}\n", f"assert f() == {n}\n", QUICK).passed

    with ThreadPoolExecutor(4) as pool:
        assert all(pool.map(one, range(8)))


# Second round (issue 41): the sandbox as host root, memory outside the caps, pid 1, tasks and kernel
# objects, forged verdicts through __builtins__, large honest programs, what the sandbox can see.


class Sampler:
    """Calls `read()` every 10 ms in a thread while the block runs; keeps every value."""

    def __init__(self, read):
        self.read, self.values, self._stop = read, [], threading.Event()

    def __enter__(self):
        def loop():
            while not self._stop.is_set():
                self.values.append(self.read())
                time.sleep(0.01)

        self._thread = threading.Thread(target=loop, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


def host_shmem_mb() -> float:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("Shmem:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no Shmem line in /proc/meminfo")


def sandboxed_status() -> list[dict[str, str]]:
    """/proc/<pid>/status of every sandboxed process that has left the root launcher (exec'd bwrap)."""
    found = []
    for pid in sandboxed_pids():
        try:
            if b"sandbox launcher:" in Path(f"/proc/{pid}/cmdline").read_bytes():
                continue  # still the launcher, which runs as root for a few milliseconds by design
            lines = Path(f"/proc/{pid}/status").read_text().splitlines()
        except OSError:
            continue
        found.append(dict(line.split(":\t", 1) for line in lines if ":\t" in line))
    return found


def test_the_sandbox_is_never_host_root():
    from nirvana.accuracy.sandbox import sandbox_ids

    with Sampler(sandboxed_status) as seen:
        out = run_program("import time\ntime.sleep(1.0)\n", QUICK)
    assert out.passed, out.stderr_tail
    uids = {int(s["Uid"].split()[0]) for batch in seen.values for s in batch}
    expected = sandbox_ids()[0] if os.geteuid() == 0 else os.geteuid()
    assert uids == {expected}, uids  # every process of it, bwrap and pid 1, as that host uid
    assert expected != 0 and 0 not in {int(s["Gid"].split()[0]) for batch in seen.values for s in batch}


def test_host_kernel_settings_cannot_be_changed():
    knob = Path("/proc/sys/kernel/printk_ratelimit")
    before = knob.read_text()
    program = (
        try_each(
            f"open({str(knob)!r}, 'w').write('{int(before) + 1}')",
            "open('/proc/sys/kernel/core_pattern', 'r+')",  # only opened: never written, even where it would work
            "open('/proc/sys/kernel/printk', 'r+')",
            "open('/proc/sysrq-trigger', 'r+')",
            "import glob\nopen(sorted(glob.glob('/proc/irq/*/smp_affinity'))[0], 'r+')",
        )
        + "print('mounts', [l.split()[4] for l in open('/proc/self/mountinfo') if ' /proc/' in l])\n"
    )
    try:
        for _ in range(2):  # a second problem of the same evaluation sees what the first left
            out = run_program(program, QUICK)
            assert_blocked(out, 5)
            assert knob.read_text() == before
    finally:
        if knob.read_text() != before:  # never leave the host changed, even when the test fails
            knob.write_text(before)
    for name in ("sys", "irq"):
        assert f"'/proc/{name}'" in out.stderr_tail  # bound read-only, not only refused by ownership


def test_every_writable_place_is_bounded():
    """Each place the payload can reach gets 320 MB thrown at it; the host's shared memory (where tmpfs
    pages live) and the parent stay bounded by the 64 MB /tmp."""
    program = try_each(
        *[
            f"for i in range(22):  # 15 MB files: under the file-size rlimit\n"
            f"    with open({place!r} + f'/fill{{i}}', 'wb') as f:\n        for _ in range(15):\n"
            "            f.write(b'x' * (1 << 20))"
            for place in ("/", "/root", "/dev", "/dev/shm", "/usr", PREFIX, "/proc")
        ],
        "os.memfd_create('fill')",
        "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
        "assert libc.shmget(0, 320 << 20, 0o1600) >= 0, ctypes.get_errno()",
        "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\nassert libc.msgget(0, 0o1600) >= 0",
        "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
        "assert libc.mq_open(b'/fill', os.O_CREAT | os.O_RDWR, 0o600, None) >= 0",
    ) + (
        "total = 0\nfor i in range(40):\n    try:\n        with open(f'/tmp/fill{i}', 'wb') as f:\n"
        "            for _ in range(15):\n                f.write(b'x' * (1 << 20))\n                total += 1\n"
        "    except OSError as e:\n        print('tmp full', e.errno)\n        break\n"
        "print('tmp MB', total)\nimport time\ntime.sleep(0.5)\n"
    )
    base = host_shmem_mb()
    with Sampler(host_shmem_mb) as shmem:
        out = run_program(program, Limits(timeout_s=20.0, cpu_s=20))
    assert "ESCAPED" not in out.stderr_tail and out.stderr_tail.count("blocked") == 11, out.stderr_tail
    assert "tmp full 28" in out.stderr_tail  # ENOSPC: the tmpfs cap, not a file-size limit
    tmp_mb = int(out.stderr_tail.split("tmp MB ")[1].split()[0])
    assert 48 <= tmp_mb <= QUICK.tmpfs_mb
    grew = max(shmem.values) - base
    assert grew < QUICK.tmpfs_mb + 32, f"host shared memory grew {grew:.0f} MB"


def test_pid_1_is_the_filtered_program_and_nothing_reaches_into_it():
    program = (
        "import os, ctypes\nprint('me', os.getpid(), sorted(p for p in os.listdir('/proc') if p.isdigit()))\n"
        "print([l for l in open('/proc/1/status').read().splitlines() if l.startswith(('Seccomp:', 'NoNewPrivs'))])\n"
    ) + try_each(
        "open('/proc/1/mem', 'r+b')",
        "open('/proc/self/mem', 'rb')",
        "fd = os.pidfd_open(1)",
        "libc = ctypes.CDLL(None, use_errno=True)\nassert libc.syscall(438, 0, 0, 0) >= 0, ctypes.get_errno()",
        "libc = ctypes.CDLL(None, use_errno=True)\nassert libc.syscall(310, 1, 0, 0, 0, 0, 0) >= 0",  # process_vm_readv
        "libc = ctypes.CDLL(None, use_errno=True)\nassert libc.ptrace(16, 1, 0, 0) == 0, ctypes.get_errno()",
    )
    out = run_program(program, QUICK)
    assert_blocked(out, 6)
    assert "me 1 ['1']" in out.stderr_tail  # --as-pid-1: no bubblewrap init inside, the program is alone
    assert "'Seccomp:\\t2'" in out.stderr_tail and "'NoNewPrivs:\\t1'" in out.stderr_tail


RAW_THREADS = r"""
import ctypes, mmap, os, threading, time
libc = ctypes.CDLL(None, use_errno=True)
# a thread made by a bare clone(CLONE_THREAD) on a 4 KB stack, that only ever calls pause()
code = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
code.write(b"\xb8\x22\x00\x00\x00\x0f\x05\xeb\xf7")  # mov eax, 34 (pause); syscall; jmp back
entry = ctypes.addressof(ctypes.c_char.from_buffer(code))
flags = 0x100 | 0x200 | 0x400 | 0x800 | 0x10000 | 0x40000  # VM FS FILES SIGHAND THREAD SYSVSEM
stacks, raw = [], 0
for _ in range(2000):
    stack = ctypes.create_string_buffer(4096)
    stacks.append(stack)
    top = (ctypes.addressof(stack) + 4096 - 64) & ~15
    ctypes.c_void_p.from_address(top).value = entry  # the wrapper's `ret` in the child lands here
    if libc.syscall(56, flags, ctypes.c_void_p(top), 0, 0, 0) < 0:
        break
    raw += 1
threading.stack_size(32768)
made = 0
try:
    for _ in range(2000):
        threading.Thread(target=time.sleep, args=(3,), daemon=True).start()
        made += 1
except RuntimeError:
    pass
inotify = sum(libc.inotify_init1(0) >= 0 for _ in range(200))
print("raw", raw, "threads", made, "inotify", inotify, flush=True)
time.sleep(1.5)
"""


def test_tasks_and_kernel_objects_are_bounded():
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)

    def tasks_and_inotify():
        fd = libc.inotify_init1(0)
        if fd >= 0:
            os.close(fd)
        return sum(int(s.get("Threads", "1")) for s in sandboxed_status()), fd >= 0

    with Sampler(tasks_and_inotify) as seen:
        out = run_program(RAW_THREADS, Limits(timeout_s=10.0, cpu_s=10))
    assert "inotify 0" in out.stderr_tail, out.stderr_tail  # the filter: no inotify instance at all
    raw = int(out.stderr_tail.split("raw ")[1].split()[0])
    made = int(out.stderr_tail.split("threads ")[1].split()[0])
    assert raw + made < QUICK.nproc, out.stderr_tail  # RLIMIT_NPROC of the unprivileged uid
    assert max(n for n, _ in seen.values) <= QUICK.nproc + 3  # + the judge and the two outer bwraps
    assert all(ok for _, ok in seen.values)  # the parent's user could make inotify instances throughout


FORGE = """
import builtins as _b
class _Key(str):
    def startswith(self, *args):
        return False
def _zero(*args, **kwargs):
    return 0
_fake = {}
for _k, _v in vars(_b).items():
    if isinstance(_v, type) and issubclass(_v, BaseException) or _k.startswith("__"):
        _fake[_k] = _v
    elif callable(_v):
        _fake[_k] = _zero
_fake["range"] = lambda *args: []
_g = globals()
del _g["__builtins__"]
_g[_Key("__builtins__")] = _fake
"""


def test_a_forged_builtins_entry_does_not_pass_humaneval():
    """The round-2 forgery: a `__builtins__` entry (a str subclass whose startswith says no) made every
    builtin of the tests answer 0, and range() empty; on the first sandbox it scored HumanEval/4, /33
    and /37 as passed with wrong answers."""
    from nirvana.accuracy.data import load_docs

    docs = {d["task_id"]: d for d in load_docs("humaneval")}
    for task_id in ("HumanEval/4", "HumanEval/33", "HumanEval/37"):
        doc = docs[task_id]
        tests = f"{doc['test']}\ncheck({doc['entry_point']})\n"
        forged = run_tests(doc["prompt"] + "    return 0.0\n" + FORGE, tests, QUICK)
        assert not forged.passed, task_id
        honest = run_tests(doc["prompt"] + doc["canonical_solution"], tests, QUICK)
        assert honest.passed, (task_id, honest.stderr_tail)
    metric = SandboxedPassAt1(QUICK)
    doc = docs["HumanEval/4"]
    tests = f"{doc['test']}\ncheck({doc['entry_point']})\n"
    assert metric(references=[tests], predictions=[doc["prompt"] + "    return 0.0\n" + FORGE]) == 0.0


def test_the_judge_refuses_dunder_names_whatever_the_candidate_sends():
    """The candidate's own loader skips dunder names, but it runs beside generated code that can patch it:
    here the completion writes its own ready message offering `__builtins__`; the judge refuses it."""
    tests = "assert abs(area(2) - 12.566) < 0.01\n"
    for offered in ("__builtins__", "__import__", "__name__"):
        forged = "import os, json, struct, sys\n"
        forged += f"m = json.dumps({{'ready': True, 'names': {{{offered!r}: ['V'], 'area': ['V']}}}}).encode()\n"
        forged += "os.write(int(sys.argv[3]), struct.pack('>Q', len(m)) + m)\nos._exit(0)\n"
        out = run_tests(forged, tests, QUICK)
        assert not out.passed and f"a name the tests may not take ({offered!r})" in out.stderr_tail, out.stderr_tail


def test_builtins_the_tests_use_are_the_judges_own():
    tests = "assert sorted(f([3, 1])) == [1, 3]\nassert abs(g() - 2.5) < 1e-9\nassert len(set(f([1, 1]))) == 1\n"
    wrong = "def f(xs):\n    return xs\ndef g():\n    return 0.0\n"
    assert not run_tests(wrong + FORGE, tests, QUICK).passed
    for name in ("sorted", "abs", "len", "set"):  # a plain global of the same name is not taken either
        assert not run_tests(wrong + f"def {name}(*a):\n    return 0\n", tests, QUICK).passed, name
    assert run_tests("def f(xs):\n    return xs\ndef g():\n    return 2.5\n", tests, QUICK).passed


def test_a_large_honest_table_passes():
    table = "TABLE = list(range(3_000_000))\ndef f(i):\n    return TABLE[i]\n"  # about 40 MB as a message
    out = run_tests(table, "assert f(5) == 5\nassert f(2_999_999) == 2_999_999\n", Limits(timeout_s=30, cpu_s=30))
    assert out.passed, out.stderr_tail
    used = run_tests(table, "assert len(TABLE) == 3_000_000 and TABLE[7] == 7\n", Limits(timeout_s=30, cpu_s=30))
    assert used.passed, used.stderr_tail  # too big to copy: the tests get a handle to it


def test_the_sandbox_sees_the_standard_library_and_no_installed_packages():
    from nirvana.accuracy.sandbox import DEVICES, PROC_KNOBS, _site_folders

    sites = _site_folders(PREFIX)
    assert any(s.startswith(PREFIX) for s in sites)  # the interpreter's own site-packages (pip lives there)
    program = (
        "import os, sys, json\n"
        "print('sites', json.dumps({p: os.listdir(p) for p in sys.path if p.endswith(('site-packages', "
        "'dist-packages')) and os.path.isdir(p)}))\n"
        "print('mounts', json.dumps([l.split()[4] for l in open('/proc/self/mountinfo')]))\n"
        "import json, email, ctypes, decimal, sqlite3, hashlib\nprint('stdlib ok')\n"
    ) + try_each(*[f"print(os.listdir({s!r}))\nassert os.listdir({s!r})" for s in sites])
    out = run_program(program, QUICK)
    assert "stdlib ok" in out.stderr_tail, out.stderr_tail
    assert_blocked(out, len(sites))
    shown = json.loads(out.stderr_tail.split("sites ")[1].splitlines()[0])
    assert all(v == [] for v in shown.values()), shown
    mounts = json.loads(out.stderr_tail.split("mounts ")[1].splitlines()[0])
    allowed = {"/", "/usr", PREFIX, "/proc", "/tmp", *sites}
    allowed |= {f"/proc/{k}" for k in PROC_KNOBS} | {f"/dev/{d}" for d in DEVICES}
    assert set(mounts) <= allowed, set(mounts) - allowed
