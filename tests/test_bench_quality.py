"""Quality benchmark: the grid, resumability, the ablation arithmetic, and the written report."""

from __future__ import annotations

import csv

import pytest

import nirvana.bench.quality as q
import nirvana.bench.quality_report as qr
from nirvana.bench.base import run
from nirvana.bench.quality_config import GRID_CRITERIA
from nirvana.data.text import load_text
from nirvana.measure.perplexity import make_windows
from nirvana.search.calibration import AnchorSpec


def _config(model_dir, tmp_path, **kw):
    base = dict(
        model=str(model_dir),
        criteria=("nirvana", "magnitude"),
        sparsities=(0.5,),
        uniform_criteria=("nirvana",),
        select_criteria=("nirvana",),
        candidates=2,
        tokens=128,
        window=32,
        samples=2,
        seq_len=32,
        anchor=AnchorSpec(samples=4, seq_len=16),
        out_dir=tmp_path / "out",
    )
    return q.QualityConfig(**{**base, **kw})


def test_plan_jobs_reuses_candidate_zero_as_the_plain_row():
    jobs = q.plan_jobs(q.QualityConfig())
    assert jobs[0].criterion == "dense"
    # 5 criteria x 4 sparsities global, 5 x 4 uniform, 3 data-driven x (K - 1) x 4 extra candidates
    assert len(jobs) == 1 + 20 + 20 + 3 * 3 * 4
    assert len(set(jobs)) == len(jobs)
    assert {j.calib_seed for j in jobs if j.criterion in ("magnitude", "random")} == {None}
    for c in ("nirvana", "taylor", "wanda"):
        assert {j.calib_seed for j in jobs if j.criterion == c and j.allocation == "global"} == {0, 1, 2, 3}
    assert {(j.criterion, j.allocation) for j in jobs if j.criterion != "dense"} == {
        (c, a) for c in GRID_CRITERIA for a in ("global", "uniform")
    }


def test_run_is_resumable_and_report_is_written(tiny_with_tokenizer_dir, tmp_path, monkeypatch):
    config = _config(tiny_with_tokenizer_dir, tmp_path)
    rows = run(q.QUALITY, config, log=lambda m: None)
    assert len(rows) == len(q.plan_jobs(config)) == 1 + 2 + 1 + 1
    dense = next(r for r in rows if r["criterion"] == "dense")
    assert float(dense["kl"]) == 0.0 and int(dense["tokens_wikitext2"]) == 128
    for r in rows:
        assert float(r["ppl_wikitext2"]) > 1 and float(r["ppl_ptb"]) > 1 and float(r["kl"]) >= 0
    pruned = [r for r in rows if r["criterion"] != "dense"]
    assert all(float(r["kl"]) > 0 for r in pruned)
    # a second run finds every row in the CSV and computes nothing
    monkeypatch.setattr(q, "QualityWorker", lambda *a: pytest.fail("nothing should be recomputed"))
    assert len(run(q.QUALITY, config, log=lambda m: None)) == len(rows)
    with open(config.csv_path) as f:
        assert len(list(csv.DictReader(f))) == len(rows)
    md, text = qr.write_report(rows, config)
    assert md.exists() and (md.parent / "quality_ppl.png").stat().st_size > 1000
    assert (md.parent / "quality_ablations.png").exists()
    assert "Winner per sparsity" in text and "Ablation 3" in text


def _row(criterion, allocation, seed, s, ppl, kl, ptb=None):
    return {
        "criterion": criterion,
        "allocation": allocation,
        "calib_seed": seed,
        "sparsity": str(s),
        "ppl_wikitext2": str(ppl),
        "ppl_ptb": str(ptb or ppl),
        "kl": str(kl),
        "achieved_block_sparsity": str(s),
        "total_param_reduction": str(0.8 * s),
        "gamma": "2.25",
        "seconds": "1.0",
        "finished_utc": "2026-12-01 00:00:00",
        "machine": "test",
    }


def test_summary_winners_and_ablation_arithmetic():
    config = q.QualityConfig(criteria=("nirvana", "magnitude", "random"), candidates=3)
    rows = [
        _row("nirvana", "global", "0", 0.2, 20.0, 0.30),
        _row("nirvana", "global", "1", 0.2, 30.0, 0.10),  # lowest KL: the KL-selected candidate
        _row("nirvana", "global", "2", 0.2, 25.0, 0.20),
        _row("magnitude", "global", "", 0.2, 16.0, 0.25),
        _row("random", "global", "", 0.2, 40.0, 0.90),
        _row("nirvana", "uniform", "0", 0.2, 22.0, 0.35),
    ]
    summary = qr.summarize(rows, config)
    (w,) = summary["winners"]
    assert w["winner"] == "magnitude" and w["runner_up"] == "nirvana"  # seed-0 nirvana (20), not the others
    assert w["margin_pct"] == pytest.approx(25.0) and w["nirvana_rank"] == 2
    (sel,) = summary["ablations"]["kl_selected_vs_random"]
    assert sel["chosen_seed"] == 1 and sel["k"] == 3
    assert sel["median_ppl_wikitext2"] == 25.0 and sel["median_kl"] == 0.20 and sel["best_ppl_wikitext2"] == 20.0
    (gu,) = summary["ablations"]["global_vs_uniform"]
    assert float(gu["uniform"]["ppl_wikitext2"]) == 22.0
    v = qr.verdicts(summary)
    assert v["nirvana_beats_magnitude"]["ppl_wikitext2"] == (0, 1)  # 20 vs 16
    assert v["global_beats_uniform"]["ppl_wikitext2"] == (1, 1)  # 20 vs 22
    assert v["selected_beats_median"]["ppl_wikitext2"] == (0, 1)  # the lowest-KL batch has PPL 30 > median 25
    text = qr.markdown_report(rows, config, summary)
    assert "| 0.2 | nirvana | 3 | 1 | 30.00 |" in text  # ablation 3 names the criterion
    assert "NIRVANA score beats magnitude: WikiText-2 in 0 of 1 sparsities" in text


def test_text_prefix_gives_the_same_windows_as_the_whole_text(smollm2):
    text = load_text("ptb")
    prefix = q.text_prefix(text, smollm2.tokenizer, 1024)
    assert len(prefix.documents) < len(text.documents)
    full, _ = make_windows(smollm2.tokenizer, text.joined("\n\n"), 512, 1024)
    part, _ = make_windows(smollm2.tokenizer, prefix.joined("\n\n"), 512, 1024)
    assert full.shape == (2, 512) and bool((full == part).all())


def test_a_fixed_gamma_writes_its_own_csv():
    assert q.QualityConfig().csv_path.name == "quality-smollm2-135m.csv"  # gamma* (analytic)
    assert q.QualityConfig(gamma=6.0).csv_path.name == "quality-smollm2-135m-gamma6.csv"
    assert q.QualityConfig(gamma=2.5).csv_path != q.QualityConfig(gamma=3.0).csv_path
    assert (q.QualityConfig().plot_prefix, q.QualityConfig(gamma=4.0).plot_prefix) == ("quality", "quality-gamma4")


def test_committed_reports_list_the_analytic_gamma_runs_first(tmp_path):
    for name in ("quality-b-gamma4.csv", "quality-b.csv", "quality-a-gamma6.csv", "quality-a.csv", "other.csv"):
        (tmp_path / name).write_text("model\n")
    names = [p.name for p in qr.committed_reports(tmp_path)]
    assert names == ["quality-a.csv", "quality-b.csv", "quality-a-gamma6.csv", "quality-b-gamma4.csv"]
