"""Resolve dataset names to text.

One place answers "what text is `wikitext2`?". Each name has a local file (under
`NIRVANA_DATA_DIR`, the layout of the project's shared data folder) and a Hugging Face hub
source. A `.txt` or `.jsonl` path is accepted wherever a name is. Two corpora ship with every
CPython and need no download: `pydoc`, the Python documentation (`pydoc_data.topics`), the
last-resort default, always reported as such; and `python-code`, the standard library's own
top-level modules, real code for calibrating or measuring code models.

Names take an optional split: `ptb` is PTB validation (the paper's), `ptb:test` its test split.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from pydoc_data.topics import topics

from nirvana.errors import DatasetNotFound
from nirvana.guard.safety import TEXT_ROOTS_ENV, check_file_size, check_local_path
from nirvana.store.paths import checkout_root

EMBEDDED = "pydoc"  # the fallback corpus
CODE = "python-code"


@dataclass(frozen=True)
class DatasetSource:
    """Where one (name, split) comes from: a file under NIRVANA_DATA_DIR and/or a hub dataset."""

    local: str | None  # path relative to NIRVANA_DATA_DIR
    hub: tuple | None  # (path, config_name, split, text_field) for datasets.load_dataset
    description: str
    hub_data_files: str | None = None


DATASETS: dict[tuple[str, str], DatasetSource] = {
    ("wikitext2", "test"): DatasetSource(
        "wikitext-2-raw/wiki.test.raw", ("wikitext", "wikitext-2-raw-v1", "test", "text"), "WikiText-2 raw, test"
    ),
    ("wikitext2", "validation"): DatasetSource(
        "wikitext-2-tokenized/wiki.valid.tokens",
        ("wikitext", "wikitext-2-v1", "validation", "text"),
        "WikiText-2 validation (tokenized, calibration pool; disjoint from test)",
    ),
    ("ptb", "validation"): DatasetSource(
        "ptb/ptb.valid.txt", ("ptb_text_only", "penn_treebank", "validation", "sentence"), "Penn Treebank validation"
    ),
    ("ptb", "test"): DatasetSource(
        "ptb/ptb.test.txt", ("ptb_text_only", "penn_treebank", "test", "sentence"), "Penn Treebank test"
    ),
    ("lambada", "test"): DatasetSource(
        None, ("EleutherAI/lambada_openai", "default", "test", "text"), "LAMBADA (OpenAI)"
    ),
    ("c4", "validation"): DatasetSource(
        None,
        ("allenai/c4", None, "validation", "text"),
        "C4 English validation, first shard",
        hub_data_files="en/c4-validation.00000-of-00008.json.gz",
    ),
}
DEFAULT_SPLIT = {"wikitext2": "test", "ptb": "validation", "lambada": "test", "c4": "validation"}
ALIASES = {
    "wikitext2-valid": ("wikitext2", "validation"),
    "wikitext2-test": ("wikitext2", "test"),
    "ptb-test": ("ptb", "test"),
    "ptb-valid": ("ptb", "validation"),
    "wikitext": ("wikitext2", "test"),
}
SPLIT_ALIASES = {"valid": "validation", "val": "validation", "dev": "validation"}


@dataclass
class Text:
    """Resolved text: documents (lines or paragraphs) and where they came from."""

    name: str
    split: str
    documents: list[str]
    origin: str  # a file path, "hub:<id>" or "embedded:pydoc_data.topics"
    fallback_reason: str | None = None  # set when the embedded corpus stood in for what was asked
    tried: list[str] = field(default_factory=list)

    def joined(self, sep: str = "\n\n") -> str:
        return sep.join(self.documents)

    @property
    def label(self) -> str:
        return f"{self.name}:{self.split}" if self.split else self.name


def available_names() -> list[str]:
    return sorted({n for n, _ in DATASETS} | set(ALIASES) | set(EMBEDDED_CORPORA))


# The project's checkout layout keeps the shared data next to the repository (../shared/data):
# used when NIRVANA_DATA_DIR is not set, so a fresh clone finds it without the hub. An installed
# package has no checkout beside it, and no sibling folder is looked for.
_ROOT = checkout_root()
SIBLING_DATA_DIR = _ROOT.parent / "shared" / "data" if _ROOT else None


def data_dir() -> Path | None:
    """NIRVANA_DATA_DIR when set; else ../shared/data beside the checkout when it exists; else None."""
    env = os.environ.get("NIRVANA_DATA_DIR")
    if env:
        return Path(env).expanduser()
    return SIBLING_DATA_DIR if SIBLING_DATA_DIR is not None and SIBLING_DATA_DIR.is_dir() else None


def parse_name(name: str) -> tuple[str, str]:
    name = name.strip()
    if name in ALIASES:
        return ALIASES[name]
    base, _, split = name.partition(":")
    split = SPLIT_ALIASES.get(split, split) or DEFAULT_SPLIT.get(base, "")
    return base, split


def load_text(name: str, *, fallback: bool = False) -> Text:
    """Resolve `name` (a dataset name, `name:split`, or a .txt/.jsonl path) to text.

    With `fallback=True`, the embedded Python-docs corpus stands in when nothing else can be
    found, and `Text.fallback_reason` says so. Otherwise `DatasetNotFound` lists every place tried.

    Example:
        >>> load_text("pydoc").origin
        'embedded:pydoc_data.topics'
    """
    check_text_name(name)
    name = str(name).strip()
    path = Path(name).expanduser()
    if _is_file_name(path):
        return _from_file(path, name)
    base, split = parse_name(name)
    if base in EMBEDDED_CORPORA:
        return EMBEDDED_CORPORA[base]()
    tried: list[str] = []
    source = DATASETS[(base, split)]
    root = data_dir()
    if source.local:
        if root is None:
            tried.append(
                f"NIRVANA_DATA_DIR/{source.local} (NIRVANA_DATA_DIR is not set and "
                f"{SIBLING_DATA_DIR or 'no ../shared/data beside a checkout'} does not exist)"
            )
        elif (root / source.local).exists():
            text = _from_file(root / source.local, base)
            text.split = split
            return text
        else:
            tried.append(f"{root / source.local} (missing)")
    if source.hub:
        try:
            return Text(base, split, _from_hub(source), f"hub:{source.hub[0]}")
        except Exception as exc:
            tried.append(f"hub dataset {source.hub[0]}/{source.hub[1]} split {source.hub[2]} ({_short(exc)})")
    message = f"dataset {name!r} ({source.description}) could not be found. Tried: " + "; ".join(tried) + ". "
    message += "Set NIRVANA_DATA_DIR to a folder with the shared data layout, connect to the hub, or pass a file path."
    if fallback:
        text = embedded_text()
        text.fallback_reason = message
        text.tried = tried
        return text
    raise DatasetNotFound(message)


def check_text_name(name: str) -> None:
    """What `load_text` refuses by the name alone, reading no text: no name, a file outside
    NIRVANA_TEXT_ROOTS, a missing file or a folder, an unknown dataset name (the same messages).
    Callers run it before they load a model to measure on the text."""
    if name is None or str(name).strip() == "":
        raise DatasetNotFound(f"no dataset given; accepted: {', '.join(available_names())} or a .txt/.jsonl file.")
    name = str(name).strip()
    path = Path(name).expanduser()
    if _is_file_name(path):
        check_local_path(path, TEXT_ROOTS_ENV, "text file")  # under NIRVANA_TEXT_ROOTS when it is set
        _check_file(path)
        return
    base, split = parse_name(name)
    if base not in EMBEDDED_CORPORA and (base, split) not in DATASETS:
        known = ", ".join(sorted(f"{n}:{s}" for n, s in DATASETS))
        raise DatasetNotFound(
            f"unknown dataset {name!r}; accepted: {', '.join(available_names())} (splits: {known}), "
            "or a path to a .txt (one document per line) or .jsonl (a 'text' field per line) file."
        )


def _is_file_name(path: Path) -> bool:
    """A text file's path rather than a dataset name."""
    return path.suffix in {".txt", ".jsonl", ".raw", ".tokens"} or path.exists()


