"""`bench distill` (issue 25): the grid's order, its refusals, and real rows on a tiny model (resumable)."""

from __future__ import annotations

import pytest

from nirvana.bench.base import run
from nirvana.bench.distill import BUDGETS, DISTILL, RECIPES, ROWS, DistillConfig, plan_jobs
from nirvana.bench.rows import read_rows
from nirvana.errors import InvalidInput


def test_every_pruned_model_and_recipe_at_the_smallest_budget_first():
    jobs = plan_jobs(DistillConfig())
    assert len(jobs) == len(ROWS) * len(RECIPES) * len(BUDGETS)
    first = jobs[: len(ROWS) * len(RECIPES)]
    assert {j.budget for j in first} == {min(BUDGETS)}
    assert [(j.criterion, j.sparsity, j.recipe) for j in first[:3]] == [
        ("nirvana", 0.2, "lm-lora"),
        ("nirvana", 0.2, "kd-lora"),
        ("nirvana", 0.2, "kd-full"),
    ]
    config = DistillConfig()
    full, lora = config.recovery_config("kd-full", 8192), config.recovery_config("lm-lora", 8192)
    assert (full.loss, full.train, full.lr) == ("kd", "full", 2e-5) and (lora.loss, lora.lr) == ("lm", 1e-4)
    assert full.total_tokens == 8192 and full.eval_every == 0


def test_bad_recipes_and_budgets_are_refused():
    with pytest.raises(InvalidInput, match="unknown recipe 'kd-qlora'"):
        DistillConfig(recipes=("kd-qlora",))
    with pytest.raises(InvalidInput, match="--budgets must be positive"):
        DistillConfig(budgets=(0,))


def test_bench_distill_cli_refuses_bad_flags(capsys, tmp_path):
    from nirvana.cli import main

    code = main(["bench", "distill", "--recipes", "lm-lora,sgd", "--out-dir", str(tmp_path / "d")])
    err = capsys.readouterr().err
    assert code == 2 and "unknown recipe 'sgd'" in err and "Traceback" not in err
    assert not (tmp_path / "d").exists()


def tiny_grid(model_dir, corpus, **overrides) -> dict:
    """DistillConfig settings for a tiny model on a small corpus (conftest's): one random 50% row, 64 training
    tokens."""
    return (
        dict(
            model=str(model_dir),
            rows=(("random", "uniform", 0.5),),
            budgets=(64,),
            data=str(corpus),
            tokens=64,
            window=16,
            kl_sequences=2,
            acc_limit=0,
            threads=1,
            recovery=dict(batch_size=2, micro_batch_size=1, seq_len=16, r=4, eval_sequences=2),
        )
        | overrides
    )


def test_rows_on_a_tiny_model_resume(tiny_with_tokenizer_dir, corpus, tmp_path, monkeypatch):
    grid = tiny_grid(tiny_with_tokenizer_dir, corpus, recipes=("lm-lora", "kd-full"), out_dir=tmp_path / "bench")
    config = DistillConfig(**grid)
    rows = run(DISTILL, config, lambda m: None)
    assert [(r["recipe"], r["loss"], r["train"]) for r in rows] == [
        ("lm-lora", "lm", "lora"),
        ("kd-full", "kd", "full"),
    ]
    for r in rows:
        assert int(r["tokens_trained"]) == 64 and float(r["kl_before"]) > 0 and float(r["ppl_ptb_after"]) > 1
        assert r["ppl_wikitext2_before"] == rows[0]["ppl_wikitext2_before"]  # one pruned model, measured once
    md = (tmp_path / "bench" / f"distill-{config.model.replace('/', '_')}.md").read_text()
    assert "| random (uniform) 0.5 | kd-full | 64 |" in md and "best" in md
    assert (tmp_path / "bench" / f"distill-{config.model.replace('/', '_')}.png").exists()
    logs = []
    run(DISTILL, config, logs.append)
    assert "0 to run" in logs[0]  # resumed: nothing re-run
    assert len(read_rows(config.csv_path)) == 2

    # A larger budget in a new process: the pruned model's "before" comes from the rows already there.
    import dataclasses

    from nirvana.bench.distill import DistillWorker

    measured = []
    real = DistillWorker.measure
    monkeypatch.setattr(DistillWorker, "measure", lambda self, model: measured.append(1) or real(self, model))
    more = dataclasses.replace(config, budgets=(64, 128), recipes=("lm-lora",))
    logs = []
    (new,) = [r for r in run(DISTILL, more, logs.append) if r["budget"] == "128"]
    assert new["recipe"] == "lm-lora" and len(measured) == 1  # "after" only
    assert any("before from the row of lm-lora 64" in m for m in logs)
    for name in ("ppl_wikitext2_before", "ppl_ptb_before", "kl_before"):
        assert float(new[name]) == float(rows[0][name])
    # Measured another way (here: another perplexity budget), the recorded figures do not apply.
    measured.clear()
    other = dataclasses.replace(more, tokens=48, budgets=(96,))
    run(DISTILL, other, logs.append)
    assert len(measured) == 2  # before and after


