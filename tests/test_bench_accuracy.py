"""The accuracy benchmark's grid, resume and report (no model: rows are written by hand)."""

from __future__ import annotations

import pytest

from nirvana.accuracy.tasks import PAPER_METRIC, ZEROSHOT7
from nirvana.bench.accuracy import ACCURACY, COLUMNS, KEY, AccuracyConfig, kl_best_gammas, plan_jobs
from nirvana.bench.accuracy_report import summarize, write_report
from nirvana.bench.base import pending
from nirvana.bench.rows import store_row


def test_kl_best_gammas_come_from_the_committed_gamma_benchmark():
    best = kl_best_gammas("smollm2-135m")
    assert best[0.2] == 8.0 and best[0.5] == 4.0  # benchmarks/gamma/gamma-smollm2-135m.md
    assert kl_best_gammas("no-such-model") == {}


def test_grid_order_dense_first_tasks_across_models_code_only_when_allowed(tmp_path):
    config = AccuracyConfig(out_dir=tmp_path, best_gamma={0.2: 8.0, 0.5: 4.0})
    jobs = plan_jobs(config)
    head = [(j.variant.name, j.task) for j in jobs[:21]]
    assert head[:7] == [("dense", t) for t in ZEROSHOT7]  # dense, nirvana, taylor: all seven tasks first
    assert {n for n, _ in head[7:14]} == {"nirvana s=0.2 gamma*"} and {n for n, _ in head[14:]} == {
        "taylor s=0.2 gamma*"
    }
    names = [j.variant.name for j in jobs[21:26]]
    assert all(j.task == "arc_easy" for j in jobs[21:26]) and "wanda uniform s=0.2" in names
    assert "nirvana s=0.2 gamma=8 (KL-best)" in [j.variant.name for j in jobs]
    assert [j.task for j in jobs].index("lambada_openai") == 8 * 7 + 7 * 7
    assert not any(j.task == "mbpp" for j in jobs)
    allowed = plan_jobs(AccuracyConfig(out_dir=tmp_path, allow_code_execution=True, best_gamma={0.2: 8.0}))
    assert allowed[-1].task == "mbpp" and len({j.variant.name for j in allowed}) == 1 + 7 + 6


def _rows(variant: str, sparsity: float, value: float) -> list[dict]:
    out = []
    for task in ZEROSHOT7:
        m = PAPER_METRIC[task]
        out.append(
            {
                "model": "m",
                "variant": variant,
                "sparsity": sparsity,
                "task": task,
                "paper_metric": m,
                m: value,
                f"{m}_stderr": 0.035,
                "n": 200,
                "limit": 200,
                "seconds": 20,
                "examples_per_s": 10,
                "harness_version": "0.4.13",
                "machine": "test",
                "load_avg_1min": 1.0,
            }
        )
    return out


def test_rows_resume_and_the_report_has_the_average_and_winners(tmp_path):
    config = AccuracyConfig(model="m", out_dir=tmp_path, lambada_limit=0)
    before = len(pending(ACCURACY, config))
    for row in (
        _rows("dense", 0.0, 0.5) + _rows("nirvana s=0.2 gamma*", 0.2, 0.45) + _rows("taylor s=0.2 gamma*", 0.2, 0.47)
    ):
        store_row(config.csv_path, row, COLUMNS, KEY)
    assert len(pending(ACCURACY, config)) == before - 3 * 7  # the rows already there are skipped on a rerun
    from nirvana.bench.accuracy import read_rows

    rows = read_rows(config.csv_path)
    by = {v["variant"]: v for v in summarize(rows)}
    assert by["dense"]["average"] == pytest.approx(0.5) and by["dense"]["average_se"] == pytest.approx(0.035 / 7**0.5)
    md, text = write_report(rows, config)
    assert md.exists() and (tmp_path / "accuracy-m.png").exists()
    assert "| dense | 50.0 ± 3.5 |" in text and "| -3.0 |" in text  # taylor: 47 - 50
    assert "- s=0.2, ARC-e: best taylor s=0.2 gamma* 47.0 ± 3.5; NIRVANA (gamma*) 45.0 ± 3.5, #2 of 2" in text
