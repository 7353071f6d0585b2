"""The programs the sandbox starts, as source text (run with `python -I -c`, never imported here).

CANDIDATE runs the generated code; JUDGE runs the tests. They run in two separate sandboxes
(see `nirvana.accuracy.sandbox`) and talk over two pipes with length-prefixed JSON messages whose
values are plain data (None, bool, int, float, complex, str, bytes, list, tuple, set, frozenset,
dict) or a numbered handle to an object that stays inside the candidate. The judge decodes data by
tag only, so nothing the candidate sends can run code in the judge or compare equal by trickery:
an object whose `__eq__` always says True arrives as a handle, and a handle equals only itself.
Operations the tests apply to a handle (call, attribute, item, len, iter/next, str, repr, bool)
are forwarded to the candidate; equality, ordering and hashing are not (forwarding `==` would hand
the expected value to the candidate). Candidate names never replace, in the tests' namespace, a
builtin type (set, str, tuple, ...), a helper tests compare with (abs, round, sorted, len, ...) or
a standard module (a candidate `abs` that returns 0 would pass `abs(f(x) - y) < 1e-9`); other
builtins can be the task's own function (MBPP 126 asks for a `sum`).

Loading: once the generated code has run, the candidate offers the *names* of its globals (and which
are modules), not their values. The judge refuses any dunder name (the candidate's own loader runs
beside generated code that can patch it, so the judge checks again), collects every name its tests'
code objects mention (`co_names`, nested functions included) and fetches only those, one message
each ("global"). A value whose message would pass the cap comes as a handle instead, so an honest
program with a large table loads whatever the tests touch. The tests then run with the judge's own
`builtins`, set after the candidate's names.

Both programs first read their settings from stdin (until EOF), set their rlimits, make themselves
undumpable and install the seccomp filter (`nirvana.accuracy.seccomp`); only then does the candidate
execute generated code. LAUNCHER is the root-only step before bubblewrap (`sandbox.bwrap_command`).
"""

from __future__ import annotations

COMMON = r"""
import builtins, json, os, resource, struct, sys

def _limits(lim):
    for name, value in (("RLIMIT_CORE", 0), ("RLIMIT_CPU", lim["cpu_s"]), ("RLIMIT_AS", lim["memory_mb"] << 20),
                        ("RLIMIT_FSIZE", lim["file_mb"] << 20), ("RLIMIT_NOFILE", lim["nofile"]),
                        ("RLIMIT_NPROC", lim["nproc"])):
        hard = value + 1 if name == "RLIMIT_CPU" else value
        resource.setrlimit(getattr(resource, name), (value, hard))

def _lock_down(hex_filter):
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    # not dumpable: /proc/<pid>/mem, pidfd_getfd and ptrace of this process need privileges nobody here has
    if libc.prctl(4, 0, 0, 0, 0) != 0:  # PR_SET_DUMPABLE
        raise OSError(ctypes.get_errno(), "could not make the sandbox undumpable")
    if not hex_filter:
        return
    bpf = bytes.fromhex(hex_filter)
    class Prog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]
    buf = ctypes.create_string_buffer(bpf, len(bpf))
    prog = Prog(len(bpf) // 8, ctypes.addressof(buf))
    if libc.prctl(38, 1, 0, 0, 0) != 0 or libc.prctl(22, 2, ctypes.byref(prog), 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "could not install the seccomp filter")

def _setup():
    cfg = json.loads(sys.stdin.buffer.read())
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    _limits(cfg["limits"])
    _lock_down(cfg["seccomp"])
    return cfg

def _dump(obj):
    return json.dumps(obj, separators=(",", ":")).encode()

def _send(fd, obj, data=None):
    data = _dump(obj) if data is None else data
    data = struct.pack(">Q", len(data)) + data
    while data:
        data = data[os.write(fd, data):]

def _recv(fd, cap):
    def exactly(n):
        parts = []
        while n:
            chunk = os.read(fd, min(n, 1 << 20))
            if not chunk:
                raise EOFError("the other side of the sandbox ended")
            parts.append(chunk)
            n -= len(chunk)
        return b"".join(parts)
    (n,) = struct.unpack(">Q", exactly(8))
    if n > cap:
        raise MemoryError("sandbox: a message of %d bytes is over the %d-byte cap" % (n, cap))
    return json.loads(exactly(n))
"""