def test_readme_summary_counts_the_grid_and_names_the_best_recipe_per_budget():
    from nirvana.bench.distill_report import readme_summary

    base = {"criterion": "nirvana", "allocation": "global", "sparsity": "0.2", "budget": "8192", "kl_after": "0.6"}
    rows = [{**base, "recipe": "lm-lora", "ppl_wikitext2_after": "57.7"},
            {**base, "recipe": "kd-lora", "ppl_wikitext2_after": "57.9"},
            {**base, "recipe": "kd-full", "ppl_wikitext2_after": "54.7"}]  # fmt: skip
    text = readme_summary(rows, DistillConfig(model="smollm2-135m"), pending=45)
    assert "in progress: 3 of 48 rows measured, 45 to run" in text
    best = "- nirvana (global) 0.2, 8,192 tokens: best kd-full (WikiText-2 54.7, KL 0.6); lm-lora 57.7, kd-lora 57.9\n"
    assert best in text
    assert "(complete; resumable)" in readme_summary(rows, DistillConfig(model="smollm2-135m"), pending=0)
    assert "lowest first" not in text  # one pruned model: nothing to rank
    # A budget whose recipes are not all measured says so, rather than naming a winner.
    partial = readme_summary(rows[:1], DistillConfig(model="smollm2-135m"), pending=47)
    assert "8,192 tokens: best so far lm-lora (WikiText-2 57.7, KL 0.6); kd-lora, kd-full not run yet" in partial


def test_the_ranking_orders_the_pruned_models_of_one_sparsity_per_budget_and_recipe():
    from nirvana.bench.distill_report import ranking, readme_summary

    def row(criterion, sparsity, recipe, ppl, budget="8192"):
        return {"criterion": criterion, "allocation": "global", "sparsity": sparsity, "budget": budget,
                "recipe": recipe, "ppl_wikitext2_after": ppl, "kl_after": "0.5"}  # fmt: skip

    rows = [row("nirvana", "0.2", "lm-lora", "57.7"), row("taylor", "0.2", "lm-lora", "52.3"),
            row("taylor", "0.2", "kd-full", "49.6"), row("nirvana", "0.2", "kd-full", "48.1"),
            row("nirvana", "0.5", "lm-lora", "219.6"), row("nirvana", "0.2", "lm-lora", "56.4", "16384")]  # fmt: skip
    assert ranking(rows) == [
        "- 8,192 tokens, 0.2 sparsity, kd-full: nirvana 48.1 < taylor 49.6",
        "- 8,192 tokens, 0.2 sparsity, lm-lora: taylor 52.3 < nirvana 57.7",
    ]  # 50% has one model and 16k one row: not ranked
    assert ranking(rows)[0] in readme_summary(rows, DistillConfig(model="smollm2-135m"), pending=42)


def test_a_teacher_cache_serves_every_distillation_row_after_the_first(tiny_with_tokenizer_dir, corpus, tmp_path):
    two = (("random", "uniform", 0.5), ("magnitude", "uniform", 0.5))
    settings = tiny_grid(tiny_with_tokenizer_dir, corpus, rows=two, recipes=("kd-lora",))
    cached = run(DISTILL, DistillConfig(**settings, out_dir=tmp_path / "a", teacher_cache=str(tmp_path / "c")), print)
    plain = run(DISTILL, DistillConfig(**settings, out_dir=tmp_path / "b"), print)
    first, second = cached
    assert first["teacher_logits"] == "read 2 of 8" and second["teacher_logits"] == "read 8 of 8"  # 4 steps + 2 x 2
    assert [p["teacher_logits"] for p in plain] == ["computed", "computed"]
    for name in ("ppl_wikitext2_after", "kl_after", "ppl_ptb_after"):  # fp32 logits: the same figures
        assert [r[name] for r in cached] == [r[name] for r in plain]
    md = next((tmp_path / "a").glob("*.md")).read_text()
    assert "(teacher logits read 2 of 8) |" in md and "(teacher logits read 8 of 8) |" in md
