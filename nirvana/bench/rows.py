"""A benchmark's CSV: rows read back as dicts, each finished row written to disk at once.

Benchmarks resume from their own output: a row is on disk (atomic rewrite, fsync) before the
next one starts, so a run that is stopped or killed keeps every row it finished and nothing
half-written. Rewriting a file read back gives the same bytes (values stay the strings read).
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Sequence
from pathlib import Path

from nirvana.store.atomic import atomic_write_text


def read_rows(path: str | Path) -> list[dict]:
    """Every row of the CSV at `path` (strings, as written), or [] when there is none yet."""
    if not Path(path).exists():
        return []
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def number(value) -> float | None:
    """A CSV cell as a float: None where it is empty, not a number or NaN (a row not measured)."""
    try:
        x = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(x) else x


# Key columns added after rows were committed, and what their empty cell means: a row written
# before `method` existed was pruned by NIRVANA (and the dense row has no method at all).
KEY_DEFAULTS = {"method": "nirvana", "method_settings": "{}"}


def row_key(row: dict, key_columns: Sequence[str]) -> tuple[str, ...]:
    """A row's key as the CSV spells it (strings), for rows read back and rows just measured alike;
    a `KEY_DEFAULTS` column that is missing or empty takes its default, so old rows keep their key."""
    return tuple(str(row.get(k) or KEY_DEFAULTS[k]) if k in KEY_DEFAULTS else str(row[k]) for k in key_columns)


def store_row(path: str | Path, row: dict, columns: Sequence[str], key_columns: Sequence[str]) -> None:
    """Write `row` into the CSV at `path` (missing cells empty): in place of the row with the same
    key, or at the end. The whole file is rewritten atomically under `columns` (an older header
    gains the new columns), so a run killed mid-write leaves the previous file whole."""
    rows = read_rows(path)
    keys = [row_key(r, key_columns) for r in rows]
    key = row_key(row, key_columns)
    if key in keys:
        rows[keys.index(key)] = row
    else:
        rows.append(row)
    write_rows(path, rows, columns)


def write_rows(path: str | Path, rows: Sequence[dict], columns: Sequence[str]) -> None:
    """Rewrite the whole CSV (under `columns`; missing cells empty) atomically: the old file stays
    whole until the new one replaces it. For a row re-measured in place, or a header gaining columns."""
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(columns), lineterminator="\r\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: row.get(k, "") for k in columns})
    atomic_write_text(path, buf.getvalue(), fsync=True)