CANDIDATE = (
    COMMON
    + r"""
def _main():
    import traceback
    req, rep = int(sys.argv[2]), int(sys.argv[3])
    cfg = _setup()
    cap = cfg["message_cap"]  # the largest reply sent as data; a bigger value goes as a handle
    handles = {}

    def handle(obj):
        handles[len(handles) + 1] = obj
        return ["R", len(handles)]

    def enc(v):
        if v is None or isinstance(v, bool):
            return ["n"] if v is None else ["b", bool(v)]
        if isinstance(v, int):
            return ["i", int.__int__(v)]
        if isinstance(v, float):
            return ["f", float.__float__(v)]
        if isinstance(v, complex):
            return ["c", complex.__complex__(v).real, complex.__complex__(v).imag]
        if isinstance(v, str):
            return ["s", str.__str__(v)]
        if isinstance(v, (bytes, bytearray)):
            return ["y", bytes(v).hex()]
        for tag, kind in (("T", tuple), ("L", list), ("S", set), ("F", frozenset)):
            if isinstance(v, kind):
                return [tag, [enc(x) for x in kind.__iter__(v)]]
        if isinstance(v, dict):
            return ["D", [[enc(k), enc(x)] for k, x in dict.items(v)]]
        return handle(v)

    def safe_enc(v):
        try:
            return enc(v)
        except RecursionError:
            return handle(v)

    def dec(v):
        tag = v[0]
        if tag == "R":
            return handles[v[1]]
        if tag in "TLSF":
            return {"T": tuple, "L": list, "S": set, "F": frozenset}[tag](dec(x) for x in v[1])
        if tag == "D":
            return {dec(k): dec(x) for k, x in v[1]}
        return {"n": lambda: None, "b": lambda: v[1], "i": lambda: v[1], "f": lambda: float(v[1]),
                "c": lambda: complex(v[1], v[2]), "s": lambda: v[1], "y": lambda: bytes.fromhex(v[1])}[tag]()

    namespace = {"__name__": "__main__", "__builtins__": builtins}
    try:
        code = compile(cfg["source"], "program.py", "exec")
        del cfg
        exec(code, namespace)
    except BaseException:
        traceback.print_exc()
        sys.stderr.flush()
        _send(rep, {"ready": False})
        os._exit(1)
    sys.stdout.flush()
    names = {}  # only the names and which are modules: the judge asks for the values its tests use
    for name, value in list(namespace.items()):
        if type(name) is not str or str.startswith(name, "__"):
            continue
        if isinstance(value, type(sys)) and isinstance(getattr(value, "__name__", None), str):
            names[name] = ["M", str(value.__name__)]
        else:
            names[name] = ["V"]
    _send(rep, {"ready": True, "names": names})
    ops = {
        "call": lambda o, m: o(*dec(m["a"]), **{k: dec(x) for k, x in m["k"].items()}),
        "getattr": lambda o, m: getattr(o, m["name"]),
        "getitem": lambda o, m: o[dec(m["key"])],
        "len": lambda o, m: len(o),
        "iter": lambda o, m: iter(o),
        "next": lambda o, m: next(o),
        "str": lambda o, m: str(o),
        "repr": lambda o, m: repr(o),
        "bool": lambda o, m: bool(o),
    }
    while True:
        try:
            m = _recv(req, 1 << 30)
        except EOFError:
            os._exit(0)
        try:
            if m["op"] == "global":
                value = namespace[m["name"]]
            else:
                value = ops[m["op"]](handles[m["h"]], m)
            data = _dump({"ok": safe_enc(value)})
            if len(data) > cap:  # too big to hand over as data: the tests get a handle to it
                data = _dump({"ok": handle(value)})
        except BaseException as exc:
            data = _dump({"err": [type(exc).__name__, str(exc)[:2000]]})
        sys.stdout.flush()
        _send(rep, None, data)

_main()
"""
)