def _check_file(path: Path) -> None:
    if not path.exists():
        raise DatasetNotFound(
            f"file {str(path)!r} does not exist; pass an existing .txt or .jsonl file or a dataset name "
            f"({', '.join(available_names())})."
        )
    if path.is_dir():
        raise DatasetNotFound(f"{str(path)!r} is a directory; pass a .txt or .jsonl file.")


def embedded_text() -> Text:
    """The Python documentation topics shipped with CPython: ~1 MB of English prose and code."""

    docs = [topics[k].strip() for k in sorted(topics)]
    return Text(EMBEDDED, "", [d for d in docs if d], "embedded:pydoc_data.topics")


def stdlib_code() -> Text:
    """The running CPython's standard library modules (the `*.py` files beside `os.py`, not its packages or
    tests), one document per file, sorted by name: about 170 files and 4.7 MB of code with its docstrings and
    comments (Python 3.11). Real code that shares no text with MBPP or HumanEval, so a code model can be
    calibrated on code; which modules it holds depends on the Python version, and every cache built on a
    calibration batch is keyed by the batch's tokens, not by this name.

    Example:
        >>> stdlib_code().origin
        'embedded:python3.11 stdlib (168 modules)'
    """
    root = Path(os.__file__).parent
    docs = []
    for path in sorted(root.glob("*.py")):
        try:
            text = path.read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError):
            continue  # a module this interpreter cannot read back as UTF-8 is left out, not guessed at
        if text:
            docs.append(text)
    if not docs:
        raise DatasetNotFound(
            f"{CODE!r} is the Python standard library's source, and {root} holds no readable *.py module (an "
            "interpreter installed without its sources?); pass a .txt or .jsonl file of code instead."
        )
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    return Text(CODE, "", docs, f"embedded:{version} stdlib ({len(docs)} modules)")


