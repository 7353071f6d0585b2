"""The committed baselines benchmark on the Evidence page: NIRVANA beside LLM-Pruner and FLAP, measured.

Read from `benchmarks/baselines/baselines-<model>.csv` (what `python -m nirvana bench baselines`
writes, one row per model x measure) through the report's own functions
(`nirvana.bench.baselines_report.variants` and `ablations`), so the table here and the markdown
beside the CSV show the same figures; nothing is copied by hand or computed live. The rows the
benchmark plans (`plan_jobs`) that the CSV does not hold yet are listed, so a partial grid says
which measurements are missing.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pandas as pd
import streamlit as st

import nirvana.bench.baselines as bench
from nirvana.accuracy.tasks import ZEROSHOT7
from nirvana.bench.accuracy_report import SHORT
from nirvana.bench.base import pending
from nirvana.bench.baselines_report import ablations, by_sparsity, variants
from nirvana.bench.rows import read_rows
from ui.errors import guard

OTHER_MEASURES = {
    "ppl": "perplexity + speed",
    "lambada_openai": "LAMBADA",
    "mbpp": "MBPP pass@1",
    "mbpp_bpb": "MBPP bits/byte",
    "gsm8k_bpb": "GSM8K bits/byte",
}


def committed(directory: Path | None = None) -> list[Path]:
    """The baselines CSVs committed (one per model)."""
    return sorted(Path(directory or bench.DEFAULT_OUT).glob("baselines-*.csv"))


def _pct(value) -> float | None:
    return None if value is None else round(100 * value, 1)


def _number(value, digits: int = 2) -> float | None:
    try:
        return round(float(value), digits)
    except (TypeError, ValueError):
        return None


def table(rows: list[dict], extra: list[dict]) -> pd.DataFrame:
    """One line per model variant (dense first, then by sparsity; the grids' ablations after the measured
    rows), laid out like the paper's table: perplexities, LAMBADA, the seven tasks and their average (%)."""
    out = []
    for v in by_sparsity([*variants(rows), *extra]):
        tasks, lambada, mbpp = v["tasks"], v.get("lambada"), v.get("mbpp")
        line = {
            "model": v["variant"],
            "sparsity": 0.0 if v.get("method") == "dense" else _number(v.get("sparsity")),
            "WikiText-2 ppl": _number(v.get("ppl_wikitext2")),
            "PTB ppl": _number(v.get("ppl_ptb")),
            "LAMBADA acc (%)": _pct(lambada[0]) if lambada else None,
            "LAMBADA ppl": _number(lambada[2]) if lambada else None,
        }
        line.update({f"{SHORT[t]} (%)": _pct(tasks[t][0]) if t in tasks else None for t in ZEROSHOT7})
        line["Avg 7 (%)"] = _pct(v.get("average"))
        line["Avg ± se"] = _pct(v.get("average_se"))
        line["MBPP pass@1 (%)"] = _pct(mbpp[0]) if mbpp else None
        bpb = v.get("bpb", {}).get("mbpp_bpb")
        line["MBPP bits/byte"] = _number(bpb[0], 3) if bpb and bpb[0] is not None else None
        line["± se (bits/byte)"] = _number(bpb[1], 3) if bpb and bpb[1] is not None else None
        line["params (M)"] = _number(float(v["params_after"]) / 1e6, 1) if v.get("params_after") else None
        line["achieved block sparsity"] = _number(v.get("achieved_block_sparsity"), 4)
        matched = v.get("matched")
        line["matched (1%)"] = "" if matched is None else ("yes" if matched else "NOT matched")
        line["source"] = v.get("source", "measured (this CSV)")
        out.append(line)
    return pd.DataFrame(out)


def planned(path: Path, rows: list[dict], model: str) -> tuple[int, dict[str, list[str]]]:
    """(rows the benchmark plans with its defaults, {variant: the measures of it not in the CSV at `path` yet})."""
    config = bench.recorded_config(path, model)  # the grid as its runs planned it (else the defaults)
    if not path.with_suffix(".grid.json").exists():  # MBPP pass@1 is planned only with code execution
        config = replace(config, allow_code_execution=any(r.get("measure") == "mbpp" for r in rows))
    jobs = bench.BASELINES.jobs(config)
    missing: dict[str, list[str]] = {}
    for job in pending(bench.BASELINES, config, jobs):
        missing.setdefault(job.variant.name, []).append(job.measure)
    return len(jobs), missing


