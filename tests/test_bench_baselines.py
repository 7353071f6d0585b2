"""The baselines benchmark's grid, keys, resume, matched-parameter flag and report (no model: fake rows)."""

from __future__ import annotations

import json
import pickle
from dataclasses import replace

import pytest

from nirvana.accuracy.tasks import ZEROSHOT7
from nirvana.bench.base import Measured, pending, run
from nirvana.bench.baselines import (
    BASELINES,
    COLUMNS,
    KEY,
    BaselinesConfig,
    Variant,
    best_gammas,
    grid_folder,
    grid_path,
    plan_jobs,
    record_grid,
)
from nirvana.bench.baselines_report import ablations, markdown, matched, variants, write_report
from nirvana.bench.rows import read_rows, store_row
from nirvana.pipeline import PruneSettings
from tests.tiny import TYR_SMALL

BEST = {0.2: 8.0, 0.5: 4.0}  # benchmarks/gamma/gamma-smollm2-135m.md


def test_best_gammas_come_from_the_committed_gamma_benchmark():
    assert best_gammas("smollm2-135m", (0.2, 0.5)) == BEST
    assert best_gammas("smollm2-135m", (0.2,)) == {0.2: 8.0}


def test_job_order_perplexity_of_every_method_first_then_zero_shot_then_fifty_percent(tmp_path):
    jobs = plan_jobs(BaselinesConfig(out_dir=tmp_path, best_gamma=BEST))
    names = [(j.variant.name, j.measure) for j in jobs]
    first = [
        "dense",
        "nirvana s=0.2 gamma*",
        "llm-pruner s=0.2",
        "flap s=0.2",
        "slicegpt s=0.2",
        "tyr s=0.2",
        "nirvana s=0.2 gamma=8 (KL-best)",
        "slicegpt slicing=0.25 (reference)",  # the reference's own fraction, for the record
    ]
    k = len(first)
    assert names[:k] == [(n, "ppl") for n in first]
    # then each pruned model's seven tasks in a row (its average as soon as possible), dense's last
    tasks = names[k : k + k * 7]
    assert tasks == [(n, t) for n in [*first[1:], "dense"] for t in ZEROSHOT7]
    at = k + 7 * k
    assert names[at : at + k] == [(n, "lambada_openai") for n in first]
    assert names[at + k : at + 2 * k] == [(n, "mbpp_bpb") for n in first]  # gold BPB on MBPP's 500 problems
    assert {j.limit for j in jobs if j.measure == "mbpp_bpb"} == {500}
    lora = [f"{n} + LoRA" for n in first[1:-1]]  # each matched method at 20% again after the default LoRA budget
    at += 2 * k
    assert names[at : at + 6] == [(n, "ppl") for n in lora]
    assert names[at + 6 : at + 6 + 42] == [(n, t) for n in lora for t in ZEROSHOT7]
    assert names[at + 48 : at + 54] == [(n, "mbpp_bpb") for n in lora]
    fifty = [n.replace("0.2", "0.5").replace("gamma=8", "gamma=4") for n in first[1:-1]]
    assert names[at + 54 : at + 60] == [(n, "ppl") for n in fifty]
    assert len(jobs) == 8 * (1 + 7 + 1 + 1) + 6 * (1 + 7 + 1) + 6 * (1 + 7 + 1 + 1)
    assert not any(j.variant.lora for j in plan_jobs(BaselinesConfig(lora_sparsities=(), best_gamma=BEST)))
    assert not any(j.measure in ("mbpp", "gsm8k_bpb") for j in jobs)  # pass@1 only with --allow-code-execution
    allowed = plan_jobs(BaselinesConfig(out_dir=tmp_path, best_gamma=BEST, allow_code_execution=True))
    assert [j.measure for j in allowed[-20:]] == ["mbpp"] * 20 and allowed[:-20] == jobs
    assert [j.measure for j in plan_jobs(BaselinesConfig(lambada_limit=0))].count("lambada_openai") == 0
    gold = [j.measure for j in plan_jobs(BaselinesConfig(bpb_limit=0, gsm8k_bpb_limit=50, best_gamma=BEST))]
    assert gold.count("mbpp_bpb") == 0 and gold.count("gsm8k_bpb") == 20


def test_methods_restrict_the_pruned_models_and_keep_dense():
    config = BaselinesConfig(methods=("nirvana", "flap"), best_gamma=BEST)
    jobs = plan_jobs(config)
    assert {j.variant.method for j in jobs} == {"dense", "nirvana", "flap"}
    everyone = plan_jobs(BaselinesConfig(best_gamma=BEST))
    kept = [j for j in everyone if j.variant.method in ("dense", "nirvana", "flap")]
    assert jobs == kept  # the same rows in the same order, the others left out
    assert {j.variant.method for j in plan_jobs(BaselinesConfig(methods=("slicegpt",)))} == {"dense", "slicegpt"}
    extra = {j.variant.name for j in plan_jobs(BaselinesConfig(methods=("nirvana",), nirvana_gamma=20.0))}
    assert {"nirvana s=0.2 gamma=20", "nirvana s=0.5 gamma=20", "nirvana s=0.2 gamma=20 + LoRA"} <= extra


