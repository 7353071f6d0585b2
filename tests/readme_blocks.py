"""Blocks of the README and the docs pages generated from committed benchmark output, so no figure in them is
typed by hand.

    .venv/bin/python tests/readme_blocks.py          # print each block
    .venv/bin/python tests/readme_blocks.py --write  # rewrite them in place, in whichever file each one lives

A block sits between `<!-- generated: NAME -->` and `<!-- end: NAME -->` in the file BLOCKS names for it
(README.md or a page under docs/); tests/test_readme_blocks.py fails when one differs from what its
benchmark's files say now, and when a file holds a block this table does not know.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
FRONT_SPARSITIES = (0.2, 0.5)  # the front page's table: every method at these sparsities, beside dense


def baselines(model: str) -> str:
    """The summary of `bench baselines --model MODEL`, against the grid its runs planned."""
    from nirvana.bench.base import pending
    from nirvana.bench.baselines import BASELINES, BaselinesConfig, recorded_config
    from nirvana.bench.baselines_report import readme_summary
    from nirvana.bench.rows import read_rows

    config = recorded_config(BaselinesConfig(model=model).csv_path, model)
    return readme_summary(read_rows(config.csv_path), config, len(pending(BASELINES, config)))


def calibrated_on(model: str, calib: str) -> str:
    """The grid of `bench baselines --model MODEL --calib CALIB` beside the same models calibrated on the default
    text, MBPP gold bits per byte paired by problem (`baselines_report.calibration_table`)."""
    from nirvana.bench.base import pending
    from nirvana.bench.baselines import BASELINES, DEFAULT_OUT, grid_folder, recorded_config
    from nirvana.bench.baselines_report import calibration_table, variants
    from nirvana.bench.rows import read_rows

    folder = DEFAULT_OUT / grid_folder("calib", calib)
    config = recorded_config(folder / f"baselines-{model}.csv", model)
    table = calibration_table(variants(read_rows(config.csv_path)), config)
    source = (
        f"From `{config.csv_path.relative_to(ROOT)}` beside `{config.csv_path.name}` one folder up (`python -m nirvana "
        f"bench baselines --model {model} --calib {calib} ...`): the same methods, sparsities and settings, each "
        f"scored (and reconstructed) on {config.samples} x {config.seq_len} tokens of {calib} instead of WikiText-2 "
        f"validation; ± one standard error. {_left(len(pending(BASELINES, config)))}"
    )
    return "\n".join(table) + "\n\n" + source + "\n"


def distill(model: str) -> str:
    """The summary of `bench distill --model MODEL`, against its whole grid."""
    from nirvana.bench.base import pending
    from nirvana.bench.distill import DISTILL, DistillConfig
    from nirvana.bench.distill_report import readme_summary
    from nirvana.bench.rows import read_rows

    config = DistillConfig(model=model)
    rows = read_rows(config.csv_path) if config.csv_path.exists() else []
    return readme_summary(rows, config, len(pending(DISTILL, config)))


NOT_MEASURED = "not measured"


def _pm(value: float | None, se: float | None, scale: float, digits: int) -> str:
    from nirvana.bench.accuracy_report import plus_minus

    return plus_minus(value, se, scale, digits, missing=NOT_MEASURED)


def _pass(measured: tuple) -> str:
    """A pass@1 cell: (value, standard error, problems) as the report shows it (the count where none passed)."""
    from nirvana.bench.accuracy_report import pass_text

    return NOT_MEASURED if measured[0] is None else pass_text(*measured)


def _speed(v: dict, dense: dict | None) -> str:
    """Pruned / dense tokens per second (prefill / decode), or the flag that says it is not a result."""
    from nirvana.bench.baselines_report import speed_flag

    if v.get("method") == "dense":
        return "1.00 (reference)"
    flag = speed_flag(v, dense) if dense is not None else None
    if flag is None:
        return NOT_MEASURED
    if flag["disturbed"]:
        return f"**disturbed**: not a result (ideal at most {flag['ideal']:.2f})"
    wall = [flag["speedups"].get(phase) for phase in ("prefill", "decode")]
    shown = " / ".join("-" if x is None else f"{x:.2f}" for x in wall)
    return f"{shown} (ideal at most {flag['ideal']:.2f})"


def _front_grid(model: str, grid_methods: bool = False):
    """(config, rows, measured variants by name, [(label, Variant)] for dense and each method at FRONT_SPARSITIES)
    of the committed CSV of `bench baselines --model MODEL`; every method, or only the grid's methods and
    sparsities (`grid_methods`)."""
    from nirvana.bench.baselines import BaselinesConfig, Variant, recorded_config
    from nirvana.bench.baselines_report import variants
    from nirvana.bench.rows import read_rows
    from nirvana.methods import METHODS

    config = recorded_config(BaselinesConfig(model=model).csv_path, model)
    rows = read_rows(config.csv_path)
    measured = {v["variant"]: v for v in variants(rows)}
    wanted = [("dense", Variant("dense"))]
    methods = [m for m in METHODS if not grid_methods or m in config.methods]
    sparsities = [s for s in FRONT_SPARSITIES if not grid_methods or s in config.sparsities]
    wanted += [(METHODS[m].label, Variant(m, s)) for s in sparsities for m in methods]
    return config, rows, measured, wanted


def _row_head(label: str, variant, v: dict) -> list[str]:
    """The method and sparsity cells of a front-page row."""
    name = label + (" (not matched: another budget)" if v.get("matched") is False else "")
    return [name, "0%" if variant.method == "dense" else f"{variant.sparsity:.0%}"]


def front_results(model: str) -> str:
    """The front page's one results table: dense and every method at FRONT_SPARSITIES (NIRVANA at its analytic
    gamma*, no LoRA), from the committed CSV of `bench baselines --model MODEL`; what the CSV lacks says so."""
    from nirvana.bench.baselines_report import speed_flag
    from nirvana.measure.speed_check import TOLERANCE

    config, rows, measured, wanted = _front_grid(model)
    dense = measured.get("dense")
    lines = [
        "| method | sparsity | WikiText-2 perplexity | 7-task average (%) | MBPP bits/byte | speed-up vs dense "
        "(prefill / decode) |",
        "|---|---:|---:|---:|---:|---|",
    ]
    flags = []
    for label, variant in wanted:
        v = measured.get(variant.name, {"method": variant.method})
        ppl = v.get("ppl_wikitext2")
        bpb = v.get("bpb", {}).get("mbpp_bpb")
        if variant.method != "dense" and dense is not None and variant.name in measured:
            flags.append(speed_flag(v, dense))
        cells = [
            *_row_head(label, variant, v),
            NOT_MEASURED if ppl is None else f"{ppl:.2f}",
            _pm(v.get("average"), v.get("average_se"), 100, 1),
            NOT_MEASURED if not bpb or bpb[0] is None else _pm(bpb[0], bpb[1], 1, 3),
            _speed(v, dense),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    timed = [f for f in flags if f is not None]
    disturbed = sum(f["disturbed"] for f in timed)
    setting = next((r.get("speed_setting") for r in rows if r["variant"] == "dense" and r["measure"] == "ppl"), "")
    flagged = f"{disturbed} of {len(timed)} pruned speed-ups here are flagged"
    if timed and disturbed == len(timed):
        flagged += ": all of them, so the dense row's own timing is the likely fault (it was slowed)"
    source = config.csv_path.relative_to(ROOT)
    lines += [
        "",
        f"From `{source}` (`python -m nirvana bench baselines --model {model}`): perplexity on the first "
        f"{config.tokens:,} tokens of WikiText-2 test (lower is better); the paper's seven zero-shot tasks, the first "
        f"{config.limit} examples of each, ± one standard error; MBPP gold bits per byte on {config.bpb_limit} "
        f"problems (lower is better); NIRVANA at its analytic gamma*, no LoRA, every method on the same calibration "
        f"batch ({config.samples} x {config.seq_len} tokens). A speed-up is pruned / dense tokens per second "
        f"({setting or 'as recorded'}); one more than {TOLERANCE} x its ideal (the larger of dense / pruned block "
        "parameters and dense / pruned parameters) is flagged **disturbed** instead of shown: the machine was busy "
        f"while one of the two was timed. {flagged}.",
    ]
    return "\n".join(lines) + "\n"


POSTER_MBPP = {"nirvana": 23.8, "llm-pruner": 4.4}  # the poster's MBPP pass@1 (%) at 20%, Llama-3.1-8B


def poster_answer(nirvana: tuple, llm_pruner: tuple, dense: tuple = (None, None), paired: dict | None = None) -> str:
    """NIRVANA against LLM-Pruner on MBPP pass@1 at 20%, each (value, standard error) as fractions or (None, None)
    when not measured: the difference, whether it is more than two standard errors, or what is still to run;
    with the dense model's, what share of it each keeps. `paired` (`nirvana.measure.paired.paired_difference` of
    the two rows' per-problem outcomes): the difference's error over the same problems instead of the error of two
    independent samples."""
    import math

    from nirvana.methods import METHODS

    sides = (nirvana, llm_pruner)
    poster = f"the poster, on Llama-3.1-8B: {POSTER_MBPP['nirvana']} against {POSTER_MBPP['llm-pruner']}"
    if not all(x[0] is not None and x[1] is not None for x in sides):
        missing = [f"{METHODS[m].label}'s row" for m, x in zip(POSTER_MBPP, sides) if x[0] is None or x[1] is None]
        return (
            f"**The poster's question here** (MBPP pass@1 at 20%, NIRVANA against LLM-Pruner; {poster}) is not "
            f"answered yet: {' and '.join(missing)} still to run."
        )
    (a, sa), (b, sb) = (x[:2] for x in sides)  # (value, standard error[, problems])
    d, se = (paired["mean"], paired["stderr"]) if paired else (a - b, math.hypot(sa, sb))
    verdict = (
        f"resolved: {'NIRVANA' if d > 0 else 'LLM-Pruner'} higher" if abs(d) > 2 * se
        else "within two standard errors: not resolved"
    )  # fmt: skip
    error = (
        f"The error is paired by problem (the standard error of the {paired['n']} per-problem differences, pass = 1, "
        "fail = 0; `bench baselines` keeps each problem's outcome)."
        if paired
        else "The error treats the two as independent samples; they share the problems, so the error of the "
        "difference is smaller."
    )
    return (
        f"**The poster's question here**: MBPP pass@1 at 20%, NIRVANA {100 * a:.1f} against LLM-Pruner "
        f"{100 * b:.1f}, a difference of {100 * d:+.1f} ± {100 * se:.1f} points ({verdict}; {poster}). {error}"
        + (
            f" Dense: {100 * dense[0]:.1f}; NIRVANA keeps {a / dense[0]:.0%} of it, LLM-Pruner {b / dense[0]:.0%}."
            if dense[0]
            else ""
        )
    )


def _paired_mbpp(config) -> dict | None:
    """NIRVANA (gamma*) minus LLM-Pruner on MBPP at 20%, paired by problem, when both rows' outcomes are kept."""
    from nirvana.bench.baselines import Variant
    from nirvana.bench.per_problem import paired_between, read_per_problem

    a, b = (Variant(m, 0.2).name for m in POSTER_MBPP)
    return paired_between(read_per_problem(config.passes_path), a, b, "mbpp")


