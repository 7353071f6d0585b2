"""The quality benchmark's report: winners, the three ablations, markdown and PNG plots.

Everything here is computed from the CSV rows `nirvana.bench.quality` appends (strings, as
`csv.DictReader` gives them), so `--report-only` rebuilds the report without a model.
"""

from __future__ import annotations

import statistics
from pathlib import Path

from nirvana.bench.quality_config import DEFAULT_OUT, GRID_CRITERIA, QualityConfig
from nirvana.charts import CRITERION_COLORS
from nirvana.scoring.criteria import CRITERIA, DEFAULT_CRITERION

_DATA_FREE = tuple(name for name, c in CRITERIA.items() if not c.needs_data)  # magnitude, random


def committed_reports(directory: Path | None = None) -> list[Path]:
    """The quality CSVs under `benchmarks/quality/` (or `directory`): the analytic-gamma runs first
    (one per model), then the runs at a fixed `--gamma`; by name within each group."""

    folder = Path(directory or DEFAULT_OUT)
    paths = folder.glob("quality-*.csv") if folder.is_dir() else []
    return sorted(paths, key=lambda p: ("-gamma" in p.stem, p.name))


def config_from_rows(rows: list[dict], csv_path: Path | None = None) -> QualityConfig:
    """The grid a CSV actually holds, as a `QualityConfig` (for summarising a committed report)."""

    pruned = [r for r in rows if r["criterion"] != "dense"]
    present = {r["criterion"] for r in pruned}
    order = [c for c in GRID_CRITERIA if c in present] + sorted(present - set(GRID_CRITERIA))
    seeds: dict[tuple, set] = {}
    for r in pruned:
        if r["allocation"] == "global" and r["calib_seed"] != "":
            seeds.setdefault((r["criterion"], r["sparsity"]), set()).add(r["calib_seed"])
    candidates = max((len(v) for v in seeds.values()), default=1)
    config = QualityConfig(
        model=rows[0]["model"] if rows else "?",
        criteria=tuple(order),
        sparsities=tuple(sorted({float(r["sparsity"]) for r in pruned})),
        uniform_criteria=tuple(
            c for c in order if any(r["criterion"] == c and r["allocation"] == "uniform" for r in pruned)
        ),
        select_criteria=tuple(c for c in order if any(len(v) > 1 for (cc, _), v in seeds.items() if cc == c)),
        candidates=candidates,
        tokens=int(rows[0]["token_budget"]) if rows else 0,
    )
    if csv_path is not None:
        config.out_dir = Path(csv_path).parent
    return config


def _f(row: dict, col: str) -> float:
    return float(row[col])


def pick(rows, criterion, allocation, sparsity, seed="0") -> dict | None:
    """The row of (criterion, allocation, sparsity) on calibration seed `seed` (or data-free)."""
    for r in rows:
        if (
            r["criterion"] == criterion
            and r["allocation"] == allocation
            and float(r["sparsity"]) == sparsity
            and r["calib_seed"] in (seed, "")
        ):
            return r
    return None


def candidate_rows(rows, criterion: str, sparsity: float) -> list[dict]:
    """The KL-selection candidates (global allocation, any calibration seed) of one sparsity."""
    return [
        r
        for r in rows
        if r["criterion"] == criterion
        and r["allocation"] == "global"
        and r["calib_seed"] != ""
        and float(r["sparsity"]) == sparsity
    ]


def _winner(rows, config: QualityConfig, s: float) -> dict | None:
    ranked = sorted(
        (r for c in config.criteria if (r := pick(rows, c, "global", s))), key=lambda r: _f(r, "ppl_wikitext2")
    )
    if not ranked:
        return None
    best = ranked[0]
    second = ranked[1] if len(ranked) > 1 else None
    nirvana = next((r for r in ranked if r["criterion"] == DEFAULT_CRITERION), None)
    return {
        "sparsity": s,
        "winner": best["criterion"],
        "ppl": _f(best, "ppl_wikitext2"),
        "runner_up": second and second["criterion"],
        "runner_up_ppl": second and _f(second, "ppl_wikitext2"),
        "margin_pct": second and 100 * (_f(second, "ppl_wikitext2") / _f(best, "ppl_wikitext2") - 1),
        "nirvana_rank": nirvana and ranked.index(nirvana) + 1,
        "nirvana_ppl": nirvana and _f(nirvana, "ppl_wikitext2"),
        "ranking": [(r["criterion"], _f(r, "ppl_wikitext2")) for r in ranked],
    }


