"""Blocks of the README generated from committed benchmark output, so no figure in them is typed by hand.

    .venv/bin/python tests/readme_blocks.py          # print each block
    .venv/bin/python tests/readme_blocks.py --write  # rewrite them in README.md in place

A block sits between `<!-- generated: NAME -->` and `<!-- end: NAME -->`; tests/test_readme_blocks.py
fails when one differs from what its benchmark's files say now.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"


def baselines(model: str) -> str:
    """The README summary of `bench baselines --model MODEL`, against the grid its runs planned."""
    from nirvana.bench.base import pending
    from nirvana.bench.baselines import BASELINES, BaselinesConfig, recorded_config
    from nirvana.bench.baselines_report import readme_summary
    from nirvana.bench.rows import read_rows

    config = recorded_config(BaselinesConfig(model=model).csv_path, model)
    return readme_summary(read_rows(config.csv_path), config, len(pending(BASELINES, config)))


def distill(model: str) -> str:
    """The README summary of `bench distill --model MODEL`, against its whole grid."""
    from nirvana.bench.base import pending
    from nirvana.bench.distill import DISTILL, DistillConfig
    from nirvana.bench.distill_report import readme_summary
    from nirvana.bench.rows import read_rows

    config = DistillConfig(model=model)
    rows = read_rows(config.csv_path) if config.csv_path.exists() else []
    return readme_summary(rows, config, len(pending(DISTILL, config)))


BLOCKS = {
    "distill-smollm2-135m": lambda: distill("smollm2-135m"),
    "baselines-smollm2-135m": lambda: baselines("smollm2-135m"),
    "baselines-gemma3-270m": lambda: baselines("gemma3-270m"),
}


def pattern(name: str) -> re.Pattern:
    return re.compile(rf"(<!-- generated: {re.escape(name)} -->\n)(.*?)(<!-- end: {re.escape(name)} -->)", re.S)


def current(text: str, name: str) -> str | None:
    m = pattern(name).search(text)
    return None if m is None else m.group(2)


def rewrite(text: str) -> str:
    for name, make in BLOCKS.items():
        block = make()
        text = pattern(name).sub(lambda m, b=block: m.group(1) + b + m.group(3), text)
    return text


if __name__ == "__main__":
    if "--write" in sys.argv:
        README.write_text(rewrite(README.read_text()))
    else:
        for name, make in BLOCKS.items():
            print(f"<!-- generated: {name} -->\n{make()}<!-- end: {name} -->")
