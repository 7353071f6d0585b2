"""A pruned SmolLM2 served by the real vLLM engine (`make serve-env`; skipped, with the reason, without it):
`python -m nirvana serve` on a `prune --out` folder, asked over HTTP (`/v1/completions`, greedy), answers with
the text `python -m nirvana generate` gives: NIRVANA at 50%, every layer's KV groups and MLP width its own.
One engine start costs about a minute here, so FLAP's biases (the plugin's bias-only-on-down MLP) and LLM-Pruner
are checked the same way by `python -m nirvana bench serve` (benchmarks/serve/: 5/5 texts equal for each)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from nirvana.checkpoints.loading import load_model
from nirvana.cli import main
from nirvana.export.serve import SERVE_ENV
from nirvana.measure.generation import generate

ROOT = Path(__file__).resolve().parents[1]
PYTHON = Path(os.environ.get("NIRVANA_SERVE_PYTHON") or SERVE_ENV / "bin" / "python")
PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):",
    "Water boils at",
    "The three primary colors are",
    "Once upon a time, in a small village,",
]
NEW_TOKENS = 24

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not PYTHON.exists(), reason=f"no serving environment at {PYTHON} (`make serve-env`)"),
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _post(url: str, body: dict) -> dict:
    request = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=120) as response:
        return json.loads(response.read())


def _wait_ready(port: int, process: subprocess.Popen, log: Path, limit: float = 300) -> None:
    start = time.monotonic()
    while time.monotonic() - start < limit:
        if process.poll() is not None:
            pytest.fail(f"the server exited ({process.returncode}):\n{log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=5):
                return
        except OSError:
            time.sleep(2)
    pytest.fail(f"the server was not ready in {limit:.0f} s:\n{log.read_text()[-3000:]}")


@pytest.mark.parametrize(("method", "sparsity"), [("nirvana", 0.5)])
def test_vllm_serves_a_pruned_folder_with_the_text_transformers_gives(method, sparsity, tmp_path):
    out = tmp_path / f"{method}-{sparsity}"
    assert main(["prune", "--model", "smollm2-135m", "--method", method, "--sparsity", str(sparsity),
                 "--out", str(out)]) == 0  # fmt: skip
    port, log = _free_port(), tmp_path / "server.log"
    argv = [sys.executable, "-m", "nirvana", "serve", "--model", str(out), "--port", str(port),
            "--max-model-len", "512", "--served-model-name", "pruned"]  # fmt: skip
    with log.open("w") as sink:
        process = subprocess.Popen(argv, cwd=ROOT, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        lm = load_model(str(out), dtype="float32", device="cpu")  # transformers' text while the engine starts
        expected = [r["output"] for r in generate(lm.model, lm.tokenizer, PROMPTS, max_new_tokens=NEW_TOKENS,
                                                  chat=False)]  # fmt: skip
        del lm
        _wait_ready(port, process, log)
        answer = _post(
            f"http://127.0.0.1:{port}/v1/completions",
            {"model": "pruned", "prompt": PROMPTS, "max_tokens": NEW_TOKENS, "temperature": 0},
        )
    finally:
        os.killpg(process.pid, signal.SIGKILL)  # the server and the engine processes vLLM started: nothing to keep
        process.wait(timeout=60)
    served = [c["text"].strip() for c in sorted(answer["choices"], key=lambda c: c["index"])]
    assert served == expected
    assert "Resolved architecture: NirvanaLlamaForCausalLM" in log.read_text()  # vLLM took the plugin's class