def _measures(measures: list[str]) -> str:
    """`perplexity + speed, the 7 zero-shot tasks, LAMBADA`: the measures in plan order, all seven tasks as one."""
    all_tasks = all(t in measures for t in ZEROSHOT7)
    named = []
    for m in measures:
        if m not in ZEROSHOT7:
            named.append(OTHER_MEASURES.get(m, m))
        elif not all_tasks:
            named.append(SHORT[m])
        elif "the 7 zero-shot tasks" not in named:
            named.append("the 7 zero-shot tasks")
    return ", ".join(named)


def _caption(rows: list[dict]) -> str:
    ppl = next((r for r in rows if r["measure"] == "ppl"), rows[0])
    task = next((r for r in rows if r["measure"] in ZEROSHOT7), None)
    gold = next((r for r in rows if r["measure"] == "mbpp_bpb"), None)
    lora = next((r for r in rows if r.get("lora")), None)
    finished = sorted(r["finished_utc"] for r in rows)
    parts = [
        f"Measured by `python -m nirvana bench baselines --model {ppl['model']}` ({finished[0]} – {finished[-1]} UTC, "
        f"{ppl['machine']}): every method pruned on the same calibration batch at the same target block sparsity "
        "(matched = achieved block-parameter sparsity within 1% of the target).",
        f"Perplexity on the first {int(float(ppl['ppl_tokens'] or ppl['limit'])):,} tokens of WikiText-2 test and PTB "
        "validation.",
    ]
    if task:
        parts.append(
            f"Zero-shot: the first {task['limit']} examples of each task (lm-eval, the paper's metric), the 7-task "
            "average with ± one standard error."
        )
    if gold:
        parts.append(
            f"MBPP bits/byte: the gold answer's bits per byte under OLMES's 3-shot prompt, the first {gold['limit']} "
            "problems, lower is better."
        )
    if lora:
        parts.append(f"'+ LoRA' rows: the same model after the recovery module's default LoRA budget ({lora['lora']}).")
    parts.append(
        "Ablation rows (another criterion under NIRVANA's allocation) are read from the committed quality and "
        "accuracy grids, not re-run. A cell shown as None: not measured yet."
    )
    return " ".join(parts)


def evidence(model: str) -> None:
    """The section of the Evidence page for `model` (the page's model selector): table, PNG, caption, and which
    rows of the grid are still missing."""
    st.markdown("##### Does NIRVANA beat LLM-Pruner, FLAP and SliceGPT? (the paper's baselines, measured)")
    path = next((p for p in committed() if p.stem.removeprefix("baselines-") == model), None)
    if path is None:
        st.caption(f"No baselines benchmark for `{model}` yet: `python -m nirvana bench baselines --model {model}`.")
        return
    with guard("reading the committed baselines benchmark") as g:
        rows = read_rows(path)
        if rows:
            name = rows[0]["model"]
            extra = ablations(name, bench.SPARSITIES)
            frame, (total, missing) = table(rows, extra), planned(path, rows, name)
    if g.failed:
        return
    if not rows:
        st.caption(f"`{path.name}` has no rows yet: the benchmark writes one per finished measurement.")
        return
    st.caption(_caption(rows))
    st.dataframe(frame, hide_index=True)
    if missing:
        st.warning(
            f"**Partial grid:** {len(rows)} of the {total} rows the benchmark plans are measured; the others are "
            "missing, so no conclusion is drawn from their empty cells. Missing: "
            + "; ".join(f"{variant}: {_measures(measures)}" for variant, measures in missing.items())
            + ".",
            icon=":material/pending:",
        )
    else:
        st.caption(f"All {total} planned rows are measured.")
    png = path.with_suffix(".png")
    if png.exists():
        st.image(str(png), caption=f"{png.name}: WikiText-2 perplexity and the 7-task average, as the bench drew it")
    md = path.with_suffix(".md")
    c = st.columns(2)
    c[0].download_button(
        "Download CSV", path.read_bytes(), file_name=path.name, mime="text/csv", on_click="ignore", key="baselines_csv"
    )
    if md.exists():
        c[1].download_button(
            "Download the markdown table",
            md.read_bytes(),
            file_name=md.name,
            mime="text/markdown",
            on_click="ignore",
            key="baselines_md",
        )
