"""The accuracy benchmark's grid, resume and report (no model: rows are written by hand)."""

from __future__ import annotations

import pytest

from nirvana.accuracy.tasks import BPB_TASKS, PAPER_METRIC, ZEROSHOT7
from nirvana.bench.accuracy import ACCURACY, COLUMNS, KEY, AccuracyConfig, kl_best_gammas, plan_jobs
from nirvana.bench.accuracy_report import pass_text, plus_minus, summarize, write_report
from nirvana.bench.base import pending
from nirvana.bench.per_problem import per_problem_text
from nirvana.bench.rows import read_rows, store_row


def test_a_pass_rate_with_no_spread_shows_its_count_not_a_zero_error():
    assert pass_text(0.355, 0.0338, 200) == "35.5 ± 3.4"
    assert pass_text(0.0, 0.0, 164) == "0.0 (0 of 164)"  # a standard error of 0 would read as certainty
    assert pass_text(1.0, 0.0, 10) == "100.0 (10 of 10)"
    assert pass_text(None, None, 0) == "-"


def test_plus_minus_scales_rounds_and_marks_what_was_not_measured():
    assert plus_minus(0.4651, 0.0131) == "46.5 ± 1.3"  # a proportion in points
    assert plus_minus(0.8123, 0.0041, scale=1, digits=3) == "0.812 ± 0.004"  # bits per byte
    assert plus_minus(0.5, None) == "50.0"
    assert plus_minus(None, None) == "-" and plus_minus(None, 0.1, missing="not measured") == "not measured"


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
    assert [j.task for j in allowed if j.task not in BPB_TASKS][-1] == "mbpp"
    assert len({j.variant.name for j in allowed}) == 1 + 7 + 6
    gold = [(j.variant.name, j.task) for j in jobs if j.task in BPB_TASKS]  # last: dense, then sparsity by sparsity
    tasks = ("mbpp_bpb", "gsm8k_bpb")
    pair = [(f"{c} s={s:g} gamma*", t) for s in (0.2, 0.5) for t in tasks for c in ("nirvana", "taylor")]
    assert gold == [("dense", "mbpp_bpb"), ("dense", "gsm8k_bpb"), *pair]
    assert jobs[-len(gold) :] == [j for j in jobs if j.task in BPB_TASKS]
    assert not any(j.task in BPB_TASKS for j in plan_jobs(AccuracyConfig(bpb_limit=0, gsm8k_bpb_limit=0)))


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

    rows = read_rows(config.csv_path)
    by = {v["variant"]: v for v in summarize(rows)}
    assert by["dense"]["average"] == pytest.approx(0.5) and by["dense"]["average_se"] == pytest.approx(0.035 / 7**0.5)
    md, text = write_report(rows, config)
    assert md.exists() and (tmp_path / "accuracy-m.png").exists()
    assert "| dense | 50.0 ± 3.5 |" in text and "| -3.0 |" in text  # taylor: 47 - 50
    assert "- s=0.2, ARC-e: best taylor s=0.2 gamma* 47.0 ± 3.5; NIRVANA (gamma*) 45.0 ± 3.5, #2 of 2" in text


def test_bpb_rows_join_an_old_csv_under_the_new_header_and_report_paired_differences(tmp_path):
    config = AccuracyConfig(model="m", out_dir=tmp_path, lambada_limit=0)
    old = [c for c in COLUMNS if c not in ("bpb", "bpb_stderr")]  # a CSV written before the columns existed
    config.csv_path.write_text(",".join(old) + "\r\n" + ",".join("m" if c == "model" else "" for c in old) + "\r\n")
    values = {"dense": [1.0, 1.2, 0.8, 1.0], "nirvana s=0.2 gamma*": [1.3, 1.4, 1.1, 1.2]}
    values["taylor s=0.2 gamma*"] = [1.2, 1.5, 1.0, 1.1]
    for variant, vs in values.items():
        mean = sum(vs) / 4
        row = {"model": "m", "variant": variant, "task": "mbpp_bpb", "sparsity": 0.0 if variant == "dense" else 0.2}
        row.update(bpb=mean, bpb_stderr=0.05, n=4, limit=4, seconds=60, load_avg_1min=2.0, machine="test")
        text = per_problem_text(config.per_problem_path, variant, "mbpp_bpb", 4, vs)
        config.per_problem_path.write_text(text)
        store_row(config.csv_path, row, COLUMNS, KEY)
    assert config.csv_path.read_text().splitlines()[0] == ",".join(COLUMNS)  # the old header gained the columns
    rows = read_rows(config.csv_path)
    assert len(rows) == 4 and rows[0]["model"] == "m" and rows[1]["bpb"] == "1.0"  # the old row is kept
    _, text = write_report(rows[1:], config)
    assert "## Gold bits per byte (lower is better)" in text
    assert "| dense | 1.0000 ± 0.0500 (4) | - |" in text
    # NIRVANA - dense per problem: 0.3, 0.2, 0.3, 0.2 -> mean 0.25, sd 0.0577, se 0.0289: 8.7 se
    assert "| nirvana s=0.2 gamma* | 1.2500 ± 0.0500 (4) | +0.2500 ± 0.0289 (8.7 se, resolved) |" in text
    # NIRVANA - Taylor: 0.1, -0.1, 0.1, 0.1 -> mean 0.05, se 0.05: not resolved
    assert "- s=0.2, MBPP: +0.0500 ± 0.0500 (1.0 se)" in text
