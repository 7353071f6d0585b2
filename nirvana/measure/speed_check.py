"""Whether a measured speed-up is a result: the rounds' ratios against the FLOPs ideal.

A pruned model does less arithmetic per token than the dense one and nothing more, so its speed-up
cannot go far past the FLOPs ideal (dense / pruned FLOPs of the phase: `nirvana.measure.flops.phase_flops`).
A ratio well above it says that the dense runs were slowed by something else, on a shared machine
another process holding the core, and that figure is not a result.

Dense and pruned are timed in rounds (`nirvana.measure.speed.compare_speeds`: round i times dense, then
pruned, on the same prompts), so every round gives its own ratio r_i = pruned tokens/s / dense tokens/s
(= dense seconds / pruned seconds of that round). `judge` takes their median m and interquartile range
[q1, q3] (`statistics.quantiles`, inclusive method; one round: q1 = q3 = m) and, with I the ideal, says:

- "disturbed" when m > TOLERANCE * I and q1 > I: the middle of the rounds lies above what the arithmetic
  allows. TOLERANCE = 1.1 leaves room for timer noise and the cache a smaller model fits in.
- "noisy" when not disturbed and either m > TOLERANCE * I (above the ideal, but a quarter of the rounds or
  more is not: the rounds disagree) or (q3 - q1) / m > WIDE = 0.3 (the middle half of the rounds spreads
  over more than 30% of their median: too wide to give one figure).
- "ok" otherwise.

A single figure (one round, or a benchmark that kept only its medians) has q1 = q3 = m: it is disturbed
when m > 1.1 * I and never noisy. The interquartile range, not min-max, so one odd round out of five moves
neither the median nor the verdict.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass

from nirvana.errors import InvalidInput

TOLERANCE = 1.1  # a speed-up up to 10% above its FLOPs ideal is accepted
WIDE = 0.3  # the rounds' middle half may spread over at most 30% of their median
OK, NOISY, DISTURBED = "ok", "noisy", "disturbed"
MESSAGES = {
    OK: "",
    DISTURBED: "disturbed: the machine was busy during the measurement; re-measure",
    NOISY: "noisy: the rounds disagree too much to give one speed-up; re-measure",
}
RULE = (
    f"disturbed = the median of the per-round ratios (pruned / dense tokens per second) is more than {TOLERANCE} x "
    "the FLOPs ideal and their lower quartile is above the ideal; noisy = more than that otherwise, or the rounds' "
    f"interquartile range is wider than {WIDE:.0%} of their median; one figure is disturbed when more than "
    f"{TOLERANCE} x the ideal"
)


@dataclass(frozen=True)
class SpeedCheck:
    """One phase's speed-up: the median of the rounds' ratios, their middle half, the ideal and the verdict."""

    ratio: float  # median of the per-round ratios pruned / dense
    low: float  # lower quartile of the ratios (the ratio itself for one round)
    high: float  # upper quartile
    rounds: int
    ideal: float  # dense FLOPs / pruned FLOPs of the phase (or another upper bound, e.g. block weights)
    verdict: str  # OK, NOISY or DISTURBED
    message: str  # "" when ok; else what to do (MESSAGES)

    @property
    def ok(self) -> bool:
        return self.verdict == OK

    def detail(self) -> str:
        """The figures behind the verdict, e.g. `4.1x (rounds 3.9x-4.6x) against the ideal 1.25x`."""
        spread = f" (middle half of {self.rounds} rounds {self.low:.2f}x-{self.high:.2f}x)" if self.rounds > 1 else ""
        return f"{self.ratio:.2f}x{spread} against the ideal {self.ideal:.2f}x"

    def to_dict(self) -> dict:
        return asdict(self)


def judge(ratios: Iterable[float], ideal: float, tolerance: float = TOLERANCE, wide: float = WIDE) -> SpeedCheck:
    """The verdict on per-round speed-ups `ratios` (pruned / dense) against `ideal` (the module docstring's rule).

    >>> judge([4.1, 4.4, 4.6], ideal=1.25).verdict
    'disturbed'
    >>> judge([1.10, 1.15, 1.2], ideal=1.25).verdict
    'ok'
    """
    ratios = list(ratios)
    values = sorted(float(r) for r in ratios if r is not None and math.isfinite(r) and r > 0)
    if not values:
        raise InvalidInput(f"no positive finite speed-up among {ratios!r}; measure again.")
    median = statistics.median(values)
    low, _, high = statistics.quantiles(values, n=4, method="inclusive") if len(values) > 1 else (median,) * 3
    above = median > tolerance * ideal
    if above and low > ideal:
        verdict = DISTURBED
    elif above or (high - low) / median > wide:
        verdict = NOISY
    else:
        verdict = OK
    return SpeedCheck(median, low, high, len(values), float(ideal), verdict, MESSAGES[verdict])


def round_ratios(dense_point: dict, pruned_point: dict, phase: str) -> list[float]:
    """Per-round speed-ups pruned / dense of one phase: dense seconds / pruned seconds of the same round
    (`{phase}_runs` of two points measured interleaved, with the same tokens). Without those runs (a result
    that kept only medians): the one ratio of the two medians' tokens per second."""
    d, p = dense_point.get(f"{phase}_runs") or [], pruned_point.get(f"{phase}_runs") or []
    if len(d) == len(p) and d and all(x > 0 for x in (*d, *p)):
        return [a / b for a, b in zip(d, p)]
    return [pruned_point[f"{phase}_tokens_per_s"] / dense_point[f"{phase}_tokens_per_s"]]


def phase_check(dense_point: dict, pruned_point: dict, phase: str, ideal: float) -> dict:
    """`judge` of one phase as the keys of a speed row: `{phase}_ratio` (median of the rounds), `_low`,
    `_high`, `{phase}_rounds`, `{phase}_verdict`, `{phase}_message`."""
    check = judge(round_ratios(dense_point, pruned_point, phase), ideal)
    return {
        f"{phase}_ratio": check.ratio,
        f"{phase}_ratio_low": check.low,
        f"{phase}_ratio_high": check.high,
        f"{phase}_rounds": check.rounds,
        f"{phase}_verdict": check.verdict,
        f"{phase}_message": check.message,
    }


def check_of(row: dict, phase: str) -> SpeedCheck:
    """The `SpeedCheck` of `phase` back from a speed row that `phase_check` filled (and its `{phase}_ideal`)."""
    return SpeedCheck(
        row[f"{phase}_ratio"],
        row[f"{phase}_ratio_low"],
        row[f"{phase}_ratio_high"],
        row[f"{phase}_rounds"],
        row[f"{phase}_ideal"],
        row[f"{phase}_verdict"],
        row[f"{phase}_message"],
    )


def worst(verdicts: Iterable[str]) -> str:
    """DISTURBED if any is, else NOISY if any is, else OK."""
    seen = set(verdicts)
    return next((v for v in (DISTURBED, NOISY) if v in seen), OK)


def row_verdict(row: dict, phases: Sequence[str]) -> dict:
    """`verdict` and `message` of a whole speed row: the worst of its phases'."""
    verdict = worst(row[f"{phase}_verdict"] for phase in phases)
    return {"verdict": verdict, "message": MESSAGES[verdict]}


def check_against_reference(
    rows: list[dict], reference: dict, speed_key: str, ideal_key: str, prefix: str = "decode"
) -> list[dict]:
    """Rows timed one at a time (not interleaved: a sweep's points), each checked against the `reference`
    row (the dense model) as a single figure: adds `{prefix}_speedup` = row / reference speed and
    `{prefix}_verdict` (`judge` of that one ratio against the row's `ideal_key`). A row without a speed
    keeps None in both; the reference row itself is "ok" at 1.0."""
    base = reference.get(speed_key)
    out = []
    for row in rows:
        speed, ideal = row.get(speed_key), row.get(ideal_key)
        if not base or not speed or not ideal:
            out.append(row | {f"{prefix}_speedup": None, f"{prefix}_verdict": None})
            continue
        check = judge([speed / base], ideal)
        out.append(row | {f"{prefix}_speedup": check.ratio, f"{prefix}_verdict": check.verdict})
    return out
