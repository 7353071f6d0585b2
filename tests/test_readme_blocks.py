"""The generated blocks of the README and the docs pages say what the committed benchmark files say
(tests/readme_blocks.py), each in the file it belongs to."""

from __future__ import annotations

import pytest

from tests.readme_blocks import BLOCKS, DOCS, MARKER, README, ROOT, _left, current, poster_answer


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


def test_the_posters_code_question_is_answered_only_from_both_rows_and_with_its_error():
    missing = (None, None)
    assert "not answered yet: NIRVANA's row and LLM-Pruner's row still to run" in poster_answer(missing, missing)
    assert "not answered yet: LLM-Pruner's row still to run" in poster_answer((0.3, 0.03), (None, None))
    # sqrt(0.03^2 + 0.04^2) = 5.0 points of error: 8 points are within two, 12 and 20 are not
    assert "+8.0 ± 5.0 points (within two standard errors: not resolved" in poster_answer((0.3, 0.03), (0.22, 0.04))
    assert "-12.0 ± 5.0 points (resolved: LLM-Pruner higher" in poster_answer((0.2, 0.03), (0.32, 0.04))
    assert "+20.0 ± 5.0 points (resolved: NIRVANA higher" in poster_answer((0.4, 0.03), (0.2, 0.04))
    with_dense = poster_answer((0.4, 0.03), (0.2, 0.04), dense=(0.5, 0.03))
    assert with_dense.endswith("Dense: 50.0; NIRVANA keeps 80% of it, LLM-Pruner 40%.")


def test_the_posters_code_question_uses_the_paired_error_when_outcomes_are_kept():
    paired = {"mean": 0.08, "stderr": 0.03, "n": 200}  # the same +8 points, now with a paired error of 3
    text = poster_answer((0.3, 0.03), (0.22, 0.04), paired=paired)
    assert "+8.0 ± 3.0 points (resolved: NIRVANA higher" in text
    assert "paired by problem (the standard error of the 200 per-problem differences" in text
    assert "independent samples" not in text


def test_the_code_block_pairs_nirvanas_bits_per_byte_with_each_method_at_the_same_sparsity(tmp_path):
    import json
    from types import SimpleNamespace

    from nirvana.bench.baselines import Variant
    from tests.readme_blocks import _paired_bpb

    def entry(values):
        return {"mbpp_bpb": {"limit": len(values), "values": values}}

    per = {
        Variant("nirvana", 0.2).name: entry([1.0, 2.0, 3.0, 4.0]),
        Variant("flap", 0.2).name: entry([1.5, 2.5, 3.0, 4.5]),  # d = -0.5, -0.5, 0, -0.5: sd 0.25 over 4
        Variant("flap", 0.5).name: entry([9.0, 9.0, 9.0, 9.0]),  # paired with NIRVANA at 50% only
        "dense": entry([0.5, 0.5, 0.5, 0.5]),
    }
    path = tmp_path / "bpb.json"
    path.write_text(json.dumps(per))
    config = SimpleNamespace(per_problem_path=path)
    wanted = [Variant("dense"), Variant("nirvana", 0.2), Variant("flap", 0.2), Variant("llm-pruner", 0.2)]
    text = _paired_bpb(config, [*wanted, Variant("flap", 0.5)])
    assert text.endswith("): at 20%, FLAP -0.375 ± 0.125 (3.0 se, resolved).")  # LLM-Pruner has no row: left out
    per[Variant("nirvana", 0.5).name] = entry([8.0, 8.0, 8.0, 7.0])  # d = -1, -1, -1, -2
    path.write_text(json.dumps(per))
    text = _paired_bpb(config, [*wanted, Variant("nirvana", 0.5), Variant("flap", 0.5)])
    assert text.endswith("at 20%, FLAP -0.375 ± 0.125 (3.0 se, resolved); at 50%, FLAP -1.250 ± 0.250 (5.0 se, "
                         "resolved).")  # fmt: skip
    assert _paired_bpb(SimpleNamespace(per_problem_path=tmp_path / "none.json"), wanted) is None


def test_the_code_block_pairs_nirvanas_passes_with_each_method_on_both_code_tasks(tmp_path):
    import json
    from types import SimpleNamespace

    from nirvana.bench.baselines import Variant
    from tests.readme_blocks import _paired_passes

    def entry(task, values):
        return {task: {"limit": len(values), "values": values}}

    ours = Variant("nirvana", 0.2).name
    per = {
        ours: {**entry("mbpp", [1, 1, 0, 1]), **entry("humaneval", [1, 0, 0, 0])},
        Variant("flap", 0.2).name: entry("mbpp", [0, 1, 0, 0]),  # d = 1, 0, 0, 1: +50 ± 28.9 points
        Variant("llm-pruner", 0.2).name: {**entry("mbpp", [1, 1, 0, 1]), **entry("humaneval", [0, 0, 0, 0])},
    }
    path = tmp_path / "pass.json"
    path.write_text(json.dumps(per))
    wanted = [Variant("dense"), Variant("nirvana", 0.2), Variant("llm-pruner", 0.2), Variant("flap", 0.2)]
    text = _paired_passes(SimpleNamespace(passes_path=path), wanted)
    assert "MBPP at 20%, LLM-Pruner +0.0 ± 0.0 (0.0 se), FLAP +50.0 ± 28.9 (1.7 se); HumanEval at 20%, LLM-Pr" in text
    assert "FLAP" not in text.split("HumanEval")[1]  # FLAP has no HumanEval row
    assert _paired_passes(SimpleNamespace(passes_path=tmp_path / "none.json"), wanted) is None


def test_rows_left_read_as_english():
    assert _left(0) == "Every row of the grid has run."
    assert _left(1).startswith("1 row of the grid is still to run")
    assert _left(150).startswith("150 rows of the grid are still to run")