def _paired_with_nirvana(per: dict, wanted, task: str, scale: float, digits: int) -> list[str]:
    """At each sparsity of `wanted`, NIRVANA (gamma*) minus each other method there on `task`, paired by problem,
    from the per-problem values `per` (`read_per_problem`): "at 20%, LLM-Pruner +7.5 ± 2.3 (3.2 se, resolved),
    FLAP ..." for each sparsity where some method's row is there beside NIRVANA's."""
    from nirvana.bench.baselines import Variant
    from nirvana.bench.per_problem import paired_between
    from nirvana.measure.paired import paired_text
    from nirvana.methods import METHODS

    found = []
    for sparsity in dict.fromkeys(v.sparsity for v in wanted if v.method != "dense"):
        ours = Variant("nirvana", sparsity).name
        pairs = []
        for variant in wanted:
            if variant.method in ("dense", "nirvana") or variant.sparsity != sparsity:
                continue
            pair = paired_between(per, ours, variant.name, task)
            if pair:
                pairs.append(f"{METHODS[variant.method].label} {paired_text(pair, scale, digits)}")
        if pairs:
            found.append(f"at {sparsity:.0%}, " + ", ".join(pairs))
    return found


def _paired_bpb(config, wanted) -> str | None:
    """NIRVANA (gamma*) against each other method at the same sparsity on MBPP gold bits per byte, paired by
    problem: the likelihood of the reference solutions, which resolves where pass@1 near the floor does not."""
    from nirvana.bench.per_problem import read_per_problem

    found = _paired_with_nirvana(read_per_problem(config.per_problem_path), wanted, "mbpp_bpb", 1, 3)
    if not found:
        return None
    return (
        "**The reference solutions' likelihood** (MBPP gold bits per byte, NIRVANA minus each method at the same "
        "sparsity, paired by problem; negative: NIRVANA keeps the reference code more likely): "
        + "; ".join(found)
        + "."
    )


