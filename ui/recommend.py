"""The Evidence page's answer to "which sparsity and method for my tolerance?" (`nirvana.search.recommend`).

Points come from what is measured: the committed baselines benchmark of a model (WikiText-2 perplexity
and the 7-task average of every method at every sparsity), and the session's sweep (perplexity or
7-task error against sparsity, every chosen method), each against the dense model of its own source.
A button puts the answer on the Allocation page's sliders (and its method beside NIRVANA there).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import streamlit as st

from nirvana.bench.baselines_report import LORA, RECONSTRUCT, variants
from nirvana.bench.quality_report import committed_reports
from nirvana.bench.rows import read_rows
from nirvana.scoring.criteria import DEFAULT_CRITERION
from nirvana.search.recommend import METRICS, Tolerance, evidence, recommend
from ui import baselines, methods, state
from ui.errors import guard

SWEEP_METRICS = {"perplexity": "ppl", "zeroshot7": "acc"}  # sweep quality axis -> point field


def benchmark_points(model: str) -> tuple[list[dict], dict]:
    """(points, {source: dense}) of the committed baselines benchmark of `model` ([] when there is none)."""
    path = next((p for p in baselines.committed() if p.stem.removeprefix("baselines-") == model), None)
    if path is None:
        return [], {}
    return _baselines_points(str(path), path.stat().st_mtime)


# Read once per file version (its mtime is in the key), not on every rerun of the Evidence page.
@st.cache_data(max_entries=16, show_spinner=False)
def _baselines_points(file: str, mtime: float) -> tuple[list[dict], dict]:
    path = Path(file)
    source = f"benchmarks/baselines/{path.name}"
    points, dense = [], {}
    for v in variants(read_rows(path)):
        record = {"ppl": v.get("ppl_wikitext2"), "acc": v.get("average")}
        if v.get("method") == "dense":
            dense[source] = record
            continue
        if v["variant"].endswith((LORA, RECONSTRUCT)) or v.get("matched") is False:
            continue  # recovered or reconstructed models and unmatched settings answer other questions
        gamma = v.get("gamma")
        points.append(
            {"source": source, "method": v["method"], "variant": v["variant"], "sparsity": float(v["sparsity"])}
            | {"gamma": float(gamma) if gamma not in (None, "") else None}
            | record
        )
    return points, dense


def quality_points(model: str) -> tuple[list[dict], dict]:
    """(points, {source: dense}) of the committed quality grid of `model`: NIRVANA (its own criterion, global
    allocation, calibration seed 0) at every sparsity it measured, beside the grid's dense row."""
    path = next((p for p in committed_reports() if p.stem.removeprefix("quality-") == model), None)
    if path is None:
        return [], {}
    return _quality_points(str(path), path.stat().st_mtime)


@st.cache_data(max_entries=16, show_spinner=False)
def _quality_points(file: str, mtime: float) -> tuple[list[dict], dict]:
    path = Path(file)
    source = f"benchmarks/quality/{path.name}"
    points, dense = [], {}
    for r in read_rows(path):
        if r.get("calib_seed") not in ("0", "", None):
            continue
        if r["criterion"] == "dense":
            dense[source] = {"ppl": float(r["ppl_wikitext2"])}
        elif r["criterion"] == DEFAULT_CRITERION and r["allocation"] == "global":
            s, g = float(r["sparsity"]), float(r["gamma"]) if r.get("gamma") else None
            variant = f"nirvana s={s:g} gamma={g:g}" if g is not None else f"nirvana s={s:g}"
            points.append({"source": source, "method": methods.DEFAULT, "variant": variant, "sparsity": s, "gamma": g})
            points[-1]["ppl"] = float(r["ppl_wikitext2"])
    return points, dense


def sweep_points() -> tuple[list[dict], dict]:
    """(points, {source: dense}) of the session's sweep, when its quality axis is perplexity or the 7-task error."""
    result = state.session.sweep
    if not result:
        return [], {}
    rows, settings = result
    key = SWEEP_METRICS.get(settings.get("metric"))
    if key is None:
        return [], {}
    source = "this session's sweep"

    def value(row):
        q = row.get("quality")
        return None if q is None else (q if key == "ppl" else 1 - q / 100)

    reference = next((r for r in rows if r["method"] == "dense"), None)
    dense = {source: {key: value(reference)}} if reference else {}
    points = [
        {"source": source, "method": r["method"], "variant": f"{r['method']} s={r['sparsity']:g}"}
        | {"sparsity": float(r["sparsity"]), "gamma": r.get("gamma"), key: value(r)}
        for r in rows
        if r["method"] != "dense" and r.get("axis") != "gamma"
    ]
    return points, dense


def section(model: str) -> None:
    st.markdown("##### Which sparsity and which method for my tolerance? (from the measured rows)")
    c = st.columns([2, 2, 5])
    metric = c[0].radio("I accept", list(METRICS), key="rec_metric", format_func=lambda m: f"a {m} loss")
    low, high = METRICS[metric][2]
    st.session_state.setdefault(f"rec_value_{metric}", float(METRICS[metric][3]))
    value = c[1].number_input(
        "at most" + (" (× dense)" if metric == "perplexity" else " (points)"),
        min_value=low,
        max_value=high,
        step=0.1 if metric == "perplexity" else 0.5,
        key=f"rec_value_{metric}",
        help=METRICS[metric][1],
    )
    with guard("recommending a sparsity") as g:
        tolerance = Tolerance(metric, float(value))
        points, dense = [], {}
        for more, more_dense in (benchmark_points(model), quality_points(model), sweep_points()):
            points, dense = points + more, dense | more_dense
        best = recommend(points, dense, tolerance)
        rows = evidence(points, dense, tolerance)
        state.session.recommendation = best  # the Sweep page marks it on its Pareto chart
    if g.failed:
        return
    if not rows:
        c[2].info(
            f"Nothing measured for `{model}` with {metric} yet: run a sweep (6 · Sweep) or "
            f"`python -m nirvana bench baselines --model {model}`."
        )
        return
    if best is None:
        c[2].warning(f"No measured point meets {tolerance.describe()}: prune less, or recover (LoRA) first.")
    else:
        gamma = f", γ = {best.gamma:g}" if best.gamma is not None else ""
        c[2].success(
            f"**Sparsity {best.sparsity:g} with {methods.label(best.method)}**{gamma} meets {tolerance.describe()} "
            f"({best.variant}, {best.source}). The largest sparsity measured that meets it; every point below."
        )
        if c[2].button("Set the Allocation sliders to it", key="rec_apply"):
            apply(best)
    shown = pd.DataFrame(rows)[["source", "variant", "sparsity", "change", "meets"]]
    label = "perplexity ÷ dense" if metric == "perplexity" else "accuracy points below dense"
    st.dataframe(shown.rename(columns={"change": label}), hide_index=True)


def apply(best) -> None:
    """Put the recommendation on the Allocation page: sparsity (and NIRVANA's gamma), the method drawn beside."""
    st.session_state["sparsity"] = float(best.sparsity)
    if best.gamma is not None and methods.has_sliders(best.method):
        st.session_state["gamma"] = float(best.gamma)
    if best.method in methods.baselines():
        st.session_state["alloc_methods"] = sorted({*st.session_state.get("alloc_methods", []), best.method})
    st.switch_page("pages/allocation.py")
