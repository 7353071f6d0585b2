"""Disk cache of evaluation results, keyed by content.

A key is built from everything that decides the number: the model fingerprint, a hash of the
exact inputs (token windows, task names) and the settings. Results are small JSON files under
`cache_dir()/evals`, written to a temporary name and renamed, so a crash never leaves half a file.
"""

from __future__ import annotations

import json
from pathlib import Path

from nirvana.store.atomic import atomic_write_text
from nirvana.store.keys import content_key
from nirvana.store.paths import cache_dir


def eval_cache_path(kind: str, *parts) -> Path:
    """Path of the cached result of one evaluation: `evals/<kind>-<content key>.json`."""
    return cache_dir() / "evals" / f"{kind}-{content_key(kind, *parts)}.json"


def load_cached(path: Path) -> dict | None:
    """The cached JSON object, or None when absent or unreadable (a bad file is just recomputed)."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError):
        return None
    return data if isinstance(data, dict) else None


def save_cached(path: Path, data: dict) -> Path:
    """Write `data` as JSON atomically (nirvana.store.atomic)."""
    return atomic_write_text(path, json.dumps(data, indent=2, sort_keys=True, default=str))
