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


def checkout_root() -> Path | None:
    """The repository this package runs from (a checkout, editable install or PYTHONPATH), or None when installed.

    An installed package sits in site-packages, with no pyproject.toml beside it: nothing of the
    repository (benchmarks/, ../shared/data) is looked for there.
    """
    root = Path(__file__).resolve().parents[2]
    return root if (root / "pyproject.toml").is_file() and (root / "nirvana" / "__init__.py").is_file() else None


def benchmarks_dir(name: str) -> Path:
    """Default output folder of a benchmark: the checkout's benchmarks/<name>, else ./benchmarks/<name>."""
    return (checkout_root() or Path.cwd()) / "benchmarks" / name