def _paired_passes(config, wanted) -> str | None:
    """NIRVANA (gamma*) against each other method at the same sparsity on MBPP and HumanEval pass@1, paired by
    problem; None until some method's code row is there beside NIRVANA's."""
    from nirvana.bench.per_problem import read_per_problem

    per, tasks = read_per_problem(config.passes_path), {"MBPP": "mbpp", "HumanEval": "humaneval"}
    found = {name: _paired_with_nirvana(per, wanted, task, 100, 1) for name, task in tasks.items()}
    parts = [f"{name} {'; '.join(pairs)}" for name, pairs in found.items() if pairs]
    if not parts:
        return None
    return (
        "**Every method on the code tasks** (pass@1, NIRVANA minus each method at the same sparsity in points, "
        "paired by problem; positive: NIRVANA solves more): " + "; ".join(parts) + "."
    )


def code_results(model: str) -> str:
    """The README's answer to the poster's code question at a code model's scale: dense and every method at
    FRONT_SPARSITIES (NIRVANA at gamma*, no LoRA) with MBPP and HumanEval pass@1, from the committed CSV of
    `bench baselines --model MODEL`; then NIRVANA against LLM-Pruner on MBPP at 20%, or why not yet."""
    from nirvana.bench.base import pending
    from nirvana.bench.baselines import BASELINES, Variant

    config, _, measured, wanted = _front_grid(model, grid_methods=True)
    lines = [
        f"| method | sparsity | WikiText-2 perplexity | 7-task average (%) | MBPP pass@1 (%), {config.mbpp_limit} "
        f"problems | HumanEval pass@1 (%), {config.humaneval_limit} problems | MBPP bits per byte, "
        f"{config.bpb_limit} problems (lower is better) |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for label, variant in wanted:
        v = measured.get(variant.name, {})
        ppl = v.get("ppl_wikitext2")
        mbpp, human = v.get("mbpp", (None, None, 0)), v.get("humaneval", (None, None, 0))
        bpb = v.get("bpb", {}).get("mbpp_bpb", (None, None))
        cells = [
            *_row_head(label, variant, v),
            NOT_MEASURED if ppl is None else f"{ppl:.2f}",
            _pm(v.get("average"), v.get("average_se"), 100, 1),
            _pass(mbpp),
            _pass(human),
            _pm(bpb[0], bpb[1], 1, 3),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    sides = [measured.get(Variant(m, 0.2).name, {}).get("mbpp", (None, None)) for m in POSTER_MBPP]
    answer = poster_answer(
        *sides, dense=measured.get("dense", {}).get("mbpp", (None, None)), paired=_paired_mbpp(config)
    )
    likelihood = _paired_bpb(config, [variant for _, variant in wanted])
    passes = _paired_passes(config, [variant for _, variant in wanted])
    left = len(pending(BASELINES, config))
    source = config.csv_path.relative_to(ROOT)
    lines += [
        "",
        answer,
        *(["", passes] if passes else []),
        *(["", likelihood] if likelihood else []),
        "",
        f"From `{source}` (`python -m nirvana bench baselines --model {model} --allow-code-execution "
        f"--code-first ...`): perplexity on the first {config.tokens:,} tokens of WikiText-2 test; the seven "
        f"zero-shot tasks, the first {config.limit} examples of each; MBPP 3-shot and HumanEval, greedy, each "
        "completion run in the sandbox; ± one standard error; NIRVANA at its analytic gamma*, no LoRA, every method "
        f"on the same calibration batch. {_left(left)}",
    ]
    return "\n".join(lines) + "\n"


def _left(rows: int) -> str:
    """'3 rows of the grid are still to run: ...', '1 row ... is', or that every row has run."""
    if not rows:
        return "Every row of the grid has run."
    many = f"{rows} rows of the grid are" if rows > 1 else "1 row of the grid is"
    return f"{many} still to run: the grid resumes across sessions."


def _recipe_label(v: dict) -> str:
    """ "NIRVANA γ* + recon" from the variant "nirvana s=0.2 gamma* + recon"."""
    from nirvana.methods import METHODS

    rest = v["variant"].split(" ", 2)[2] if v["variant"].count(" ") >= 2 else ""
    rest = rest.replace("gamma*", "γ*").replace("gamma=", "γ=")
    return f"{METHODS[v['method']].label} {rest}".strip()


def _order(entries: list[dict], key: str, lower_better: bool) -> str:
    """The methods of `entries`, best first on `key`: "A < B < C" (lower is better) or "A > B > C"."""
    from nirvana.methods import METHODS

    ranked = sorted(entries, key=lambda v: v[key] if lower_better else -v[key])
    return (" < " if lower_better else " > ").join(METHODS[v["method"]].label for v in ranked)


def recipes(model: str) -> str:
    """docs/BASELINES.md's answer to "does reconstruction change the ranking, and which recipe is best?": at each
    sparsity of the grid, every recipe without LoRA (each method plain and with `--reconstruct`, Tyr, NIRVANA at
    its KL-best gamma) by perplexity, seven-task average and MBPP bits per byte; the methods' order plain and
    reconstructed; the best recipe on each measure, and whether its lead over the next is more than twice the
    standard error of the difference. A recipe whose rows are still to run says so."""
    import math

    from nirvana.bench.base import pending
    from nirvana.bench.baselines import BASELINES, BaselinesConfig, recorded_config
    from nirvana.bench.baselines_report import variants
    from nirvana.bench.rows import read_rows

    config = recorded_config(BaselinesConfig(model=model).csv_path, model)
    measured = [
        v for v in variants(read_rows(config.csv_path))
        if v["method"] != "dense" and "+ LoRA" not in v["variant"] and v.get("matched") is not False
    ]  # fmt: skip
    for v in measured:
        bpb = v.get("bpb", {}).get("mbpp_bpb")
        v["bpb_value"], v["bpb_se"] = (bpb[0], bpb[1]) if bpb and bpb[0] is not None else (None, None)
    to_run = [job.variant for job in pending(BASELINES, config) if not job.variant.lora]
    bpb = config.bpb_limit > 0  # a grid without gold bits per byte (Gemma-3's) gets no column for them
    lines = []
    for sparsity in config.sparsities:
        here = [v for v in measured if abs(float(v["sparsity"]) - sparsity) < 1e-9 and v.get("ppl_wikitext2")]
        here.sort(key=lambda v: v["ppl_wikitext2"])
        waiting = sorted({_recipe_label({"variant": x.name, "method": x.method}) for x in to_run
                          if abs(x.sparsity - sparsity) < 1e-9})  # fmt: skip
        lines += [
            f"**{sparsity:.0%}** (best first by perplexity"
            + (
                f"; rows still to run for {', '.join(waiting)}, so the answers below are of the recipes measured)"
                if waiting
                else ")"
            )
            + ":",
            "",
            "| recipe | WikiText-2 perplexity | 7-task average (%) |" + (" MBPP bits/byte |" if bpb else ""),
            "|---|---:|---:|" + ("---:|" if bpb else ""),
        ]
        for v in here:
            cells = [
                _recipe_label(v),
                f"{v['ppl_wikitext2']:.2f}",
                _pm(v.get("average"), v.get("average_se"), 100, 1),
            ] + ([_pm(v["bpb_value"], v["bpb_se"], 1, 3)] if bpb else [])
            lines.append("| " + " | ".join(cells) + " |")
        plain = {v["method"]: v for v in here if " + recon" not in v["variant"] and "KL-best" not in v["variant"]}
        recon = {v["method"]: v for v in here if v["variant"].endswith(" + recon")}
        both = sorted(set(plain) & set(recon))
        lines.append("")
        orders = [("ppl_wikitext2", "perplexity", True), ("average", "7-task average", False)]
        for key, what, lower in orders + ([("bpb_value", "MBPP bits/byte", True)] if bpb else []):
            if both and all(plain[m].get(key) is not None and recon[m].get(key) is not None for m in both):
                before = _order([plain[m] for m in both], key, lower)
                after = _order([recon[m] for m in both], key, lower)
                same = "the same order" if before == after else "the order changes"
                lines.append(f"- Order by {what}: plain {before}; reconstructed {after} ({same}).")
            else:
                lines.append(f"- Order by {what}: not all reconstructed rows are measured yet.")
        for key, se_key, what, lower, scale, digits in [
            ("ppl_wikitext2", None, "perplexity", True, 1, 2),
            ("average", "average_se", "7-task average", False, 100, 1),
        ] + ([("bpb_value", "bpb_se", "MBPP bits/byte", True, 1, 3)] if bpb else []):
            ranked = sorted((v for v in here if v.get(key) is not None), key=lambda v: v[key] if lower else -v[key])
            if len(ranked) < 2:
                continue
            first, second = ranked[:2]
            text = (
                f"- Best on {what}: {_recipe_label(first)} ({first[key] * scale:.{digits}f}; next "
                f"{_recipe_label(second)} {second[key] * scale:.{digits}f})"
            )
            if se_key and first.get(se_key) is not None and second.get(se_key) is not None:
                gap, se = abs(first[key] - second[key]), math.hypot(first[se_key], second[se_key])
                text += ": a lead of more than two standard errors" if gap > 2 * se else ": within two standard errors"
            missing = [_recipe_label(v) for v in here if v.get(key) is None]
            lines.append(text + (f"; not measured yet: {', '.join(missing)}." if missing else "."))
        lines.append("")
    source = config.csv_path.relative_to(ROOT)
    lines.append(
        f"From `{source}` (`python -m nirvana bench baselines --model {model} --reconstruct-sparsities ...`): the "
        f"grid's protocol ({config.tokens:,} WikiText-2 tokens, {config.limit} examples per task ± one standard "
        f"error, {f'MBPP gold bits per byte on {config.bpb_limit} problems' if bpb else 'no MBPP bits per byte'}); "
        '"+ recon" is `--reconstruct`, Tyr '
        "always reconstructs. The 7-task standard errors treat the recipes as independent samples (they share the "
        "examples, so the true error of a difference is smaller)."
    )
    return "\n".join(lines) + "\n"


def serve() -> str:
    """docs/EXPORT.md's table of `bench serve`: pruned models through vLLM against transformers and dense."""
    from nirvana.bench.serve import ServeConfig, read_rows, table

    config = ServeConfig()
    text = table(read_rows(config.out), config)
    return text[text.index("| model |") :]  # the table and its note, without the page's title and preamble


class Block(NamedTuple):
    file: Path  # where the block lives: README.md or a docs page
    make: Callable[[], str]  # its text now, from the committed benchmark files


BLOCKS = {
    "results-smollm2-135m": Block(README, lambda: front_results("smollm2-135m")),
    "code-qwen2.5-coder-0.5b": Block(README, lambda: code_results("qwen2.5-coder-0.5b")),
    "code-qwen2.5-coder-1.5b": Block(README, lambda: code_results("qwen2.5-coder-1.5b")),
    "calibrated-on-code-qwen2.5-coder-0.5b": Block(README, lambda: calibrated_on("qwen2.5-coder-0.5b", "python-code")),
    "distill-smollm2-135m": Block(DOCS / "RECOVERY.md", lambda: distill("smollm2-135m")),
    "baselines-smollm2-135m": Block(DOCS / "RESULTS-BASELINES.md", lambda: baselines("smollm2-135m")),
    "baselines-gemma3-270m": Block(DOCS / "RESULTS-BASELINES.md", lambda: baselines("gemma3-270m")),
    "recipes-smollm2-135m": Block(DOCS / "BASELINES.md", lambda: recipes("smollm2-135m")),
    "recipes-gemma3-270m": Block(DOCS / "BASELINES.md", lambda: recipes("gemma3-270m")),
    "serve-smollm2-135m": Block(DOCS / "EXPORT.md", serve),
}
MARKER = re.compile(r"<!-- generated: (\S+) -->")


def pattern(name: str) -> re.Pattern:
    return re.compile(rf"(<!-- generated: {re.escape(name)} -->\n)(.*?)(<!-- end: {re.escape(name)} -->)", re.S)


def current(text: str, name: str) -> str | None:
    m = pattern(name).search(text)
    return None if m is None else m.group(2)


def rewrite(text: str, names) -> str:
    """`text` with the blocks `names` replaced by what their benchmarks say now."""
    for name in names:
        block = BLOCKS[name].make()
        text = pattern(name).sub(lambda m, b=block: m.group(1) + b + m.group(3), text)
    return text


def write() -> list[Path]:
    """Rewrite every block in place, file by file; the files changed."""
    changed = []
    for file in dict.fromkeys(b.file for b in BLOCKS.values()):
        text = file.read_text()
        new = rewrite(text, [name for name, b in BLOCKS.items() if b.file == file])
        if new != text:
            file.write_text(new)
            changed.append(file)
    return changed


if __name__ == "__main__":
    if "--write" in sys.argv:
        for path in write():
            print(f"rewrote {path.relative_to(ROOT)}")
    else:
        for name, b in BLOCKS.items():
            print(f"{b.file.relative_to(ROOT)}:\n<!-- generated: {name} -->\n{b.make()}<!-- end: {name} -->")