def _selection(rows, c: str, s: float) -> dict | None:
    cands = candidate_rows(rows, c, s)
    if len(cands) < 2:
        return None
    chosen = min(cands, key=lambda r: (_f(r, "kl"), int(r["calib_seed"])))
    return {
        "sparsity": s,
        "criterion": c,
        "k": len(cands),
        "chosen_seed": int(chosen["calib_seed"]),
        "chosen": chosen,
        **{f"median_{col}": statistics.median(_f(r, col) for r in cands) for col in ("kl", "ppl_wikitext2", "ppl_ptb")},
        "best_ppl_wikitext2": min(_f(r, "ppl_wikitext2") for r in cands),
    }


def summarize(rows: list[dict], config: QualityConfig) -> dict:
    """Winners per sparsity (global allocation, calibration seed 0) and the three ablations."""
    sparsities = sorted({float(r["sparsity"]) for r in rows if r["criterion"] != "dense"})
    dense = next((r for r in rows if r["criterion"] == "dense"), None)
    winners, ablations = [], {"nirvana_vs_magnitude": [], "global_vs_uniform": [], "kl_selected_vs_random": []}
    for s in sparsities:
        if w := _winner(rows, config, s):
            winners.append(w)
        n, m = pick(rows, "nirvana", "global", s), pick(rows, "magnitude", "global", s)
        if n and m:
            ablations["nirvana_vs_magnitude"].append({"sparsity": s, "nirvana": n, "magnitude": m})
        for c in config.uniform_criteria:
            g, u = pick(rows, c, "global", s), pick(rows, c, "uniform", s)
            if g and u:
                ablations["global_vs_uniform"].append({"sparsity": s, "criterion": c, "global": g, "uniform": u})
        for c in config.select_criteria:
            if sel := _selection(rows, c, s):
                ablations["kl_selected_vs_random"].append(sel)
    return {"dense": dense, "winners": winners, "ablations": ablations, "sparsities": sparsities}


def verdicts(summary: dict) -> dict:
    """How often each ablation's claim held on WikiText-2 and on PTB (lower PPL = better)."""

    def count(items, better, worse):
        out = {}
        for col in ("ppl_wikitext2", "ppl_ptb"):
            out[col] = (sum(better(a, col) < worse(a, col) for a in items), len(items))
        return out

    ab = summary["ablations"]
    return {
        "nirvana_beats_magnitude": count(
            ab["nirvana_vs_magnitude"], lambda a, c: _f(a["nirvana"], c), lambda a, c: _f(a["magnitude"], c)
        ),
        "global_beats_uniform": count(
            ab["global_vs_uniform"], lambda a, c: _f(a["global"], c), lambda a, c: _f(a["uniform"], c)
        ),
        "selected_beats_median": count(
            ab["kl_selected_vs_random"], lambda a, c: _f(a["chosen"], c), lambda a, c: a[f"median_{c}"]
        ),
    }


def _ppl3(r: dict) -> str:
    return f"{_f(r, 'ppl_wikitext2'):.2f} | {_f(r, 'ppl_ptb'):.2f} | {_f(r, 'kl'):.4f}"


