"""The paper's headline figures (METHOD.md section 7), as data for display beside our own.

They are Llama-3.1-8B numbers measured by the authors on an A100; nothing here was measured by
this project, and every frame or table built from them carries that label.
"""

from __future__ import annotations

import json
from functools import lru_cache
from importlib.resources import files
from pathlib import Path

# Package data (pyproject `package-data`): found the same way in a checkout and in an installed wheel.
REFERENCE_PATH = files("nirvana") / "assets" / "paper_reference.json"


@lru_cache(maxsize=4)
def _load(path: str | None) -> dict:
    return json.loads((Path(path) if path else REFERENCE_PATH).read_text())


def paper_reference(path: str | Path | None = None) -> dict:
    """The whole reference file: {label, source, model, hardware, accuracy, speed, pruning_time, unverified}."""
    return json.loads(json.dumps(_load(str(path) if path else None)))  # a copy: callers may edit it


def reference_rows(section: str = "speed", path: str | Path | None = None) -> list[dict]:
    """One section ("accuracy" or "speed") as rows, each labelled with the model, hardware and source."""
    data = paper_reference(path)
    tag = {"source": "paper", "model": data["model"], "hardware": data["hardware"]}
    return [{**row, **tag} for row in data[section]]


NOT_REPORTED = "not reported"


def table_rows(rows: list[dict]) -> list[dict]:
    """`rows` as a table to show: every row has every column (in first-seen order); a column with a gap (a
    missing key or None: the paper does not report it) is text, the gap "not reported", so no cell reads "None".

    Example:
        >>> table_rows([{"metric": "throughput", "ratio": 1.5}, {"metric": "memory"}])
        [{'metric': 'throughput', 'ratio': '1.5'}, {'metric': 'memory', 'ratio': 'not reported'}]
    """
    columns = list(dict.fromkeys(key for row in rows for key in row))
    gappy = {c for c in columns if any(row.get(c) is None for row in rows)}
    return [{c: _text(row.get(c)) if c in gappy else row[c] for c in columns} for row in rows]


def _text(value) -> str:
    if value is None:
        return NOT_REPORTED
    return f"{value:g}" if isinstance(value, float) else str(value)
