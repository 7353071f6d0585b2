"""`bench recovery` on a tiny model: rows with before/after perplexity, curves, plot, resumable."""

from __future__ import annotations

import csv
import json
from dataclasses import replace

from nirvana.bench.base import run
from nirvana.bench.recovery import COLUMNS, RECOVERY, RecoveryBenchConfig, write_report
from nirvana.bench.rows import read_rows


def tiny_config(model_dir, corpus, tmp_path, steps: int) -> RecoveryBenchConfig:
    """Two rows on the tiny model, trained on a small text file (conftest's corpus), without accuracy."""
    return RecoveryBenchConfig(
        model=str(model_dir),
        jobs=(("magnitude", "global", 0.5), ("random", "uniform", 0.2)),
        steps=steps,
        data=str(corpus),
        tokens=64,
        window=16,
        samples=2,
        seq_len=16,
        threads=1,
        acc_limit=0,
        bpb_limit=0,
        out_dir=tmp_path / "bench",
        recovery=dict(batch_size=2, micro_batch_size=1, seq_len=16, r=4, eval_every=1, eval_sequences=2),
    )


def test_rows_curves_report_and_resume(tiny_with_tokenizer_dir, corpus, tmp_path):
    config = tiny_config(tiny_with_tokenizer_dir, corpus, tmp_path, steps=2)
    logs = []
    rows = run(RECOVERY, config, logs.append)
    assert [(r["criterion"], r["allocation"], r["sparsity"]) for r in rows] == [
        ("magnitude", "global", "0.5"),
        ("random", "uniform", "0.2"),
    ]
    for r in rows:
        assert float(r["ppl_wikitext2_before"]) > 1 and float(r["ppl_ptb_after"]) > 1
        assert int(r["tokens_trained"]) == 2 * 2 * 16 and r["acc7_before"] == ""
        assert r["data"] == config.data
    assert sorted(p.name for p in (tmp_path / "bench" / "curves").iterdir()) == [
        "magnitude-global-0.5-s2.json",
        "random-uniform-0.2-s2.json",
    ]
    md = write_report(rows, config)
    assert "| magnitude | global | 0.5 |" in md.read_text() and (tmp_path / "bench" / "recovery.png").exists()
    logs.clear()
    assert len(run(RECOVERY, config, logs.append)) == 2  # resumed: nothing re-run
    assert "0 to run" in logs[0] and len(read_rows(config.csv_path)) == 2


def test_a_row_without_acc7_is_remeasured_in_place_when_accuracy_is_asked_for(
    tiny_with_tokenizer_dir, corpus, tmp_path
):
    config = tiny_config(tiny_with_tokenizer_dir, corpus, tmp_path, steps=1)
    first = run(RECOVERY, config, lambda m: None)
    # The CSV as an older version wrote it: without the stderr, acc_limit and gold-BPB columns.
    new = {"acc_limit", "bpb_limit", "mbpp_bpb_before", "mbpp_bpb_after"}
    old = [c for c in COLUMNS if not c.endswith("_stderr") and c not in new]
    with open(config.csv_path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=old, extrasaction="ignore")
        w.writeheader()
        w.writerows(first)

    with_acc = replace(config, jobs=config.jobs[:1], acc_limit=2, bpb_limit=2)
    logs = []
    rows = run(RECOVERY, with_acc, logs.append)
    assert "1 to run" in logs[0]
    with open(config.csv_path, newline="") as f:
        assert next(csv.reader(f)) == list(COLUMNS)
    untouched = {**first[1], **{c: "" for c in COLUMNS if c.endswith("_stderr") or c in new}}
    assert len(rows) == 2 and rows[1] == untouched
    redone = rows[0]
    assert redone["acc_limit"] == "2" and 0 <= float(redone["acc7_before"]) <= 100
    assert float(redone["acc7_after_stderr"]) > 0
    assert redone["bpb_limit"] == "2" and float(redone["mbpp_bpb_before"]) > 0 and float(redone["mbpp_bpb_after"]) > 0
    curve = json.loads((tmp_path / "bench" / "curves" / "magnitude-global-0.5-s1.json").read_text())
    assert [len(v) for v in curve["mbpp_bpb_per_problem"].values()] == [2, 2]  # before, after: one per problem
    # Seeded: the re-measured row reproduces its perplexities.
    for column in ("ppl_wikitext2_before", "ppl_wikitext2_after", "ppl_ptb_before", "tokens_trained"):
        assert float(redone[column]) == float(first[0][column]), column
    report = write_report(rows, with_acc).read_text()
    assert " +- " in report and "- magnitude global 0.5: after − before " in report
    logs.clear()
    run(RECOVERY, with_acc, logs.append)
    assert "0 to run" in logs[0]


def test_bench_recovery_refuses_a_non_positive_budget(capsys, tmp_path):
    from nirvana.cli import main

    assert main(["bench", "recovery", "--steps", "0", "--out-dir", str(tmp_path)]) == 2
    assert "--steps must be a positive integer" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())
    assert main(["bench", "recovery", "--acc-limit", "-1", "--out-dir", str(tmp_path)]) == 2
    assert "--acc-limit must be 0" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


def test_a_slicegpt_row_rotates_on_the_bench_batch_then_recovers(tiny_with_tokenizer_dir, corpus, tmp_path):
    config = tiny_config(tiny_with_tokenizer_dir, corpus, tmp_path, steps=1)
    config = replace(config, method="slicegpt", jobs=(("-", "-", 0.3),))  # a baseline: the sparsities only
    (row,) = run(RECOVERY, config, lambda m: None)
    assert (row["criterion"], row["allocation"], row["method"]) == ("slicegpt", "method", "slicegpt")
    assert abs(float(row["achieved_block_sparsity"]) - 0.3) < 0.1
    assert float(row["ppl_wikitext2_before"]) > 1 and float(row["ppl_wikitext2_after"]) > 1