def _header(rows: list[dict], config: QualityConfig) -> list[str]:
    first = rows[0] if rows else {}
    gamma_used = sorted({r["gamma"] for r in rows if r["criterion"] != "dense" and r.get("gamma")}) or ["?"]
    finished = sorted(r["finished_utc"] for r in rows) if rows else ["?"]
    total_min = sum(float(r["seconds"]) for r in rows) / 60 if rows else 0
    tok = {d: "/".join(sorted({r.get(f"tokens_{d}", "") for r in rows})) for d in config.datasets}
    return [
        f"# Quality benchmark: {config.model}",
        "",
        f"- Run: {finished[0]} to {finished[-1]} UTC, {len(rows)} rows, {total_min:.0f} min of row time "
        "(scoring included in the first row that needed it; rows appended by resumed runs keep their own times)",
        f"- Machine: {first.get('machine', '?')}",
        f"- Perplexity: WikiText-2 test and PTB validation, first {config.tokens} tokens of each "
        f"(tokens evaluated: {', '.join(f'{d} {v}' for d, v in tok.items())}), "
        f"non-overlapping {config.window}-token windows, PPL = exp(mean NLL)",
        f"- KL(P_dense || P_pruned): mean nats per token on the anchor set {config.anchor_label} "
        "(summed over the vocabulary, fp32); the anchor shares no document with any calibration batch",
        f"- Calibration: {config.samples} x {config.seq_len} tokens from {config.pool}, candidate seed 0 for every "
        f"data-driven criterion; gamma = "
        + (f"gamma* (analytic) = {'/'.join(gamma_used)}" if config.gamma is None else f"{config.gamma:g} (fixed)")
        + f"; align {config.align}",
        f"- Grid: criteria {', '.join(config.criteria)} with global allocation; uniform allocation for "
        f"{', '.join(config.uniform_criteria) or 'none'}; "
        + (
            f"KL-guided calibration (K = {config.candidates}, seeds 0..{config.candidates - 1}) for "
            f"{', '.join(config.select_criteria)} ({' and '.join(_DATA_FREE)} use no calibration data)"
            if config.select_criteria
            else "no KL-guided calibration"
        )
        + f"; sparsities {', '.join(f'{s:g}' for s in config.sparsities)}",
        *([f"- Note: {config.note}"] if config.note else []),
        "",
    ]


def _verdict_lines(summary: dict) -> list[str]:
    v = verdicts(summary)
    claims = (
        ("NIRVANA score beats magnitude", "nirvana_beats_magnitude", "sparsities"),
        ("global + gamma allocation beats uniform", "global_beats_uniform", "(criterion, sparsity) pairs"),
        (
            "the KL-selected calibration batch beats the median of the K candidates",
            "selected_beats_median",
            "(criterion, sparsity) pairs",
        ),
    )
    lines = ["## The paper's claims, counted", ""]
    for text, key, unit in claims:
        (w, n), (p, _) = v[key]["ppl_wikitext2"], v[key]["ppl_ptb"]
        lines.append(
            f"- {text}: WikiText-2 in {w} of {n} {unit}, PTB in {p} of {n}." if n else f"- {text}: not in this grid."
        )
    return [*lines, ""]


def _has_ablations(summary: dict) -> bool:
    return any(summary["ablations"].values())


def _ablation_lines(ab: dict) -> list[str]:
    """The three ablation tables; those the grid does not hold are left out."""
    sections = [
        (
            "Ablation 1: NIRVANA score vs magnitude (global allocation)",
            [],
            [
                "| sparsity | NIRVANA wt2 | PTB | KL | magnitude wt2 | PTB | KL |",
                "|---:|---:|---:|---:|---:|---:|---:|",
            ],
            [
                f"| {a['sparsity']:g} | {_ppl3(a['nirvana'])} | {_ppl3(a['magnitude'])} |"
                for a in ab["nirvana_vs_magnitude"]
            ],
        ),
        (
            "Ablation 2: global ranking with gamma vs uniform per-layer sparsity",
            [],
            [
                "| sparsity | criterion | global wt2 | PTB | KL | uniform wt2 | PTB | KL |",
                "|---:|---|---:|---:|---:|---:|---:|---:|",
            ],
            [
                f"| {a['sparsity']:g} | {a['criterion']} | {_ppl3(a['global'])} | {_ppl3(a['uniform'])} |"
                for a in ab["global_vs_uniform"]
            ],
        ),
        (
            "Ablation 3: KL-selected calibration vs a randomly drawn batch (median of the K candidates)",
            [
                "The selection is made on anchor KL, so the selected KL is the minimum by construction; the "
                "perplexities are on held-out test text and are the fair comparison.",
                "",
            ],
            [
                "| sparsity | criterion | K | chosen seed | selected wt2 | PTB | KL | median wt2 | median PTB "
                "| median KL | best wt2 |",
                "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
            ],
            [
                f"| {a['sparsity']:g} | {a['criterion']} | {a['k']} | {a['chosen_seed']} | {_ppl3(a['chosen'])} | "
                f"{a['median_ppl_wikitext2']:.2f} | {a['median_ppl_ptb']:.2f} | {a['median_kl']:.4f} | "
                f"{a['best_ppl_wikitext2']:.2f} |"
                for a in ab["kl_selected_vs_random"]
            ],
        ),
    ]
    lines = []
    for title, intro, header, rows in sections:
        if rows:
            lines += ["", f"## {title}", "", *intro, *header, *rows]
    return lines or ["", "(No ablation in this grid: it holds neither magnitude, uniform rows nor K > 1 candidates.)"]