JUDGE = (
    COMMON
    + r'''
def _main():
    import importlib, traceback
    verdict, req, rep = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    cfg = _setup()
    token, cap = cfg["token"], cfg["message_cap"]

    class RemoteError(Exception):
        """An exception raised in the candidate (its type is not one of Python's own)."""

    class Remote:
        """A handle to an object inside the candidate: it equals only itself."""
        __slots__ = ("_h",)
        def __init__(self, h):
            object.__setattr__(self, "_h", h)
        def _ask(self, op, **extra):
            return ask({"op": op, "h": self._h, **extra})
        def __call__(self, *args, **kwargs):
            return self._ask("call", a=enc(list(args)), k={str(k): enc(v) for k, v in kwargs.items()})
        def __getattr__(self, name):
            if name.startswith("__"):
                raise AttributeError(name)
            return self._ask("getattr", name=name)
        def __getitem__(self, key):
            return self._ask("getitem", key=enc(key))
        def __len__(self):
            return self._ask("len")
        def __iter__(self):
            return self._ask("iter")
        def __next__(self):
            return self._ask("next")
        def __str__(self):
            return self._ask("str")
        def __repr__(self):
            return self._ask("repr")
        def __bool__(self):
            return self._ask("bool")
        __hash__ = object.__hash__
        def __eq__(self, other):
            return isinstance(other, Remote) and other._h == self._h
        def __ne__(self, other):
            return not self.__eq__(other)

    def ask(message):
        """One request to the candidate; its answer as judge-side data, or its error raised here."""
        _send(req, message)
        reply = _recv(rep, cap)
        if "ok" in reply:
            return dec(reply["ok"])
        name, message_text = reply["err"]
        kind = getattr(builtins, str(name), None)
        if isinstance(kind, type) and issubclass(kind, Exception) and kind.__module__ == "builtins":
            # StopIteration only ends an iteration: from a call it would end the tests' map() early
            if not issubclass(kind, (StopIteration, StopAsyncIteration)) or message["op"] == "next":
                raise kind(message_text)
        raise RemoteError("%s: %s" % (name, message_text))

    remotes = {}

    def dec(v):
        tag = v[0]
        if tag == "R":
            return remotes.setdefault(int(v[1]), Remote(int(v[1])))
        if tag in ("T", "L", "S", "F"):
            return {"T": tuple, "L": list, "S": set, "F": frozenset}[tag](dec(x) for x in v[1])
        if tag == "D":
            return {dec(k): dec(x) for k, x in v[1]}
        if tag == "n":
            return None
        if tag == "b":
            return v[1] is True
        if tag == "i" and type(v[1]) is int:
            return v[1]
        if tag == "f" and type(v[1]) in (int, float):
            return float(v[1])
        if tag == "c":
            return complex(float(v[1]), float(v[2]))
        if tag == "s" and type(v[1]) is str:
            return v[1]
        if tag == "y" and type(v[1]) is str:
            return bytes.fromhex(v[1])
        raise TypeError("sandbox: malformed value from the candidate")

    def enc(v):
        if isinstance(v, Remote):
            return ["R", v._h]
        if v is None:
            return ["n"]
        kind = type(v)
        if kind is bool:
            return ["b", v]
        if kind is int:
            return ["i", v]
        if kind is float:
            return ["f", v]
        if kind is complex:
            return ["c", v.real, v.imag]
        if kind is str:
            return ["s", v]
        if kind in (bytes, bytearray):
            return ["y", bytes(v).hex()]
        for tag, base in (("T", tuple), ("L", list), ("S", set), ("F", frozenset)):
            if isinstance(v, base):
                return [tag, [enc(x) for x in v]]
        if isinstance(v, dict):
            return ["D", [[enc(k), enc(x)] for k, x in v.items()]]
        raise TypeError("sandbox: a %s cannot be passed to the generated code" % kind.__name__)

    helpers = {"abs", "round", "sorted", "len", "all", "any", "isinstance", "issubclass", "repr", "hash", "id",
               "callable", "getattr", "hasattr", "setattr", "iter", "print", "eval", "exec", "compile",
               "__import__", "globals", "locals", "vars", "open"}

    def protected(name):
        """Names the tests compare or normalise with: builtin types, these helpers, standard modules."""
        value = builtins.__dict__.get(name)
        return isinstance(value, type) or name in helpers or name in sys.stdlib_module_names

    def fail(message):
        sys.stderr.write(message + "\n")
        sys.stderr.flush()
        os.write(verdict, ("%s failed\n" % token).encode())
        os._exit(1)

    try:
        ready = _recv(rep, cap)
    except (EOFError, MemoryError, ValueError) as exc:
        fail("sandbox: the generated code did not finish loading (%s)" % exc)
    if not (isinstance(ready, dict) and ready.get("ready") is True and isinstance(ready.get("names"), dict)):
        fail("sandbox: the generated code raised an error before the tests ran")
    try:
        code = compile(cfg["tests"], "tests.py", "exec")
    except BaseException:
        traceback.print_exc()
        fail("sandbox: the tests do not compile")
    used, todo = set(), [code]  # every name the tests' code mentions, nested functions included
    while todo:
        unit = todo.pop()
        used.update(unit.co_names)
        todo.extend(c for c in unit.co_consts if isinstance(c, type(code)))
    namespace = {"__name__": "__main__"}
    try:
        for name, item in ready["names"].items():
            # names come as JSON strings (never a str subclass); dunder names (__builtins__ above all) never
            if not (type(name) is str and name.isidentifier() and not name.startswith("__")):
                raise TypeError("sandbox: the candidate offered a name the tests may not take (%r)" % name[:80])
            if name not in used or protected(name):
                continue
            if isinstance(item, list) and item[:1] == ["M"]:
                if str(item[1]).split(".")[0] in sys.stdlib_module_names:
                    namespace[name] = importlib.import_module(str(item[1]))
            else:  # fetched now, one value per message, only for the names the tests use
                namespace[name] = ask({"op": "global", "name": name})
    except Exception as exc:
        fail("sandbox: could not read the candidate's names (%s)" % exc)
    namespace["__builtins__"] = builtins  # the judge's own, whatever the candidate offered
    try:
        exec(code, namespace)
    except BaseException:
        traceback.print_exc()
        fail("sandbox: a test failed")
    sys.stdout.flush()
    os.write(verdict, ("%s passed\n" % token).encode())
    os._exit(0)

_main()
'''
)

