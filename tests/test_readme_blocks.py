"""The generated blocks of the README and the docs pages say what the committed benchmark files say
(tests/readme_blocks.py), each in the file it belongs to."""

from __future__ import annotations

import pytest

from tests.readme_blocks import BLOCKS, DOCS, MARKER, README, ROOT, current


@pytest.mark.parametrize("name", list(BLOCKS))
def test_generated_block_is_current(name):
    file, make = BLOCKS[name]
    block = current(file.read_text(), name)
    assert block is not None, f"{file.relative_to(ROOT)} has no `<!-- generated: {name} -->` block"
    assert block == make(), "stale: run `.venv/bin/python tests/readme_blocks.py --write`"


def test_every_generated_block_in_the_readme_and_docs_is_known():
    """A block moved to another page, or one no generator writes, is caught: the table says where each lives."""
    for file in [README, *sorted(DOCS.glob("*.md"))]:
        for name in MARKER.findall(file.read_text()):
            assert name in BLOCKS, f"{file.relative_to(ROOT)}: no generator for the block {name!r}"
            where = BLOCKS[name].file.relative_to(ROOT)
            assert BLOCKS[name].file == file, f"{name!r} is in {file.relative_to(ROOT)}; BLOCKS says {where}"