def markdown_report(rows: list[dict], config: QualityConfig, summary: dict) -> str:
    """The committed report: what was run, the full table, winners per sparsity and the ablations."""
    dense = summary["dense"]
    lines = _header(rows, config)
    if dense:
        lines += [
            f"Dense model: WikiText-2 PPL {_f(dense, 'ppl_wikitext2'):.2f}, PTB PPL {_f(dense, 'ppl_ptb'):.2f}.",
            "",
        ]
    lines += _verdict_lines(summary)
    lines += [
        "## All rows (calibration seed 0)",
        "",
        "| sparsity | criterion | allocation | achieved | params cut | WikiText-2 PPL | PTB PPL | KL |",
        "|---:|---|---|---:|---:|---:|---:|---:|",
    ]
    for s in summary["sparsities"]:
        for c in config.criteria:
            for alloc in ("global", "uniform"):
                if r := pick(rows, c, alloc, s):
                    lines.append(
                        f"| {s:g} | {c} | {alloc} | {_f(r, 'achieved_block_sparsity'):.3f} | "
                        f"{_f(r, 'total_param_reduction'):.3f} | {_ppl3(r)} |"
                    )
    lines += ["", "## Winner per sparsity on WikiText-2 (global allocation, equal calibration)", ""]
    for w in summary["winners"]:
        text = f"- **{w['sparsity']:g}**: {w['winner']} ({w['ppl']:.2f})"
        if w["runner_up"]:
            text += f", {w['margin_pct']:.1f}% lower PPL than {w['runner_up']} ({w['runner_up_ppl']:.2f})"
        if w["nirvana_rank"] and w["winner"] != DEFAULT_CRITERION:
            text += f"; nirvana ranks {w['nirvana_rank']} ({w['nirvana_ppl']:.2f})"
        lines.append(text + ". Ranking: " + ", ".join(f"{c} {p:.2f}" for c, p in w["ranking"]))
    lines += _ablation_lines(summary["ablations"])
    plots = [f"`{config.plot_prefix}_ppl.png` (PPL and KL vs sparsity)"]
    if _has_ablations(summary):
        plots.append(f"`{config.plot_prefix}_ablations.png`")
    lines += ["", "Plots: " + ", ".join(plots) + ".", ""]
    return "\n".join(lines)


