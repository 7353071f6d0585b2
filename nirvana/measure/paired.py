"""Paired differences: two models measured on the same items (problems, anchor sequences), compared item by item.

The per-item difference cancels what the items share (a problem's difficulty, a sequence's predictability),
so its standard error is far smaller than that of two independent means. Used for pass@1 and bits per byte
between methods (`nirvana.bench.accuracy_report`, `nirvana.measure.compare`) and for KL between gammas
(`nirvana.search.gamma`).
"""

from __future__ import annotations

import math


def paired_difference(a: list[float], b: list[float]) -> dict:
    """Mean of a_i - b_i over the problems both have (the first min(len) ones, same order) and its standard
    error sd(d) / sqrt(n): two models scored on the same problems, so problem difficulty cancels."""
    n = min(len(a), len(b))
    if n < 2:
        raise ValueError(f"a paired difference needs 2 or more common problems, got {n}")
    d = [x - y for x, y in zip(a[:n], b[:n])]
    mean = sum(d) / n
    sd = math.sqrt(sum((x - mean) ** 2 for x in d) / (n - 1))
    return {"mean": mean, "stderr": sd / math.sqrt(n), "n": n}


def paired_or_none(a: list[float] | None, b: list[float] | None) -> dict | None:
    """`paired_difference(a, b)`, or None where either side was not kept or they share fewer than 2 problems."""
    if not a or not b or min(len(a), len(b)) < 2:
        return None
    return paired_difference(a, b)


def paired_text(p: dict | None, scale: float = 1.0, digits: int = 4) -> str:
    """A paired difference as 'mean ± stderr (z se[, resolved])', both times `scale` (100: points) to `digits`
    decimals; 'resolved' = more than two standard errors. Two models that agree on every problem (0 ± 0) differ
    by nothing, so nothing is resolved; a nonzero mean with no spread is. '-' for None."""
    if p is None:
        return "-"
    mean, se = scale * p["mean"], scale * p["stderr"]
    z = abs(mean) / se if se > 0 else (math.inf if mean else 0.0)
    return f"{mean:+.{digits}f} ± {se:.{digits}f} ({z:.1f} se{', resolved' if z > 2 else ''})"
