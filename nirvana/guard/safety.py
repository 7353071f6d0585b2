"""Limits on what user input may reach: local paths, file sizes, remote code.

The app serves strangers, so three rules hold in the library (the CLI and the app share them):

- **Local paths stay under configured roots.** When `NIRVANA_MODEL_ROOTS` (model folders) or
  `NIRVANA_TEXT_ROOTS` (text files) is set, an `os.pathsep`-separated list of folders, a local
  path must resolve (symlinks followed) inside one of them or inside the cache dir, where the
  project writes its own models and runs. Set to an empty string, it allows the cache dir only.
  Unset (the CLI's usual case), any path the user can read is accepted. Hub ids and registry
  names are not paths and are not affected.
- **Files have a size limit** before they are read into memory: text files, plan JSON and
  .npy token ids (see `LIMITS`; `NIRVANA_MAX_<KIND>_MB` overrides one).
- **No remote code, no pickle.** `trust_remote_code` is False unless the caller passes True
  (CLI: `--trust-remote-code`); weights are read from safetensors only and `.npy` files with
  `allow_pickle=False`. Nothing builds a shell command from user input.
"""

from __future__ import annotations

import os
from pathlib import Path

from nirvana.errors import InvalidInput
from nirvana.store.paths import cache_dir

MODEL_ROOTS_ENV = "NIRVANA_MODEL_ROOTS"
TEXT_ROOTS_ENV = "NIRVANA_TEXT_ROOTS"

MB = 1024 * 1024
# kind -> default limit in bytes. An 8B model's plan is ~3 MB of JSON; WikiText-2 test is 1.3 MB.
LIMITS: dict[str, int] = {
    "text": 64 * MB,  # a calibration/evaluation text file read by nirvana.data.text
    "plan": 32 * MB,  # a plan JSON
    "npy": 64 * MB,  # calibration token ids [N, T]
}


class PathNotAllowed(InvalidInput):
    """A local path outside the configured roots (the app limits which folders users may open)."""


class FileTooLarge(InvalidInput):
    """A file over the size limit for its kind."""


def _roots(env: str) -> list[Path] | None:
    """Configured roots (resolved), plus the cache dir; None when `env` is unset (no limit)."""
    value = os.environ.get(env)
    if value is None:
        return None

    roots = [Path(p).expanduser().resolve() for p in value.split(os.pathsep) if p.strip()]
    return [*roots, cache_dir().resolve()]


def looks_like_local_path(name: str | Path) -> bool:
    """True for anything that names a local file or folder rather than a hub id or registry name."""
    text = str(name).strip()
    return text.startswith((".", "/", "~")) or Path(text).expanduser().exists()


def check_local_path(path: str | Path, env: str = MODEL_ROOTS_ENV, what: str = "model path") -> Path:
    """Return the resolved path, or raise `PathNotAllowed` when it falls outside the roots in `env`.

    Symlinks are resolved first, so a link inside a root that points outside it is refused.
    """
    resolved = Path(path).expanduser().resolve()
    roots = _roots(env)
    if roots is None or any(resolved.is_relative_to(root) for root in roots):
        return resolved
    shown = ", ".join(str(r) for r in roots)
    raise PathNotAllowed(
        f"{what} {str(path)!r} is outside the folders this server allows ({shown}); "
        f"use a {what} inside one of them, or ask the operator to add its folder to {env}."
    )


def check_model_name(name: str | Path) -> None:
    """Apply the model-root limit to local paths; registry names and hub ids pass untouched."""
    if looks_like_local_path(name):
        check_local_path(name, MODEL_ROOTS_ENV, "model path")


def limit(kind: str) -> int:
    """Size limit in bytes for `kind` (`NIRVANA_MAX_TEXT_MB`, ... override the defaults)."""
    if kind not in LIMITS:
        raise InvalidInput(f"unknown file kind {kind!r}; known: {', '.join(LIMITS)}.")
    override = os.environ.get(f"NIRVANA_MAX_{kind.upper()}_MB")
    if override:
        try:
            return int(float(override) * MB)
        except ValueError as exc:
            raise InvalidInput(f"NIRVANA_MAX_{kind.upper()}_MB must be a number of MB, got {override!r}.") from exc
    return LIMITS[kind]


def check_size(size_bytes: int, kind: str, name: str = "file") -> None:
    """Raise `FileTooLarge` when `size_bytes` exceeds the limit for `kind`."""
    cap = limit(kind)
    if size_bytes > cap:
        raise FileTooLarge(
            f"{name!s} is {_size(size_bytes)}, over the {_size(cap)} limit for {kind} files; "
            f"use a smaller file (or raise NIRVANA_MAX_{kind.upper()}_MB if you run this server)."
        )


def _size(n: int) -> str:
    """Bytes as a short human-readable size: 950 bytes, 12.3 KB, 20 MB."""
    if n < 1024:
        return f"{n} bytes"
    if n < MB:
        return f"{n / 1024:.3g} KB"
    return f"{n / MB:.3g} MB"


def check_file_size(path: str | Path, kind: str) -> None:
    """`check_size` for a file on disk (reads only its size)."""
    path = Path(path)
    check_size(path.stat().st_size, kind, repr(str(path)))