LAUNCHER = r"""
# Run as root, only with the parent's arguments (never generated code): drop to the sandbox's own
# unprivileged uid, then exec bubblewrap, which creates the namespaces as that uid (or, without
# bubblewrap and with the unsafe opt-in, the plain interpreter). Where the
# interpreter lies under a folder that uid cannot enter (/root), first make that folder, in a
# mount namespace of this process alone, a read-only tmpfs holding only the interpreter's prefix.
import ctypes, json, os, sys

def _main():
    cfg = json.loads(sys.argv[1])
    argv = sys.argv[2:]
    if cfg["hide"]:
        libc = ctypes.CDLL(None, use_errno=True)

        def call(ret, what):
            if ret != 0:
                err = ctypes.get_errno()
                raise OSError(err, "sandbox launcher: %s: %s" % (what, os.strerror(err)))

        ms_rdonly, ms_nosuid, ms_nodev, ms_noexec, ms_remount, ms_bind, ms_rec, ms_private = (
            1, 2, 4, 8, 32, 4096, 16384, 1 << 18)
        call(libc.unshare(0x00020000), "unshare(CLONE_NEWNS)")
        call(libc.mount(b"none", b"/", None, ms_rec | ms_private, None), "make / private")
        keep = [(os.open(path, os.O_PATH | os.O_DIRECTORY), path) for path in cfg["keep"]]  # in this namespace
        for top in cfg["hide"]:
            flags = ms_nosuid | ms_nodev | ms_noexec
            call(libc.mount(b"tmpfs", top.encode(), b"tmpfs", flags, b"mode=0755,size=1m"), "tmpfs on " + top)
        for fd, path in keep:
            os.makedirs(path, mode=0o755, exist_ok=True)
            call(libc.mount(b"/proc/self/fd/%d" % fd, path.encode(), None, ms_bind | ms_rec, None), "bind " + path)
            os.close(fd)
        for top in cfg["hide"]:
            flags = ms_remount | ms_rdonly | ms_nosuid | ms_nodev | ms_noexec
            call(libc.mount(b"none", top.encode(), None, flags, None), "read-only " + top)
    os.setgroups([])
    os.setresgid(cfg["gid"], cfg["gid"], cfg["gid"])
    os.setresuid(cfg["uid"], cfg["uid"], cfg["uid"])
    if os.geteuid() == 0 or os.getegid() == 0:
        raise SystemExit("sandbox launcher: could not drop root")
    os.execve(argv[0], argv, cfg["env"])

_main()
"""