def _plot_curves(rows, config: QualityConfig, summary: dict, path: Path) -> None:
    # here, not at the top: matplotlib only draws benchmark plots (Agg is chosen before pyplot)
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(15, 5.2))
    dense = summary["dense"]
    for ax, col, title in zip(axes, ("ppl_wikitext2", "ppl_ptb", "kl"), ("WikiText-2 PPL", "PTB PPL", "KL to dense")):
        for alloc, style in (("global", {"marker": "o"}), ("uniform", {"marker": "x", "linestyle": "--"})):
            names = config.criteria if alloc == "global" else config.uniform_criteria
            for c in names:
                pts = [(s, _f(r, col)) for s in summary["sparsities"] if (r := pick(rows, c, alloc, s))]
                if pts:
                    label = c if alloc == "global" else f"{c} uniform"
                    ax.plot(*zip(*pts), color=CRITERION_COLORS.get(c), label=label, **style)
        if dense and col != "kl":
            ax.axhline(_f(dense, col), color="black", linestyle=":", label="dense")
        ax.set_yscale("log")
        ax.set_xlabel("target block sparsity")
        ax.set_title(title)
        ax.grid(alpha=0.3)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=min(6, len(labels)), fontsize=8, frameon=False)
    fig.suptitle(f"{config.model}: quality vs sparsity (solid: global + gamma; dashed: uniform)")
    fig.tight_layout(rect=(0, 0.1, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _grouped_bars(ax, groups: list[str], series: dict[str, list[float]], colors: dict | None = None) -> None:
    """Bars of several series per group on a shared x axis."""
    xs = range(len(groups))
    width = 0.8 / max(1, len(series))
    for j, (label, values) in enumerate(series.items()):
        offset = (j - (len(series) - 1) / 2) * width
        color = (colors or {}).get(label)
        ax.bar([x + offset for x in xs], values, width=width, label=label, color=color)
    ax.set_xticks(list(xs), groups)


def _ratio_series(items, criteria, sparsities, numerator, denominator) -> dict[str, list[float]]:
    """Per criterion, numerator/denominator WikiText-2 PPL at every sparsity (nan when absent)."""
    out = {}
    for c in criteria:
        by_s = {a["sparsity"]: a for a in items if a["criterion"] == c}
        if by_s:
            out[c] = [numerator(by_s[s]) / denominator(by_s[s]) if s in by_s else float("nan") for s in sparsities]
    return out


def _plot_ablations(config: QualityConfig, summary: dict, path: Path) -> None:
    # here, not at the top: matplotlib only draws benchmark plots (Agg is chosen before pyplot)
    import matplotlib.pyplot as plt

    ab, sparsities = summary["ablations"], summary["sparsities"]
    labels = [f"{s:g}" for s in sparsities]
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.5))

    items = ab["nirvana_vs_magnitude"]
    _grouped_bars(
        axes[0],
        [f"{a['sparsity']:g}" for a in items],
        {
            "nirvana": [_f(a["nirvana"], "ppl_wikitext2") for a in items],
            "magnitude": [_f(a["magnitude"], "ppl_wikitext2") for a in items],
        },
        CRITERION_COLORS,
    )
    axes[0].set_yscale("log")
    axes[0].set_ylabel("WikiText-2 PPL")
    axes[0].set_title("NIRVANA vs magnitude (global + gamma)")

    ppl = "ppl_wikitext2"
    uniform = _ratio_series(
        ab["global_vs_uniform"], config.uniform_criteria, sparsities, lambda a: _f(a["uniform"], ppl),
        lambda a: _f(a["global"], ppl),
    )  # fmt: skip
    _grouped_bars(axes[1], labels, uniform, CRITERION_COLORS)
    axes[1].set_yscale("log")
    axes[1].set_ylabel("uniform PPL / global PPL (WikiText-2)")
    axes[1].set_title("global + gamma vs uniform (> 1: global better)")

    selected = _ratio_series(
        ab["kl_selected_vs_random"], config.select_criteria, sparsities, lambda a: a["median_ppl_wikitext2"],
        lambda a: _f(a["chosen"], ppl),
    )  # fmt: skip
    selected = {c: [100 * (v - 1) for v in values] for c, values in selected.items()}
    _grouped_bars(axes[2], labels, selected, CRITERION_COLORS)
    axes[2].set_ylabel("WikiText-2 PPL cut vs median of K (%)")
    axes[2].set_title(f"KL-selected vs median of K = {config.candidates} (> 0: selection better)")
    axes[2].axhline(0.0, color="black", linewidth=0.8)

    for ax in axes:
        ax.set_xlabel("target block sparsity")
        ax.grid(alpha=0.3, axis="y")
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
    axes[1].axhline(1.0, color="black", linewidth=0.8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_report(rows: list[dict], config: QualityConfig, summary: dict, out_dir: Path) -> list[Path]:
    """Two PNGs: PPL (WikiText-2, PTB) and KL vs sparsity per criterion; the three ablations."""
    # here, not at the top: matplotlib only draws benchmark plots (Agg is chosen before pyplot)
    import matplotlib

    matplotlib.use("Agg")
    out_dir = Path(out_dir)
    paths = [out_dir / f"{config.plot_prefix}_ppl.png", out_dir / f"{config.plot_prefix}_ablations.png"]
    _plot_curves(rows, config, summary, paths[0])
    if not _has_ablations(summary):
        return paths[:1]
    _plot_ablations(config, summary, paths[1])
    return paths


def write_report(rows: list[dict], config: QualityConfig) -> tuple[Path, str]:
    """Write the markdown (and plots) next to the CSV; return (markdown path, markdown text)."""
    summary = summarize(rows, config)
    text = markdown_report(rows, config, summary)
    md = config.csv_path.with_suffix(".md")
    md.parent.mkdir(parents=True, exist_ok=True)
    md.write_text(text)
    if rows:
        plot_report(rows, config, summary, config.csv_path.parent)
    return md, text
