"""The distillation benchmark's report: a table per pruned model (recipes x budgets) and perplexity
against training tokens, one panel per pruned model, one line per recipe. Only what the CSV holds."""

from __future__ import annotations

from pathlib import Path

from nirvana.bench.rows import number


def _model(row: dict) -> str:
    return f"{row['criterion']} ({row['allocation']}) {float(row['sparsity']):g}"


def _cached(row: dict) -> str:
    """A mark on the speed of a row whose teacher logits came from `--teacher-cache` (faster, same figures)."""
    how = str(row.get("teacher_logits") or "")
    return f" (teacher logits {how})" if how.startswith("read") else ""


def best_per_budget(rows: list[dict], recipes: tuple[str, ...] = ()) -> list[str]:
    """For each pruned model and budget, the recipe with the lowest WikiText-2 perplexity after; where some of
    `recipes` have no row yet, the line says "best so far" and names them, so a partial budget is not read as
    decided."""
    out = []
    groups: dict[tuple[str, int], list[dict]] = {}
    for r in rows:
        groups.setdefault((_model(r), int(float(r["budget"]))), []).append(r)
    for (model, budget), group in sorted(groups.items()):
        best = min(group, key=lambda r: number(r["ppl_wikitext2_after"]) or float("inf"))
        others = ", ".join(f"{r['recipe']} {r['ppl_wikitext2_after']}" for r in group if r is not best)
        missing = [x for x in recipes if x not in {r["recipe"] for r in group}]
        out.append(
            f"- {model}, {budget:,} tokens: best{' so far' if missing else ''} {best['recipe']} "
            f"(WikiText-2 {best['ppl_wikitext2_after']}, KL {best['kl_after']})"
            + (f"; {others}" if others else "")
            + (f"; {', '.join(missing)} not run yet" if missing else "")
        )
    return out


def ranking(rows: list[dict]) -> list[str]:
    """For each budget and recipe, the pruned models at one sparsity ordered by WikiText-2 perplexity after
    recovery (lowest first), where two or more are measured: does a recipe change which method is best?"""
    groups: dict[tuple[int, float, str], list[dict]] = {}
    for r in rows:
        if number(r.get("ppl_wikitext2_after")) is not None:
            groups.setdefault((int(float(r["budget"])), float(r["sparsity"]), r["recipe"]), []).append(r)
    out = []
    for (budget, sparsity, recipe), group in sorted(groups.items()):
        if len(group) < 2:
            continue
        ordered = sorted(group, key=lambda r: number(r["ppl_wikitext2_after"]))
        order = " < ".join(f"{r['criterion']} {r['ppl_wikitext2_after']}" for r in ordered)
        out.append(f"- {budget:,} tokens, {sparsity:g} sparsity, {recipe}: {order}")
    return out


def ranking_section(rows: list[dict]) -> list[str]:
    """`ranking` under its heading, or nothing when no two pruned models share a sparsity yet."""
    order = ranking(rows)
    heading = "The pruned models at one sparsity, by WikiText-2 perplexity after each recipe (lowest first):"
    return ["", heading, "", *order] if order else []


def readme_summary(rows: list[dict], config, pending: int) -> str:
    """The README's block: how much of the grid is measured, and the best recipe per pruned model and budget."""
    total = len(rows) + pending
    state = "complete" if not pending else f"in progress: {len(rows)} of {total} rows measured, {pending} to run"
    lines = [
        f"`benchmarks/distill/distill-{config.model.replace('/', '_')}.md` ({state}; resumable). Lowest WikiText-2 "
        f"perplexity (first {config.tokens:,} test tokens) after recovery, per pruned model and training budget:",
        "",
        *(best_per_budget(rows, config.recipes) or ["- no rows yet"]),
    ]
    lines += ranking_section(rows)
    return "\n".join(lines) + "\n"


def write_report(rows: list[dict], config) -> Path:
    out = Path(config.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    lines = [
        f"# Distillation benchmark ({config.model})",
        "",
        f"Written by `python -m nirvana bench distill --model {config.model}` (`nirvana/bench/distill.py`): each "
        "pruned model recovered by every recipe at every training-token budget, on the same seeded windows "
        f"of `{config.data}`. Perplexity on the first {config.tokens} tokens (512-token windows); KL to the dense "
        f"model (nats/token) on {config.kl_sequences} held-out windows of the training data; acc7 = the seven "
        f"tasks' average (first {config.acc_limit or '-'} examples each), percent. LoRA lr {config.lr:g}, full "
        f"fine-tuning lr {config.full_lr:g}, temperature {config.temperature:g}. tok/s: training tokens per second "
        "(with how many of the teacher's logits were read from `--teacher-cache` rather than computed).",
    ]
    if config.note:
        lines += ["", config.note]
    lines += [
        "",
        "| pruned model | recipe | tokens | WT2 before | WT2 after | PTB after | KL before | KL after | acc7 before "
        "| acc7 after | tok/s | peak RSS (MB) | load |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in sorted(rows, key=lambda r: (_model(r), r["recipe"], int(float(r["budget"])))):
        lines.append(
            f"| {_model(r)} | {r['recipe']} | {int(float(r['budget'])):,} | {r['ppl_wikitext2_before']} | "
            f"{r['ppl_wikitext2_after']} | {r['ppl_ptb_after']} | {r['kl_before']} | {r['kl_after']} | "
            f"{r.get('acc7_before') or '-'} | {r.get('acc7_after') or '-'} | {r['tokens_per_s']}{_cached(r)} | "
            f"{r['peak_rss_mb']} | {r['load_avg']} |"
        )
    lines += ["", "Lowest WikiText-2 perplexity after recovery, per pruned model and budget:", ""]
    lines += best_per_budget(rows, config.recipes) or ["- no rows yet"]
    lines += ranking_section(rows)
    md = out / f"distill-{config.model.replace('/', '_')}.md"
    md.write_text("\n".join(lines) + "\n")
    plot(rows, md.with_suffix(".png"))
    return md


def plot(rows: list[dict], png: Path) -> Path | None:
    # here, not at the top: matplotlib only draws benchmark plots (Agg is chosen before pyplot)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if not rows:
        return None
    models = sorted({_model(r) for r in rows})
    fig, axes = plt.subplots(1, len(models), figsize=(4.2 * len(models), 3.6), squeeze=False)
    for ax, model in zip(axes[0], models):
        mine = [r for r in rows if _model(r) == model]
        for recipe in sorted({r["recipe"] for r in mine}):
            mine_recipe = [r for r in mine if r["recipe"] == recipe]
            pts = sorted((int(float(r["budget"])), number(r["ppl_wikitext2_after"])) for r in mine_recipe)
            ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-", label=recipe)
        before = number(mine[0]["ppl_wikitext2_before"])
        if before:
            ax.axhline(before, color="grey", linestyle=":", label="pruned, before")
        ax.set(title=model, xlabel="training tokens", ylabel="WikiText-2 perplexity")
        budgets = sorted({int(float(r["budget"])) for r in mine})
        ax.set_xscale("log", base=2)  # the budgets double: evenly spaced, each tick a measured budget
        ax.set_xticks(budgets, [f"{b / 1024:g}k" if b >= 1024 else str(b) for b in budgets])
        ax.minorticks_off()
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(png, dpi=110)
    plt.close(fig)
    return png
