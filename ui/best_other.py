"""The Evidence page's head-to-head: NIRVANA against the best *other* method at each sparsity, measured.

Against the best other, not one chosen beforehand (magnitude pruning is easy to beat): where any other
method or criterion does better at a sparsity, the table says so. Two committed sources, each compared
only within itself (their token budgets and grids differ):

- the baselines benchmark (`benchmarks/baselines/`): LLM-Pruner, FLAP and SliceGPT beside NIRVANA at the
  same target sparsity on the same calibration batch; WikiText-2 perplexity and the 7-task average. Its
  points are the recommender's (`ui.recommend.benchmark_points`: recovered and unmatched rows left out);
- the quality grid (`benchmarks/quality/`): every other saliency criterion under NIRVANA's global
  allocation (calibration seed 0); WikiText-2 and PTB perplexity.

NIRVANA's best measured setting at a sparsity (γ* or a KL-best γ) meets the best other's.
"""

from __future__ import annotations

import pandas as pd
import streamlit as st

from nirvana.methods import METHODS, is_baseline
from nirvana.scoring.criteria import CRITERIA
from ui.recommend import benchmark_points

# point field -> (what it is, lower is better, shown ×100)
MEASURES = {
    "ppl": ("WikiText-2 perplexity", True, False),
    "ppl_ptb": ("PTB perplexity", True, False),
    "acc": ("7-task average accuracy (%)", False, True),
}


def quality_points(rows: list[dict], source: str) -> list[dict]:
    """Every criterion of a quality grid's `rows` under NIRVANA's global allocation (calibration seed 0), as
    points `{source, method, variant, sparsity, ppl, ppl_ptb}`; the method is the criterion's name."""
    return [
        {
            "source": source,
            "method": r["criterion"],
            "variant": f"{r['criterion']} scores, NIRVANA's allocation",
            "sparsity": float(r["sparsity"]),
            "ppl": float(r["ppl_wikitext2"]),
            "ppl_ptb": float(r["ppl_ptb"]),
        }
        for r in rows
        if r["criterion"] != "dense" and r["allocation"] == "global" and r.get("calib_seed") in ("0", "", None)
    ]


def versus(points: list[dict]) -> list[dict]:
    """One row per (source, sparsity, measure) where NIRVANA and another method are both measured: NIRVANA's
    best point, the best other's, the relative difference (perplexity) or points (accuracy), who is better."""
    out = []
    for source, sparsity in sorted({(p["source"], p["sparsity"]) for p in points}):
        for key, (what, lower, percent) in MEASURES.items():
            _row(
                out,
                [p for p in points if (p["source"], p["sparsity"]) == (source, sparsity)],
                key,
                what,
                lower,
                percent,
            )
    return out


def _row(out: list[dict], here: list[dict], key: str, what: str, lower: bool, percent: bool) -> None:
    """Append to `out` the comparison on `key` of the points `here` (one source and sparsity), if both sides have it."""
    here = [p for p in here if p.get(key) is not None]
    others = [p for p in here if is_baseline(p["method"])]  # the paper's method against every other
    ours = [p for p in here if p not in others]
    if not ours or not others:
        return
    pick = min if lower else max
    best, other = pick(ours, key=lambda p: p[key]), pick(others, key=lambda p: p[key])
    scale = 100 if percent else 1
    a, b = best[key] * scale, other[key] * scale
    out.append(
        {
            "source": best["source"],
            "sparsity": best["sparsity"],
            "measure": what,
            "NIRVANA (its best setting)": best["variant"],
            "NIRVANA": round(a, 2),
            "best other": other["variant"],
            "best other's": round(b, 2),
            "NIRVANA vs best other": f"{100 * (a / b - 1):+.1f}%" if lower else f"{a - b:+.1f} points",
            "better": "NIRVANA" if (a < b if lower else a > b) else _label(other["method"]),
        }
    )


def _label(name: str) -> str:
    """A method's label (LLM-Pruner), or a criterion's (loss-Taylor) for a quality grid's point."""
    return METHODS[name].label if name in METHODS else CRITERIA[name].label if name in CRITERIA else name


def wins(rows: list[dict], source: str, measure: str) -> tuple[int, int]:
    """(sparsities where NIRVANA beats the best other, sparsities compared) of one source and measure."""
    mine = [r for r in rows if r["source"] == source and r["measure"] == MEASURES[measure][0]]
    return sum(r["better"] == "NIRVANA" for r in mine), len(mine)


def section(model: str, quality: tuple[list[dict], str] | None) -> None:
    """The head-to-head table of `model` (its baselines benchmark; `quality` = (rows, source) of its grid)."""
    st.markdown("##### NIRVANA against the best other method at each sparsity (measured)")
    points, _ = benchmark_points(model)
    if quality is not None:
        points = points + quality_points(*quality)
    rows = versus(points)
    if not rows:
        st.caption(
            f"Nothing to compare for `{model}` yet: `python -m nirvana bench baselines --model {model}` "
            f"(or `bench quality`) measures NIRVANA beside the other methods."
        )
        return
    st.caption(
        "At each sparsity, NIRVANA's best measured setting against the best of every other method (baselines "
        "benchmark: LLM-Pruner, FLAP, SliceGPT) or saliency criterion (quality grid, under NIRVANA's allocation), "
        "within one source. Perplexity: lower is better, the difference relative; accuracy: higher is better, "
        "the difference in points."
    )
    st.dataframe(pd.DataFrame(rows), hide_index=True)