def test_llm_pruner_at_fifty_percent_uses_the_shorter_attention_range_and_says_so():
    jobs = plan_jobs(BaselinesConfig(best_gamma=BEST))
    (llm50,) = {j.variant for j in jobs if j.variant.method == "llm-pruner" and j.variant.sparsity == 0.5}
    (llm20,) = {
        j.variant for j in jobs if j.variant.method == "llm-pruner" and j.variant.sparsity == 0.2 and not j.variant.lora
    }
    assert json.loads(llm50.settings) == {"attn_layers": [4, 19]} and llm20.settings == ""
    settings = llm50.prune_settings(32, 128, use_cache=False)
    assert isinstance(settings, PruneSettings) and settings.config.attn_layers == (4, 19)
    assert settings.method == "llm-pruner" and settings.gamma is None and settings.use_cache is False
    assert settings.micro_batch == 0 and llm50.prune_settings(32, 128, False, micro_batch=4).micro_batch == 4
    kl = Variant("nirvana", 0.5, 4.0, "gamma=4 (KL-best)").prune_settings(32, 128, True)
    assert (kl.gamma, kl.method, kl.method_settings) == (4.0, "nirvana", None)


def test_keys_are_unique_strings_and_jobs_pickle(tmp_path):
    config = BaselinesConfig(out_dir=tmp_path, best_gamma=BEST, allow_code_execution=True)
    jobs = BASELINES.jobs(config)
    keys = [BASELINES.key(config, j) for j in jobs]
    assert len(set(keys)) == len(keys) and all(isinstance(k, str) for key in keys for k in key)
    assert keys[0] == ("smollm2-135m", "dense", "ppl", "16384")
    assert keys[8] == ("smollm2-135m", "nirvana s=0.2 gamma*", "arc_easy", "200")
    assert pickle.loads(pickle.dumps(jobs)) == jobs and pickle.loads(pickle.dumps(config)) == config
    assert set(KEY) <= set(COLUMNS)


def _facts(method: str, sparsity: float, achieved: float, variant: str, settings: str = "") -> dict:
    return {
        "model": "m",
        "variant": variant,
        "method": method,
        "sparsity": sparsity,
        "method_settings": settings,
        "params_after": 1000,
        "block_params_after": 800,
        "target_sparsity": sparsity,
        "achieved_block_sparsity": achieved,
        "achieved_block_param_sparsity": achieved,
        "added_bias_params": 0,
        "prune_seconds": 12.0,
        "machine": "test",
    }


def _rows(method, sparsity, achieved, variant, ppl, acc, settings="") -> list[dict]:
    base = _facts(method, sparsity, achieved, variant, settings)
    rows = [
        {
            **base,
            "measure": "ppl",
            "limit": 16384,
            "ppl_wikitext2": ppl,
            "ppl_ptb": 2 * ppl,
            "prefill_tokens_per_s": 1000.0,
            "decode_tokens_per_s": 50.0,
            "peak_memory_bytes": 2**29,
            "seconds": 60,
            "load_avg_1min": 2.0,
        }
    ]
    for task in ZEROSHOT7:
        rows.append({**base, "measure": task, "limit": 200, "acc": acc, "acc_stderr": 0.035, "n": 200, "seconds": 9})
    return rows


def test_the_matched_parameter_flag():
    assert matched({"method": "flap", "target_sparsity": "0.2", "achieved_block_param_sparsity": "0.1969"})
    assert matched({"method": "flap", "target_sparsity": "0.2", "achieved_block_param_sparsity": "0.21"})
    assert not matched({"method": "llm-pruner", "target_sparsity": "0.5", "achieved_block_param_sparsity": "0.464"})
    assert not matched({"method": "x", "target_sparsity": "0.5", "achieved_block_param_sparsity": "0.5101"})
    assert matched({"method": "dense", "target_sparsity": "0", "achieved_block_param_sparsity": "0"}) is None
    assert matched({"method": "flap", "target_sparsity": "", "achieved_block_param_sparsity": ""}) is None