# Corpora that ship with CPython: name -> loader.
EMBEDDED_CORPORA = {EMBEDDED: embedded_text, CODE: stdlib_code}


def _from_file(path: Path, name: str) -> Text:
    _check_file(path)
    try:
        check_file_size(path, "text")
        raw = path.read_bytes()
    except OSError as exc:
        raise DatasetNotFound(f"cannot read {str(path)!r}: {exc.strerror}.") from exc
    if b"\x00" in raw[:65536]:
        raise DatasetNotFound(f"{str(path)!r} looks binary (it contains NUL bytes); pass UTF-8 text.")
    try:
        content = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DatasetNotFound(f"{str(path)!r} is not UTF-8 text ({exc.reason} at byte {exc.start}).") from exc
    if path.suffix == ".jsonl":
        docs = []
        for i, line in enumerate(content.splitlines(), 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise DatasetNotFound(f"{str(path)!r} line {i} is not JSON ({exc.msg}).") from exc
            if not isinstance(row, dict) or not isinstance(row.get("text"), str):
                raise DatasetNotFound(f"{str(path)!r} line {i} has no string 'text' field.")
            docs.append(row["text"])
    else:
        docs = [line.strip() for line in content.splitlines()]
    docs = [d for d in docs if d]
    if not docs:
        raise DatasetNotFound(f"{str(path)!r} holds no text (it is empty or only whitespace).")
    return Text(name, "", docs, str(path))


def _from_hub(source: DatasetSource) -> list[str]:
    # here, not at the top: datasets is slow to import and only needed for hub datasets
    import datasets

    path, config, split, field_name = source.hub
    kwargs = {"data_files": {split: source.hub_data_files}} if source.hub_data_files else {}
    ds = datasets.load_dataset(path, config, split=split, **kwargs)
    return [t for t in ds[field_name] if t and t.strip()]


def _short(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:160]
