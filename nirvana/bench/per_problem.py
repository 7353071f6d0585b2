"""Per-problem values beside a benchmark's CSV, and differences paired by problem.

The accuracy and baselines grids keep each row's value per problem (gold bits per byte, or a code
task's outcome: 1 passed, 0 not) in one JSON file, `{variant: {task: {"limit": n, "values": [...]}}}`,
so a report can give a difference between two variants with the standard error of the paired
differences (`nirvana.measure.paired`), far tighter than two independent errors.
"""

from __future__ import annotations

import json
from pathlib import Path

from nirvana.measure.paired import paired_or_none


def read_per_problem(path: Path | str | None) -> dict:
    """{variant: {task: {"limit": n, "values": [value of problem 0, 1, ...]}}} ({} when absent or unreadable)."""
    if not path:
        return {}
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return {}


def per_problem_text(path: Path, variant: str, task: str, limit: int, values: list[float]) -> str:
    """The per-problem file with one row's values added (the driver writes it, atomically)."""
    data = read_per_problem(path)
    data.setdefault(variant, {})[task] = {"limit": limit, "values": values}
    return json.dumps(data, indent=1, sort_keys=True) + "\n"


def paired_between(per: dict, a: str, b: str, task: str) -> dict | None:
    """a - b over the problems both variants have for `task` in a per-problem file, or None."""
    return paired_or_none(*(per.get(v, {}).get(task, {}).get("values") for v in (a, b)))
