"""Atomic writes: a file or folder appears complete at its path, or not at all.

Everything is written to a hidden sibling first (same folder, so the rename stays on one file
system) and moved into place with `os.replace`; if the writing raises, the sibling is removed
and whatever was at the path before is left untouched. Readers never see a half-written cache
entry, plan or checkpoint, even when a write is killed.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


@contextlib.contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a temporary sibling of `path` to write (a file, or a folder the caller creates);
    on success it replaces `path` (an existing folder is removed first), on error it is removed.

    Example:
        >>> with atomic_path(out / "model") as tmp:
        ...     model.save_pretrained(tmp)
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # pid and thread: two writers of the same path (app sessions, parallel CLI runs) never share a sibling.
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}-{threading.get_ident()}")
    _remove(tmp)
    try:
        yield tmp
        if tmp.is_dir() and path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)  # os.replace cannot replace a non-empty folder
        os.replace(tmp, path)
    except BaseException:
        _remove(tmp)
        raise


def atomic_write_text(path: str | Path, text: str, *, fsync: bool = False) -> Path:
    """Write `text` to `path` atomically; `fsync=True` also flushes it to disk before the rename."""
    path = Path(path)
    with atomic_path(path) as tmp, open(tmp, "w") as f:
        f.write(text)
        if fsync:
            f.flush()
            os.fsync(f.fileno())
    return path
