"""Which sparsity and which method for a tolerance: the analyst's question, answered from measured rows.

"I accept at most X times the dense perplexity (or Y points of the 7-task accuracy): how far can I prune,
and with which method?" `recommend(points, tolerance)` takes measured points (benchmark rows, sweep
points), each {source, method, variant, sparsity, gamma, ppl, acc} beside its dense reference
{ppl, acc} of the same source, and returns the largest sparsity at which some method meets the
tolerance, the best method there, and the evidence: every point with its ratio / drop and whether
it met the tolerance. Nothing is interpolated: a sparsity that was not measured is not recommended,
and a point measured without the chosen metric does not count.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from nirvana.errors import InvalidInput

# metric -> (point field, how the tolerance reads, accepted range, example)
METRICS = {
    "perplexity": ("ppl", "WikiText-2 perplexity at most this many times the dense model's", (1.0, 1000.0), 1.5),
    "accuracy": ("acc", "7-task average accuracy at most this many points below the dense model's", (0.0, 100.0), 2),
}


@dataclass(frozen=True)
class Tolerance:
    metric: str  # a METRICS name
    value: float

    def __post_init__(self) -> None:
        if self.metric not in METRICS:
            raise InvalidInput(f"unknown tolerance metric {self.metric!r}; accepted: {', '.join(METRICS)}.")
        low, high = METRICS[self.metric][2]
        if not isinstance(self.value, (int, float)) or not math.isfinite(self.value) or not low <= self.value <= high:
            example = METRICS[self.metric][3]
            raise InvalidInput(
                f"a {self.metric} tolerance must be a number from {low:g} to {high:g} "
                f"({METRICS[self.metric][1]}), got {self.value!r}; e.g. {example}."
            )

    def describe(self) -> str:
        if self.metric == "perplexity":
            return f"perplexity ≤ {self.value:g}× dense"
        return f"accuracy ≤ {self.value:g} points below dense"


@dataclass
class Recommendation:
    sparsity: float
    method: str
    variant: str
    gamma: float | None
    source: str
    evidence: list[dict] = field(default_factory=list)  # every point, with "change" and "meets"


def _change(point: dict, dense: dict, metric: str) -> float | None:
    key = METRICS[metric][0]
    value, reference = point.get(key), dense.get(key)
    if value is None or reference is None or not math.isfinite(value) or not math.isfinite(reference):
        return None
    return value / reference if metric == "perplexity" else 100 * (reference - value)


def recommend(points: list[dict], dense: dict[str, dict], tolerance: Tolerance) -> Recommendation | None:
    """The largest measured sparsity where some method meets `tolerance`, and the best method there.

    `points`: {source, method, variant, sparsity, gamma, ppl, acc} (acc as a fraction); `dense`: {source: {ppl, acc}}.
    None when no point meets it (the evidence is then every point, none meeting: `evidence(points, ...)`)."""
    rows = evidence(points, dense, tolerance)
    meeting = [r for r in rows if r["meets"]]
    if not meeting:
        return None
    best = min(meeting, key=lambda r: (-r["sparsity"], r["change"]))  # the largest sparsity, then the least change
    return Recommendation(best["sparsity"], best["method"], best["variant"], best["gamma"], best["source"], rows)


def evidence(points: list[dict], dense: dict[str, dict], tolerance: Tolerance) -> list[dict]:
    """Every point with its change against its own source's dense model and whether it meets `tolerance`; largest
    sparsity first. Points without the metric (or without a dense reference) are left out."""
    out = []
    for p in points:
        change = _change(p, dense.get(p["source"], {}), tolerance.metric)
        if change is None:
            continue
        meets = change <= tolerance.value
        out.append({**p, "change": round(change, 4), "meets": meets})
    return sorted(out, key=lambda r: (-r["sparsity"], r["change"]))
