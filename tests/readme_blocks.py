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
    if value is None:
        return NOT_MEASURED
    return f"{value * scale:.{digits}f}" + ("" if se is None else f" ± {se * scale:.{digits}f}")


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


def front_results(model: str) -> str:
    """The front page's one results table: dense and every method at FRONT_SPARSITIES (NIRVANA at its analytic
    gamma*, no LoRA), from the committed CSV of `bench baselines --model MODEL`; what the CSV lacks says so."""
    from nirvana.bench.baselines import BaselinesConfig, Variant, recorded_config
    from nirvana.bench.baselines_report import speed_flag, variants
    from nirvana.bench.rows import read_rows
    from nirvana.measure.speed_check import TOLERANCE
    from nirvana.methods import METHODS

    config = recorded_config(BaselinesConfig(model=model).csv_path, model)
    rows = read_rows(config.csv_path)
    measured = {v["variant"]: v for v in variants(rows)}
    dense = measured.get("dense")
    wanted = [("dense", Variant("dense"))]
    wanted += [(METHODS[m].label, Variant(m, s)) for s in FRONT_SPARSITIES for m in METHODS]
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
        name = label + (" (not matched: another budget)" if v.get("matched") is False else "")
        sparsity = "0%" if variant.method == "dense" else f"{variant.sparsity:.0%}"
        if variant.method != "dense" and dense is not None and variant.name in measured:
            flags.append(speed_flag(v, dense))
        cells = [
            name,
            sparsity,
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


class Block(NamedTuple):
    file: Path  # where the block lives: README.md or a docs page
    make: Callable[[], str]  # its text now, from the committed benchmark files


BLOCKS = {
    "results-smollm2-135m": Block(README, lambda: front_results("smollm2-135m")),
    "distill-smollm2-135m": Block(DOCS / "RECOVERY.md", lambda: distill("smollm2-135m")),
    "baselines-smollm2-135m": Block(DOCS / "RESULTS-BASELINES.md", lambda: baselines("smollm2-135m")),
    "baselines-gemma3-270m": Block(DOCS / "RESULTS-BASELINES.md", lambda: baselines("gemma3-270m")),
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
