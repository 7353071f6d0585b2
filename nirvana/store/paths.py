"""Where on-disk state lives: the root of every cache (models, scores, calibration choices, evaluations, runs)."""

from __future__ import annotations

import os
from pathlib import Path

from platformdirs import user_cache_dir


def cache_dir() -> Path:
    """Root of every on-disk cache (models, scores, calibration choices, evaluations).

    `NIRVANA_CACHE_DIR` overrides the platform's user cache dir.
    """
    env = os.environ.get("NIRVANA_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    return Path(user_cache_dir("nirvana-explorer"))
