"""The README's generated blocks say what the committed benchmark files say (tests/readme_blocks.py)."""

from __future__ import annotations

import pytest

from tests.readme_blocks import BLOCKS, README, current


@pytest.mark.parametrize("name", list(BLOCKS))
def test_readme_block_is_current(name):
    text = README.read_text()
    block = current(text, name)
    assert block is not None, f"README.md has no `<!-- generated: {name} -->` block"
    assert block == BLOCKS[name](), "stale: run `.venv/bin/python tests/readme_blocks.py --write`"