def test_rows_resume_and_the_report_table_on_known_rows(tmp_path):
    config = BaselinesConfig(model="m", out_dir=tmp_path, sparsities=(0.2, 0.5), lambada_limit=0)
    before = len(pending(BASELINES, config))
    rows = (
        _rows("dense", 0.0, 0.0, "dense", 20.0, 0.5)
        + _rows("nirvana", 0.2, 0.1977, "nirvana s=0.2 gamma*", 60.0, 0.45)
        + _rows("llm-pruner", 0.5, 0.464, "llm-pruner s=0.5", 300.0, 0.40, '{"attn_layers": [4, 19]}')
    )
    for row in rows:
        store_row(config.csv_path, row, COLUMNS, KEY)
    assert len(pending(BASELINES, config)) == before - 3 * 8  # the rows already there are skipped on a rerun

    by = {v["variant"]: v for v in variants(read_rows(config.csv_path))}
    assert by["nirvana s=0.2 gamma*"]["average"] == pytest.approx(0.45)
    assert by["nirvana s=0.2 gamma*"]["average_se"] == pytest.approx(0.035 / 7**0.5)
    assert by["nirvana s=0.2 gamma*"]["matched"] is True and by["llm-pruner s=0.5"]["matched"] is False

    text = markdown(read_rows(config.csv_path), config, extra=[])
    lines = text.splitlines()
    row = next(line for line in lines if line.startswith("| nirvana s=0.2 gamma*"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[1:4] == ["0.2", "60.00", "120.00"]  # sparsity, WikiText-2, PTB
    assert cells[6:13] == ["45.0 ± 3.5"] * 7 and cells[13] == "45.0 ± 1.3"  # tasks and the 7-task average
    assert cells[4] == cells[5] == cells[14] == "-"  # LAMBADA and MBPP not measured
    dense = next(line for line in lines if line.startswith("| dense"))
    assert "50.0 ± 1.3" in dense and "20.00" in dense
    assert "| llm-pruner s=0.5 |" in text and "**not matched**" in text
    assert '`{"attn_layers": [4, 19]}`' in text  # the settings a row used are in the report
    assert text.index("| dense") < text.index("| nirvana s=0.2") < text.index("| llm-pruner s=0.5")
    assert "NIRVANA beside LLM-Pruner, FLAP, SliceGPT and Tyr-the-Pruner (" in text  # the grid's methods
    assert "LAMBADA not in this grid" in text and "the first 500 problems" in text
    fewer = replace(config, methods=("nirvana", "flap"), bpb_limit=0)
    assert "NIRVANA beside FLAP (" in (other := markdown([], fewer, extra=[])) and "bits/byte not in this grid" in other

    md, _ = write_report(read_rows(config.csv_path), config)
    assert md.exists() and config.csv_path.with_suffix(".png").exists()


def test_gold_bpb_cells_and_differences_paired_by_problem(tmp_path):
    from nirvana.bench.per_problem import per_problem_text

    config = BaselinesConfig(model="m", out_dir=tmp_path, sparsities=(0.2,), lambada_limit=0)
    values = {  # bits per byte of four problems; FLAP loses 0.1 to 0.4 more than NIRVANA on each
        "dense": [0.5, 0.6, 0.7, 0.8],
        "nirvana s=0.2 gamma*": [0.9, 1.0, 1.1, 1.2],
        "flap s=0.2": [1.0, 1.2, 1.4, 1.6],
    }
    for variant, v in values.items():
        method = variant.split()[0]
        row = {**_facts(method, 0.2, 0.2, variant), "measure": "mbpp_bpb", "limit": 4, "n": 4}
        row.update(bpb=sum(v) / 4, bpb_stderr=0.05)
        store_row(config.csv_path, row, COLUMNS, KEY)
        config.per_problem_path.write_text(per_problem_text(config.per_problem_path, variant, "mbpp_bpb", 4, v))
    text = markdown(read_rows(config.csv_path), config, extra=[])
    nirvana = next(line for line in text.splitlines() if line.startswith("| nirvana s=0.2 gamma* |"))
    assert nirvana.rstrip(" |").endswith("1.050 ± 0.050")  # the MBPP bits/byte column
    flap = next(line for line in text.splitlines() if line.startswith("| flap s=0.2 | MBPP"))
    # flap − dense = 0.6 ± sd(0.5, 0.6, 0.7, 0.8)/2; NIRVANA − flap = −0.25 ± sd(0.1, 0.2, 0.3, 0.4)/2
    assert "+0.6500 ± 0.0645" in flap and "-0.2500 ± 0.0645 (3.9 se, resolved)" in flap


def test_ablations_are_read_from_the_committed_grids():
    rows = {v["variant"]: v for v in ablations("smollm2-135m", (0.2, 0.5))}
    assert set(rows) == {f"{c} s={s} gamma* (ablation)" for c in ("taylor", "wanda") for s in (0.2, 0.5)}
    taylor = rows["taylor s=0.2 gamma* (ablation)"]
    assert taylor["ppl_wikitext2"] == pytest.approx(50.41, abs=0.01)  # benchmarks/quality, calibration seed 0
    assert taylor["average"] == pytest.approx(0.466, abs=0.001)  # benchmarks/accuracy, n = 200 per task
    assert ablations("no-such-model") == []


class _FakeWorker:
    """A worker that measures nothing: each job's row from `_rows` (or a gold bits-per-byte row); keeps the jobs."""

    def __init__(self):
        self.ran = []

    def run(self, job):
        self.ran.append(job)
        v = job.variant
        gold = {**_facts(v.method, v.sparsity, 0.2, v.name, ""), "measure": "mbpp_bpb", "limit": job.limit}
        gold |= {"bpb": 0.5, "bpb_stderr": 0.01, "n": job.limit}
        rows = [*_rows(v.method, v.sparsity, 0.2, v.name, 30.0, 0.4), gold]
        (row,) = [r for r in rows if r["measure"] == job.measure]
        return Measured(row, "fake")


def test_run_writes_each_row_and_the_report_with_a_fake_worker(tmp_path, monkeypatch):
    config = BaselinesConfig(
        model="m", out_dir=tmp_path, sparsities=(0.2,), lambada_limit=0, bpb_limit=0, lora_sparsities=()
    )
    fake = _FakeWorker()
    monkeypatch.setattr(type(BASELINES), "worker", lambda self, c, log: fake)
    run(BASELINES, config, lambda m: None)
    assert len(fake.ran) == len(plan_jobs(config)) == len(read_rows(config.csv_path))
    assert "flap s=0.2" in config.csv_path.with_suffix(".md").read_text()


def test_only_measures_runs_those_rows_and_the_grid_record_keeps_the_whole_plan(tmp_path, monkeypatch):
    from nirvana.bench.baselines import measures

    base = dict(model="m", out_dir=tmp_path, sparsities=(0.2,), lambada_limit=0, bpb_limit=50, lora_sparsities=())
    whole = BaselinesConfig(**base)
    config = BaselinesConfig(**base, only_measures=("mbpp_bpb", "ppl"))
    assert measures(whole) == ("ppl", *ZEROSHOT7, "mbpp_bpb")
    fake = _FakeWorker()
    monkeypatch.setattr(type(BASELINES), "worker", lambda self, c, log: fake)
    record_grid(config)
    run(BASELINES, config, lambda m: None)
    planned = [(j.variant.name, j.measure) for j in plan_jobs(whole)]
    ran = [(j.variant.name, j.measure) for j in fake.ran]
    assert ran == [x for x in planned if x[1] in ("ppl", "mbpp_bpb")]  # in plan order, nothing else
    assert json.loads(grid_path(config).read_text())["limit"] == 200  # the zero-shot rows are still planned
    assert "only_measures" not in json.loads(grid_path(config).read_text())
    run(BASELINES, whole, lambda m: None)  # a later run fills in the rest, without redoing a row
    assert len(fake.ran) == len(planned) == len(read_rows(config.csv_path))


def test_only_methods_with_only_measures_runs_the_intersection_in_plan_order(tmp_path, monkeypatch):
    base = dict(model="m", out_dir=tmp_path, sparsities=(0.2,), lambada_limit=0, bpb_limit=50, lora_sparsities=())
    config = BaselinesConfig(**base, only_measures=("mbpp_bpb", "ppl"), only_methods=("flap", "nirvana"))
    fake = _FakeWorker()
    monkeypatch.setattr(type(BASELINES), "worker", lambda self, c, log: fake)
    run(BASELINES, config, lambda m: None)
    planned = [(j.variant.method, j.measure) for j in plan_jobs(BaselinesConfig(**base))]
    ran = [(j.variant.method, j.measure) for j in fake.ran]
    assert ran == [x for x in planned if x[1] in ("ppl", "mbpp_bpb") and x[0] in ("flap", "nirvana")]
    assert {m for m, _ in ran} == {"flap", "nirvana"} and {x for _, x in ran} == {"ppl", "mbpp_bpb"}


def test_only_sparsities_runs_the_models_at_those_sparsities_in_plan_order(tmp_path, monkeypatch):
    base = dict(model="m", out_dir=tmp_path, sparsities=(0.2, 0.5), lambada_limit=0, bpb_limit=50, lora_sparsities=())
    config = BaselinesConfig(**base, only_sparsities=(0.5,), only_measures=("ppl",))
    fake = _FakeWorker()
    monkeypatch.setattr(type(BASELINES), "worker", lambda self, c, log: fake)
    record_grid(config)  # as the command does before running
    run(BASELINES, config, lambda m: None)
    planned = [(j.variant.name, j.variant.sparsity, j.measure) for j in plan_jobs(BaselinesConfig(**base))]
    ran = [(j.variant.name, j.variant.sparsity, j.measure) for j in fake.ran]
    assert ran == [x for x in planned if x[1] == 0.5 and x[2] == "ppl"] and len(ran) >= 4  # every method at 50%
    assert "only_sparsities" not in json.loads(grid_path(config).read_text())
    assert json.loads(grid_path(config).read_text())["sparsities"] == [0.2, 0.5]  # the grid still plans both
    fake.ran.clear()
    run(BASELINES, replace(config, only_sparsities=(0.0,)), lambda m: None)  # 0 is dense
    assert [(j.variant.name, j.measure) for j in fake.ran] == [("dense", "ppl")]


@pytest.mark.parametrize(
    "argv, words",
    [
        (["--only-measures", "ppl,mbpp"], ["--only-measures", "mbpp,", "plans: ppl", "--allow-code-execution"]),
        (
            ["--methods", "nirvana,flap", "--only-methods", "dense,tyr"],
            ["--only-methods", "tyr,", "it has: dense", "flap."],
        ),
        (
            ["--sparsities", "0.2,0.5", "--only-sparsities", "0.5,0.3"],
            ["--only-sparsities", "0.3,", "it has: 0,", "dense"],
        ),
        (["--sparsities", "0.2,1.5"], ["--sparsities", "(0, 1)"]),
        (["--tokens", "0"], ["--tokens", "positive"]),
        (["--threads", "0"], ["--threads", "positive"]),
        (["--nirvana-gamma", "0"], ["--nirvana-gamma", "positive"]),
        (["--methods", "nirvana,sparsegpt"], ["'sparsegpt'", "--methods", "llm-pruner, flap"]),
        (["--dtype", "int3"], ["'int3'", "bfloat16"]),
        (["--device", "tpu"], ["'tpu'", "cpu"]),
        (["--calib", "imagenet"], ["'imagenet'", "python-code", ".jsonl"]),
    ],
)
def test_bad_flags_exit_2_with_a_message_and_write_nothing(argv, words, tmp_path, capsys):
    from nirvana.cli import main

    code = main(["bench", "baselines", "--out-dir", str(tmp_path), "--report-only", *argv])
    assert code == 2
    err = capsys.readouterr().err
    assert all(w in err for w in words) and "Traceback" not in err
    assert list(tmp_path.iterdir()) == []


def test_a_lora_row_prunes_then_recovers_with_the_default_budget(tiny_with_tokenizer_dir, tmp_path):
    from nirvana.bench.baselines import BaselineJob, BaselinesWorker
    from nirvana.recovery.config import RecoveryConfig

    corpus = tmp_path / "train.txt"
    corpus.write_text("\n".join(f"Line {i}: pruning and recovering small language models." for i in range(400)))
    config = BaselinesConfig(
        model=str(tiny_with_tokenizer_dir),
        out_dir=tmp_path,
        tokens=256,
        window=64,
        samples=2,
        seq_len=16,
        speed_repeats=1,
        speed_prompt_len=8,
        speed_new_tokens=2,
        lora_data=str(corpus),
        threads=1,
    )
    worker = BaselinesWorker(config, lambda m: None)
    plain = worker.run(BaselineJob(config.model, Variant("flap", 0.2), "ppl", config.tokens)).row
    job = BaselineJob(config.model, Variant("flap", 0.2, lora=True), "ppl", config.tokens)
    row = worker.run(job).row
    assert row["variant"] == "flap s=0.2 + LoRA" and row["method"] == "flap"
    steps = RecoveryConfig().total_steps
    assert row["lora"].startswith("r8 a16") and f"{steps} steps" in row["lora"] and row["lora_seconds"] > 0
    # the same pruned model (same facts, same calibration), then trained: its perplexity moves
    assert row["params_after"] == plain["params_after"] and row["added_bias_params"] == plain["added_bias_params"]
    assert row["ppl_wikitext2"] != plain["ppl_wikitext2"]


def test_readme_summary_verdicts_come_from_the_rows(tmp_path):
    from nirvana.bench.baselines_report import readme_summary

    config = BaselinesConfig(model="m", out_dir=tmp_path, sparsities=(0.2,), lambada_limit=0, bpb_limit=0)
    rows = (
        _rows("dense", 0.0, 0.0, "dense", 20.0, 0.5)
        + _rows("nirvana", 0.2, 0.2, "nirvana s=0.2 gamma*", 60.0, 0.50)
        + _rows("llm-pruner", 0.2, 0.2, "llm-pruner s=0.2", 40.0, 0.40)
        + _rows("flap", 0.2, 0.2, "flap s=0.2", 80.0, 0.49)
        + _rows("slicegpt", 0.2, 0.142, "slicegpt slicing=0.25 (reference)", 90.0, 0.38)
    )
    text = readme_summary(rows, config, pending_rows=3, extra=[])
    slicegpt = next(line for line in text.splitlines() if "− slicegpt slicing=0.25 (reference)" in line)
    assert "(not matched: a different budget)" in slicegpt and "60.00 vs 90.00 (NIRVANA lower)" in slicegpt
    # gamma* short of the budget (Gemma-3): a matched NIRVANA run at a fixed gamma is compared too
    short = [
        {**r, "achieved_block_param_sparsity": "0.163"} if r["variant"] == "nirvana s=0.2 gamma*" else r for r in rows
    ] + _rows("nirvana", 0.2, 0.2, "nirvana s=0.2 gamma=20", 70.0, 0.47)
    lines = readme_summary(short, config, extra=[]).splitlines()
    assert any(
        line.startswith("- 20%, nirvana s=0.2 gamma* (not matched: a different budget) − flap") for line in lines
    )
    assert any(
        line.startswith("- 20%, nirvana s=0.2 gamma=20 − flap s=0.2: WikiText-2 perplexity 70.00") for line in lines
    )
    llm = next(line for line in text.splitlines() if "− llm-pruner s=0.2" in line)
    flap = next(line for line in text.splitlines() if "− flap s=0.2" in line)
    # averages 50 vs 40 with se 3.5/sqrt(7) each: +10.0 ± 1.9 points, resolved; 50 vs 49: not resolved
    assert "60.00 vs 40.00 (baseline lower)" in llm and "+10.0 ± 1.9 points (resolved, NIRVANA higher)" in llm
    assert "60.00 vs 80.00 (NIRVANA lower)" in flap and "+1.0 ± 1.9 points (within 2 se: not resolved)" in flap
    assert "3 rows of the grid are not measured yet" in text
    assert "| nirvana s=0.2 gamma* | 60.00 | 120.00 | 50.0 ± 1.3 |" in text


def test_code_tasks_last_or_first_and_humaneval_rows(tmp_path):
    base = dict(out_dir=tmp_path, best_gamma=BEST, allow_code_execution=True, mbpp_limit=200, humaneval_limit=164)
    last = [(j.variant.name, j.measure, j.limit) for j in plan_jobs(BaselinesConfig(**base))]
    code = [x for x in last if x[1] in ("mbpp", "humaneval")]
    assert last[-len(code) :] == code  # every model's code rows at the end
    assert {("dense", "mbpp", 200), ("dense", "humaneval", 164)} <= set(code)
    first = [(j.variant.name, j.measure, j.limit) for j in plan_jobs(BaselinesConfig(**base, code_first=True))]
    assert sorted(first) == sorted(last)  # the same rows, another order
    ppl_02 = [i for i, x in enumerate(first) if x[1] == "ppl" and "s=0.5" not in x[0] and "LoRA" not in x[0]]
    after = first[max(ppl_02) + 1 :]
    models_02 = {first[i][0] for i in ppl_02}
    assert {(x[0], x[1]) for x in after[: 2 * len(models_02)]} == {
        (m, t) for m in models_02 for t in ("mbpp", "humaneval")
    }  # right after the 20% perplexity rows, before any zero-shot task
    assert not [j for j in plan_jobs(BaselinesConfig(humaneval_limit=164)) if j.measure == "humaneval"]  # opt-in


def test_method_settings_are_per_model():
    smol = plan_jobs(BaselinesConfig(model="smollm2-135m", best_gamma=BEST))
    qwen = plan_jobs(BaselinesConfig(model="qwen2.5-coder-0.5b", sparsities=(0.2, 0.5)))
    at = lambda jobs: {j.variant.settings for j in jobs if j.variant.method == "llm-pruner"}
    assert at(smol) == {"", json.dumps({"attn_layers": [4, 19]})}
    assert at(qwen) == {""}  # the default layer range reaches 0.2 and 0.5 on Qwen2.5-Coder-0.5B


def test_reconstructed_variants_follow_each_sparsitys_block_and_leave_the_grid_as_it_was(tmp_path):
    """`reconstruct_sparsities`: each matched method but SliceGPT again with `--reconstruct`, after the LoRA rows of
    that sparsity; the rows of a grid without it are the same rows in the same order (resumed grids keep their keys)."""
    plain = plan_jobs(BaselinesConfig(out_dir=tmp_path, best_gamma=BEST))
    jobs = plan_jobs(BaselinesConfig(out_dir=tmp_path, best_gamma=BEST, reconstruct_sparsities=(0.2, 0.5)))
    assert [j for j in jobs if not j.variant.reconstruct] == plain
    fitted = [j for j in jobs if j.variant.reconstruct]
    names = list(dict.fromkeys(j.variant.name for j in fitted))
    assert names == [f"{m} s={s:g}{tail} + recon" for s in (0.2, 0.5) for m, tail in
                     (("nirvana", " gamma*"), ("llm-pruner", ""), ("flap", ""))]  # fmt: skip
    per_model = [j.measure for j in fitted if j.variant.name == "flap s=0.2 + recon"]
    assert per_model == ["ppl", *ZEROSHOT7, "mbpp_bpb"]
    first = jobs.index(fitted[0])  # after 20%'s LoRA rows, before 50%'s perplexity rows
    assert jobs[first - 1].variant.lora and jobs[first + len(per_model) * 3].variant.sparsity == 0.5
    settings = Variant("nirvana", 0.5, reconstruct=True).prune_settings(32, 128, False)
    assert settings.reconstruct and not Variant("nirvana", 0.5).prune_settings(32, 128, False).reconstruct


def test_a_reconstructed_row_is_the_plain_model_re_solved(tiny_with_tokenizer_dir, tmp_path):
    from nirvana.bench.baselines import BaselineJob, BaselinesWorker

    config = BaselinesConfig(
        model=str(tiny_with_tokenizer_dir), out_dir=tmp_path, tokens=256, window=64, samples=2, seq_len=16,
        speed_repeats=1, speed_prompt_len=8, speed_new_tokens=2, threads=1,
    )  # fmt: skip
    worker = BaselinesWorker(config, lambda m: None)
    plain = worker.run(BaselineJob(config.model, Variant("nirvana", 0.5), "ppl", config.tokens)).row
    row = worker.run(BaselineJob(config.model, Variant("nirvana", 0.5, reconstruct=True), "ppl", config.tokens)).row
    assert row["variant"] == "nirvana s=0.5 gamma* + recon"
    assert row["params_after"] == plain["params_after"] and row["ppl_wikitext2"] != plain["ppl_wikitext2"]


def test_verdicts_compare_reconstructed_models_with_each_other(tmp_path):
    config = BaselinesConfig(model="m", out_dir=tmp_path, sparsities=(0.2,), lambada_limit=0, bpb_limit=0)
    rows = (
        _rows("dense", 0.0, 0.0, "dense", 20.0, 0.5)
        + _rows("nirvana", 0.2, 0.2, "nirvana s=0.2 gamma*", 60.0, 0.50)
        + _rows("flap", 0.2, 0.2, "flap s=0.2", 80.0, 0.49)
        + _rows("nirvana", 0.2, 0.2, "nirvana s=0.2 gamma* + recon", 50.0, 0.50)
        + _rows("flap", 0.2, 0.2, "flap s=0.2 + recon", 45.0, 0.49)
    )
    from nirvana.bench.baselines_report import readme_summary

    verdicts = [line for line in readme_summary(rows, config, 0, []).splitlines() if line.startswith("- 20%")]
    assert any("nirvana s=0.2 gamma* + recon − flap s=0.2 + recon" in v for v in verdicts)
    assert any("nirvana s=0.2 gamma* − flap s=0.2:" in v for v in verdicts)
    assert not any("gamma* − flap s=0.2 + recon" in v or "recon − flap s=0.2:" in v for v in verdicts)


def test_pass_at_1_differences_paired_by_problem(tmp_path):
    from nirvana.bench.per_problem import per_problem_text

    config = BaselinesConfig(model="m", out_dir=tmp_path, sparsities=(0.2,), allow_code_execution=True)
    outcomes = {  # eight problems: NIRVANA passes 2 of dense's 4, LLM-Pruner the same 2, FLAP 1 more
        "dense": [1, 1, 1, 1, 0, 0, 0, 0],
        "nirvana s=0.2 gamma*": [1, 1, 0, 0, 0, 0, 0, 0],
        "llm-pruner s=0.2": [1, 1, 0, 0, 0, 0, 0, 0],
        "flap s=0.2": [1, 1, 1, 0, 0, 0, 0, 0],
    }
    for variant, passed in outcomes.items():
        row = {**_facts(variant.split()[0], 0.2, 0.2, variant), "measure": "mbpp", "limit": 8, "n": 8}
        row.update(pass_at_1=sum(passed) / 8, pass_at_1_stderr=0.17, seconds=40.0)
        if variant == "flap s=0.2":  # resumed from its journal: 5 of the 8 completions came from an earlier run
            row["resumed_completions"] = 5
        store_row(config.csv_path, row, COLUMNS, KEY)
        config.passes_path.write_text(per_problem_text(config.passes_path, variant, "mbpp", 8, passed))
    text = markdown(read_rows(config.csv_path), config, extra=[])
    seconds = text[text.index("Seconds per row") :]
    assert "flap s=0.2: mbpp 40 (+5 completions from an earlier run)" in seconds
    assert "nirvana s=0.2 gamma*: mbpp 40;" in seconds  # a row run in one go has no such mark
    section = text[text.index("## pass@1, paired by problem") :]
    line = {r.split("|")[1].strip(): r for r in section.splitlines() if r.startswith("| ") and "| MBPP |" in r}
    # nirvana − dense: d = (0,0,-1,-1,0,0,0,0), mean -0.25, sd sqrt(1.5/7), se sd / sqrt(8) = 0.1637
    assert "-25.0 ± 16.4 (1.5 se)" in line["nirvana s=0.2 gamma*"]
    # the same outcomes as NIRVANA: no difference and no error, not "resolved"
    assert line["llm-pruner s=0.2"].rstrip(" |").endswith("+0.0 ± 0.0 (0.0 se)")
    assert line["flap s=0.2"].rstrip(" |").endswith("-12.5 ± 12.5 (1.0 se)")


def test_code_rows_write_outcomes_and_the_backfill_replays_only_cached_rows(
    tiny_with_tokenizer_dir, tmp_path, monkeypatch
):
    """A code row's per-problem outcomes go beside the CSV; `--backfill-passes` asks the eval cache only
    (`cached_only`), and writes only outcomes that give the row's pass@1 again."""
    import nirvana.bench.baselines as baselines
    from nirvana.bench.baselines import BaselineJob, BaselinesWorker, backfill_passes
    from nirvana.bench.per_problem import read_per_problem

    config = BaselinesConfig(
        model=str(tiny_with_tokenizer_dir), out_dir=tmp_path, sparsities=(0.2,), allow_code_execution=True,
        mbpp_limit=4, humaneval_limit=2, threads=1,
    )  # fmt: skip
    calls = []
    cache = {"mbpp": {"pass@1": 0.5, "n": 4, "passed": [1, 0, 1, 0]}, "humaneval": {"passed": None, "passed_note": "x"}}

    def fake_accuracy(model, tokenizer, tasks, **kwargs):
        calls.append(kwargs)
        return {"tasks": {t: cache[t] for t in tasks if t in cache}}  # a task not in `cache` is not cached

    monkeypatch.setattr(baselines, "run_accuracy", fake_accuracy)
    worker = BaselinesWorker(config, lambda m: None)
    out = worker.run(BaselineJob(config.model, Variant("dense"), "mbpp", 4))
    assert out.row["pass_at_1"] == 0.5 and "passed" not in out.row
    assert json.loads(out.files[config.passes_path.name])["dense"]["mbpp"] == {"limit": 4, "values": [1, 0, 1, 0]}

    dense = {**_facts("dense", 0.0, 0.0, "dense"), "model": config.model, "limit": 4, "n": 4}
    for task, p in (("mbpp", 0.5), ("humaneval", 0.5), ("arc_easy", None)):
        store_row(config.csv_path, {**dense, "measure": task, "pass_at_1": p, "acc": 0.3}, COLUMNS, KEY)
    del cache["mbpp"]["n"]
    calls.clear()
    lines = backfill_passes(config, lambda m: None)
    assert lines == ["dense mbpp: 2 of 4 passed, written", "dense humaneval: not written (x)"]
    assert all(c["cached_only"] for c in calls) and len(calls) == 2  # the zero-shot row is not a code row
    assert read_per_problem(config.passes_path) == {"dense": {"mbpp": {"limit": 4, "values": [1, 0, 1, 0]}}}
    assert backfill_passes(config, lambda m: None) == ["dense humaneval: not written (x)"]
    cache.pop("humaneval")
    assert backfill_passes(config, lambda m: None) == [
        "dense humaneval: its completions are not in this machine's eval cache (measured elsewhere?); "
        "the row keeps its pass@1 without per-problem outcomes"
    ]


# settings a 6-layer model with 64 calibration tokens can take (the methods' defaults are sized for real models)
SMALL_SETTINGS = {"llm-pruner": {"attn_layers": [1, 5], "mlp_layers": [1, 5], "pruning_ratio": 0.25}, "tyr": TYR_SMALL}


@pytest.mark.parametrize("method", ["nirvana", "llm-pruner", "flap", "slicegpt", "tyr"])
def test_every_method_prunes_and_measures_in_bfloat16(method, tiny6_dir, tmp_path):
    """`--dtype bfloat16` (where an 8B model fits a GPU): each method's pruned model stays bf16 and measures a
    finite perplexity near the float32 one, at the same size (scores accumulate in fp32)."""
    import math

    import torch

    from nirvana.bench.baselines import BaselineJob, BaselinesWorker

    rows = {}
    for dtype in ("float32", "bfloat16"):
        config = BaselinesConfig(
            model=str(tiny6_dir), out_dir=tmp_path / dtype, tokens=256, window=64, samples=4, seq_len=16,
            speed_repeats=1, speed_prompt_len=8, speed_new_tokens=2, threads=1, dtype=dtype,
        )  # fmt: skip
        worker = BaselinesWorker(config, lambda m: None)
        variant = Variant(method, 0.2, settings=json.dumps(SMALL_SETTINGS.get(method, {})))
        model, _ = worker.model(variant)
        assert {p.dtype for p in model.parameters()} == {getattr(torch, dtype)}
        rows[dtype] = worker.run(BaselineJob(config.model, variant, "ppl", config.tokens)).row
    fp32, bf16 = rows["float32"], rows["bfloat16"]
    assert math.isfinite(bf16["ppl_wikitext2"]) and abs(bf16["ppl_wikitext2"] / fp32["ppl_wikitext2"] - 1) < 0.05
    assert bf16["params_after"] == pytest.approx(fp32["params_after"], rel=0.02)


def test_a_grid_keeps_one_dtype_and_the_cli_gives_bfloat16_rows_their_own_folder(tmp_path, monkeypatch):
    from nirvana.cli import build_parser
    from nirvana.cli.bench_cmds import baselines_config
    from nirvana.errors import InvalidInput

    config = BaselinesConfig(model="m", out_dir=tmp_path)
    assert record_grid(config)["dtype"] == "float32"
    with pytest.raises(InvalidInput, match=r"measured with --dtype float32.*--dtype bfloat16.*--out-dir"):
        record_grid(replace(config, dtype="bfloat16"))
    assert json.loads(grid_path(config).read_text())["dtype"] == "float32"  # the record is left as it was
    legacy = BaselinesConfig(model="old", out_dir=tmp_path)  # a record from before dtypes were kept
    grid_path(legacy).write_text(json.dumps({"methods": ["nirvana"]}))
    with pytest.raises(InvalidInput, match="measured with --dtype float32"):
        record_grid(replace(legacy, dtype="float16"))

    monkeypatch.setattr("nirvana.cli.bench_cmds.DEFAULT_BASELINES_OUT", tmp_path / "baselines")
    parse = build_parser().parse_args
    default = parse(["bench", "baselines", "--out-dir", str(tmp_path / "baselines")])
    assert baselines_config(default).out_dir == tmp_path / "baselines"
    bf16 = baselines_config(parse(["bench", "baselines", "--out-dir", str(tmp_path / "baselines"), "--dtype", "bf16"]))
    assert (bf16.dtype, bf16.out_dir) == ("bfloat16", tmp_path / "baselines" / "bfloat16")
    mine = baselines_config(parse(["bench", "baselines", "--out-dir", str(tmp_path / "mine"), "--dtype", "bfloat16"]))
    assert mine.out_dir == tmp_path / "mine"  # a folder the user named is theirs
    assert "ran in bfloat16" in markdown([], bf16, extra=[]) and "ran in" not in markdown([], config, extra=[])


def test_a_grid_keeps_one_calibration_text_and_the_cli_gives_another_its_own_folder(tmp_path, monkeypatch):
    from nirvana.cli import build_parser
    from nirvana.cli.bench_cmds import baselines_config
    from nirvana.errors import InvalidInput

    config = BaselinesConfig(model="m", out_dir=tmp_path)
    assert record_grid(config)["calib"] == "wikitext2-valid"
    with pytest.raises(InvalidInput, match=r"--calib wikitext2-valid.*--calib python-code.*calib-python-code"):
        record_grid(replace(config, calib="python-code"))
    legacy = BaselinesConfig(model="old", out_dir=tmp_path)  # a record from before the calibration was kept
    grid_path(legacy).write_text(json.dumps({"methods": ["nirvana"]}))
    with pytest.raises(InvalidInput, match="measured with --calib wikitext2-valid"):
        record_grid(replace(legacy, calib="pydoc"))
    assert grid_folder("calib", "/data/my code.jsonl") == "calib-my-code"
    assert grid_folder("dtype", "float16") == "float16"

    monkeypatch.setattr("nirvana.cli.bench_cmds.DEFAULT_BASELINES_OUT", tmp_path / "baselines")
    parse = build_parser().parse_args
    base = ["bench", "baselines", "--model", "smollm2-135m", "--out-dir", str(tmp_path / "baselines")]
    assert baselines_config(parse(base)).best_gamma  # the committed gamma benchmark's, on the default text
    code = baselines_config(parse([*base, "--calib", "python-code"]))
    assert (code.calib, code.best_gamma) == ("python-code", {})  # KL-best gammas were searched on the default
    assert code.out_dir == tmp_path / "baselines" / "calib-python-code"
    both = baselines_config(parse([*base, "--calib", "python-code", "--dtype", "bfloat16"]))
    assert both.out_dir == tmp_path / "baselines" / "bfloat16" / "calib-python-code"


def test_every_method_of_a_grid_is_calibrated_on_its_text(tiny_with_tokenizer_dir, tmp_path, monkeypatch):
    from nirvana.bench.baselines import BaselinesWorker

    seen = []

    def fake_prune(lm, settings):
        seen.append((settings.method, settings.calib, settings.reconstruct))
        raise KeyboardInterrupt  # what was asked is all this test needs

    monkeypatch.setattr("nirvana.bench.baselines.prune", fake_prune)
    worker = BaselinesWorker(BaselinesConfig(model=str(tiny_with_tokenizer_dir), calib="python-code"), print)
    for variant in (Variant("nirvana", 0.2), Variant("flap", 0.5, reconstruct=True)):
        with pytest.raises(KeyboardInterrupt):
            worker.model(variant)
    assert seen == [("nirvana", "python-code", False), ("flap", "python-code", True)]


def test_a_code_calibrated_report_drops_the_ablations_and_pairs_with_the_default_grid(tmp_path):
    from nirvana.bench.per_problem import per_problem_text

    default = BaselinesConfig(model="smollm2-135m", out_dir=tmp_path, sparsities=(0.2,), lambada_limit=0)
    code = replace(default, out_dir=tmp_path / "calib-python-code", calib="python-code")
    code.out_dir.mkdir()
    name = "nirvana s=0.2 gamma*"
    for config, ppl, bpb in ((default, 60.0, [0.9, 1.0, 1.1, 1.2]), (code, 70.0, [0.8, 0.8, 0.9, 0.9])):
        for row in _rows("nirvana", 0.2, 0.2, name, ppl, 0.45):
            store_row(config.csv_path, {**row, "model": config.model}, COLUMNS, KEY)
        row = {**_facts("nirvana", 0.2, 0.2, name), "measure": "mbpp_bpb", "limit": 4, "n": 4}
        store_row(config.csv_path, {**row, "bpb": sum(bpb) / 4, "bpb_stderr": 0.05}, COLUMNS, KEY)
        config.per_problem_path.write_text(per_problem_text(config.per_problem_path, name, "mbpp_bpb", 4, bpb))
    plain = markdown(read_rows(default.csv_path), default)
    assert "(ablation)" in plain and "Calibrated on" not in plain  # the committed grids' Taylor / Wanda rows
    text = markdown(read_rows(code.csv_path), code)
    assert "(ablation)" not in text and "Ablation rows" not in text
    assert "calibration batch (32 x 128 tokens of python-code, seed 0)" in text
    assert "reconstructed, on python-code, not on wikitext2-valid" in text and "`../baselines-smollm2-135m.csv`" in text
    row = next(line for line in text.split("against wikitext2-valid")[1].splitlines() if line.startswith(f"| {name}"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[1] == "70.00 / 60.00" and cells[4] == "0.850 ± 0.050 / 1.050 ± 0.050"
    # here − there per problem: -0.1, -0.2, -0.2, -0.3: mean -0.2, sd 0.0816 over 4 problems
    assert cells[5] == "-0.2000 ± 0.0408 (4.9 se, resolved)"
