"""A benchmark's CSV: rows read back as dicts, each finished row appended and flushed to disk at once.

Benchmarks resume from their own output: a row is on disk (fsync) before the next one starts,
so a run that is stopped or killed keeps every row it finished and nothing half-written.
"""

from __future__ import annotations

import csv
import io
import os
from collections.abc import Sequence
from pathlib import Path

from nirvana.store.atomic import atomic_write_text


def read_rows(path: str | Path) -> list[dict]:
    """Every row of the CSV at `path` (strings, as written), or [] when there is none yet."""
    if not Path(path).exists():
        return []
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def append_row(path: str | Path, row: dict, columns: Sequence[str]) -> None:
    """Append `row` (missing columns empty), writing the header first for a new file; flushed to disk."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    new = not path.exists()
    with open(path, "a", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(columns))
        if new:
            writer.writeheader()
        writer.writerow({k: row.get(k, "") for k in columns})
        f.flush()
        os.fsync(f.fileno())


def header(path: str | Path) -> list[str]:
    """The column names of the CSV at `path` ([] when there is none yet)."""
    if not Path(path).exists():
        return []
    with open(path, newline="") as f:
        return next(csv.reader(f), [])


def write_rows(path: str | Path, rows: Sequence[dict], columns: Sequence[str]) -> None:
    """Rewrite the whole CSV (under `columns`; missing cells empty) atomically: the old file stays
    whole until the new one replaces it. For a row re-measured in place, or a header gaining columns."""
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(columns), lineterminator="\r\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: row.get(k, "") for k in columns})
    atomic_write_text(path, buf.getvalue(), fsync=True)
