"""`bench recovery` on a tiny model: rows with before/after perplexity, curves, plot, resumable."""

from __future__ import annotations

from nirvana.bench.recovery import RecoveryBenchConfig, read_rows, run_recovery_bench, write_report


def test_rows_curves_report_and_resume(tiny_with_tokenizer_dir, tmp_path):
    corpus = tmp_path / "train.txt"
    corpus.write_text("\n".join(f"Line {i}: pruning and recovering small language models." for i in range(80)))
    config = RecoveryBenchConfig(
        model=str(tiny_with_tokenizer_dir),
        jobs=(("magnitude", "global", 0.5), ("random", "uniform", 0.2)),
        steps=2,
        data=str(corpus),
        tokens=64,
        window=16,
        samples=2,
        seq_len=16,
        threads=1,
        out_dir=tmp_path / "bench",
        recovery=dict(batch_size=2, micro_batch_size=1, seq_len=16, r=4, eval_every=1, eval_sequences=2),
    )
    logs = []
    rows = run_recovery_bench(config, logs.append)
    assert [(r["criterion"], r["allocation"], r["sparsity"]) for r in rows] == [
        ("magnitude", "global", "0.5"),
        ("random", "uniform", "0.2"),
    ]
    for r in rows:
        assert float(r["ppl_wikitext2_before"]) > 1 and float(r["ppl_ptb_after"]) > 1
        assert int(r["tokens_trained"]) == 2 * 2 * 16 and r["acc7_before"] == "" and r["data"] == str(corpus)
    assert sorted(p.name for p in (tmp_path / "bench" / "curves").iterdir()) == [
        "magnitude-global-0.5-s2.json",
        "random-uniform-0.2-s2.json",
    ]
    md = write_report(rows, config)
    assert "| magnitude | global | 0.5 |" in md.read_text() and (tmp_path / "bench" / "recovery.png").exists()
    logs.clear()
    assert len(run_recovery_bench(config, logs.append)) == 2  # resumed: nothing re-run
    assert "0 to run" in logs[0] and len(read_rows(config.csv_path)) == 2


def test_bench_recovery_refuses_a_non_positive_budget(capsys, tmp_path):
    from nirvana.cli import main

    assert main(["bench", "recovery", "--steps", "0", "--out-dir", str(tmp_path)]) == 2
    assert "--steps must be a positive integer" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())
